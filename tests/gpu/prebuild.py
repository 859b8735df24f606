"""Builds the libraries tests/gpu runs (every instruction case, every sample, digits built
with --distributed as digits_distributed, and the bf16 tensor-core products, all for CUDA)
into a directory, where the compiler is installed; a GPU machine then runs the tests on them
with DLVM_GPU_PREBUILT=DIR (it needs only NumPy, lark and this checkout there, and CuPy with
NCCL for test_distributed_gpu.py):

    python tests/gpu/prebuild.py gpu-build
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))

from telhelp import sample_names  # noqa: E402
from test_distributed_gpu import built_distributed  # noqa: E402
from test_gpu import built  # noqa: E402
from test_gpu_bf16 import built_bf16  # noqa: E402


def main(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ["ops", *sample_names()]:
        path = built(name, directory)
        print(f"built {path}", flush=True)
    print(f"built {built_distributed(directory)}", flush=True)
    print(f"built {built_bf16(directory)}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-build"))
