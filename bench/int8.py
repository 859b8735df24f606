"""The MLP 784-512-256-10 at batch 1 (bench/cpu.py's mlp_b1) built with and without
`--quantize int8`, against ONNX Runtime in f32 and with its dynamic int8 quantisation
(onnxruntime.quantization.quantize_dynamic, int8 weights), all on one thread (run with
DLRT_NUM_THREADS=1; ONNX Runtime gets intra_op_num_threads=1), timed in one process in CPU
seconds (time.process_time: the host is shared), interleaved block by block. Prints the median
µs per call of each, the ratios of the goals of issue 28 (ours int8 ≤ 0.5× ONNX Runtime f32,
≤ 0.8× its int8) and each int8 output's largest difference from f32. Needs bench/.venv."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import MLP, build, inputs  # noqa: E402
from peers import _onnx_graph  # noqa: E402


def ort_session(model: Path, x: np.ndarray) -> tuple[Callable[[], None], np.ndarray]:
    """An ONNX Runtime session of `model` on one thread, bound to x and its output."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    out = np.empty((x.shape[0], 10), np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    return lambda: session.run_with_iobinding(binding), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--calls", type=int, default=400, help="calls per block")
    args = parser.parse_args()
    if os.environ.get("DLRT_NUM_THREADS") != "1":
        print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    inp = inputs("mlp_b1")
    x = inp["x"]
    calls: dict[str, Callable[[], None]] = {}
    outputs: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="dlvm-int8-") as tmp:
        d = Path(tmp)
        for mode, quantize in (("ours f32", None), ("ours int8", "int8")):
            model = build(MLP, mode.replace(" ", "_"), d, {"B": 1}, quantize=quantize)
            for k, v in inp["params"].items():
                model.set_param(k, v)
            out = np.empty((1, 10), np.float32)
            calls[mode] = lambda model=model, out=out: model.infer(x, out=out)
            outputs[mode] = out
        blob, _ = _onnx_graph("mlp_b1", inp) or (b"", [])
        (d / "f32.onnx").write_bytes(blob)
        quantize_dynamic(d / "f32.onnx", d / "int8.onnx", weight_type=QuantType.QInt8)
        for mode, file in (("onnxruntime f32", "f32.onnx"), ("onnxruntime int8", "int8.onnx")):
            calls[mode], outputs[mode] = ort_session(d / file, x)
        for fn in calls.values():  # warm up; every output filled
            fn()
        times: dict[str, list[float]] = {mode: [] for mode in calls}
        for _ in range(args.blocks):
            for mode, fn in calls.items():
                t0 = time.process_time()
                for _ in range(args.calls):
                    fn()
                times[mode].append((time.process_time() - t0) / args.calls)
    print(f"mlp_b1 (784-512-256-10, batch 1), one thread; median of {args.blocks} blocks of")
    print(f"{args.calls} calls (process time)")
    print("| build | µs | largest difference from ours f32 |")
    print("|---|---:|---:|")
    med = {mode: statistics.median(t) for mode, t in times.items()}
    for mode, m in med.items():
        gap = np.abs(outputs[mode] - outputs["ours f32"]).max()
        print(f"| {mode} | {m * 1e6:.1f} | {gap:.1e} |")
    for peer, goal in (("onnxruntime f32", 0.5), ("onnxruntime int8", 0.8)):
        ratio = med["ours int8"] / med[peer]
        verdict = "met" if ratio <= goal else "not met"
        print(f"ours int8 / {peer}: {ratio:.2f} (goal <= {goal}: {verdict})")
    print(f"ours int8 / ours f32: {med['ours int8'] / med['ours f32']:.2f}")


if __name__ == "__main__":
    main()
