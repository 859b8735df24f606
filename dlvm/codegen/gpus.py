"""The CUDA architectures a library's kernels can be built for (`--gpu`), kept apart from
dlvm.codegen.cuda so that command-line tools can list them without loading LLVM."""

DEFAULT_GPU = "sm_90"
# Ampere (A100, RTX 30), Ada (RTX 40, L4) and Hopper (H100, H200); the driver must accept
# PTX ISA 7.0, 7.4, 7.8 and 7.8 respectively (what LLVM emits for each).
GPUS = ("sm_80", "sm_86", "sm_89", "sm_90")
