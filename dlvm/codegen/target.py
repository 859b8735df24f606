"""What the target CPU offers the kernels: the vector width compute-scheduling plans for (512
bits where the CPU has AVX-512, else 256: AVX2, the x86-64 baseline of our builds), and whether
it has AVX-512 BF16 (`vdpbf16ps`: bf16 products packed in pairs, dlvm.codegen.bf16_pairs) and
AVX512-VNNI (`vpdpbusd`: `--quantize int8`'s products, dlvm.codegen.matmul_int8)."""

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
def _host_features() -> frozenset[str]:
    llvm.initialize_native_target()
    return frozenset(llvm.get_host_cpu_features().flatten().split(","))


def _has(cpu: str, cpus: frozenset[str], *features: str) -> bool:
    """Whether `cpu` is one of `cpus` or, for `native`, the host has every one of `features`."""
    if cpu == "native":
        return all(f"+{f}" in _host_features() for f in features)
    return cpu in cpus


def has_avx512bf16(cpu: str = "native") -> bool:
    """Whether `cpu` (an LLVM CPU name, or `native`: the host's features) has AVX-512 BF16."""
    return _has(cpu, AVX512_BF16_CPUS, "avx512bf16")


def has_vnni(cpu: str = "native") -> bool:
    """Whether int8 products for `cpu` may use vpdpbusd (dlvm.codegen.matmul_int8)."""
    return _has(cpu, VNNI_CPUS, "avx512vnni", "avx512bw")


def vector_bits(cpu: str = "native") -> int:
    """The widest vector the kernels for `cpu` should use."""
    return 512 if _has(cpu, AVX512_CPUS, "avx512f") else 256
