"""The NumPy peer in a process of its own, started with an environment the benchmark chooses
(OPENBLAS_CORETYPE=SkylakeX: OpenBLAS reads it once, at load, to pick its AVX-512 kernels).
Reads `CASE RUNS` lines on stdin and answers each with a JSON list of RUNS times in seconds, or
null when NumPy has no runner for the case."""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import inputs  # noqa: E402
from peers import numpy_maker  # noqa: E402


def main() -> int:
    runners: dict[str, object] = {}
    for line in sys.stdin:
        case, runs = line.split()
        if case not in runners:
            runner = numpy_maker(case)(inputs(case))
            if runner is not None:
                runner()  # warm up
            runners[case] = runner
        run = runners[case]
        times = None
        if callable(run):
            times = []
            for _ in range(int(runs)):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
