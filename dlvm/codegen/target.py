"""What the target CPU offers the kernels: the vector width compute-scheduling plans for (512
bits where the CPU has AVX-512, else 256: AVX2, the x86-64 baseline of our builds), and whether
it has AVX-512 BF16 (`vdpbf16ps`: bf16 products packed in pairs, dlvm.codegen.bf16_pairs)."""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

# LLVM CPU names with AVX-512 (AVX512F); `native` asks the host.
AVX512_CPUS = frozenset(
    [
        "x86-64-v4",
        "skylake-avx512",
        "cascadelake",
        "cooperlake",
        "cannonlake",
        "icelake-client",
        "icelake-server",
        "tigerlake",
        "rocketlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "znver4",
        "znver5",
        "knl",
        "knm",
    ]
)


# LLVM CPU names with AVX-512 BF16 (AVX512_BF16: vdpbf16ps, vcvtneps2bf16).
AVX512_BF16_CPUS = frozenset(
    [
        "cooperlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "znver4",
        "znver5",
    ]
)


@functools.cache
def _host_features() -> frozenset[str]:
    llvm.initialize_native_target()
    return frozenset(llvm.get_host_cpu_features().flatten().split(","))


def host_has_avx512() -> bool:
    return "+avx512f" in _host_features()


def has_avx512bf16(cpu: str = "native") -> bool:
    """Whether `cpu` (an LLVM CPU name, or `native`: the host's features) has AVX-512 BF16."""
    if cpu == "native":
        return "+avx512bf16" in _host_features()
    return cpu in AVX512_BF16_CPUS


def vector_bits(cpu: str = "native") -> int:
    """The widest vector the kernels for `cpu` should use."""
    if cpu == "native":
        return 512 if host_has_avx512() else 256
    return 512 if cpu in AVX512_CPUS else 256


# LLVM CPU names with AVX512-VNNI (vpdpbusd on 512-bit vectors) and AVX512BW.
VNNI_CPUS = frozenset(
    [
        "cascadelake",
        "cooperlake",
        "icelake-client",
        "icelake-server",
        "tigerlake",
        "rocketlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "znver4",
        "znver5",
    ]
)


@functools.cache
def host_has_vnni() -> bool:
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features().flatten().split(",")
    return "+avx512vnni" in features and "+avx512bw" in features


def has_vnni(cpu: str = "native") -> bool:
    """Whether int8 products for `cpu` may use vpdpbusd (dlvm.codegen.matmul_int8)."""
    return host_has_vnni() if cpu == "native" else cpu in VNNI_CPUS
