"""dlvm.load in another process, so that a library that crashes the process it is loaded into
fails a test instead of killing the test's worker: one long-lived process loads library after
library (and calls its infer entry), says how each went, and is started again after a crash."""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

PROGRAM = r"""
import sys
import numpy as np
import dlvm
import dlvm.loader

REFUSED = getattr(dlvm.loader, "LibraryFileError", ())  # none before dlvm.load checked files

VERIFY = {"default": {}, "required": {"verify": True}, "off": {"verify": False}}
for line in sys.stdin:
    path, verify, shape = line.rstrip("\n").split("\t")
    try:
        with dlvm.load(path, **VERIFY[verify]) as model:
            y = model.infer(np.ones([int(d) for d in shape.split(",")], np.float32))
        print("loaded", float(np.sum(y)), flush=True)
    except REFUSED as e:
        print("refused", e.reason.replace("\n", " "), flush=True)
    except Exception as e:
        print("error", type(e).__name__, str(e).replace("\n", " "), flush=True)
"""


class LoadProbe:
    """`probe(path, verify)`: "loaded SUM" (the sum of infer's output on ones), "refused
    REASON" (a LibraryFileError), "error TYPE MESSAGE" (another exception), "crashed STATUS"
    or "hung"."""

    def __init__(self, shape: tuple[int, ...], timeout: float = 60.0) -> None:
        self.shape = ",".join(map(str, shape))
        self.timeout = timeout
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-c", PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        return self.process

    def __call__(self, path: Path, verify: str = "default") -> str:
        process = self.start()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(f"{path}\t{verify}\t{self.shape}\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([process.stdout], [], [], self.timeout)
        line = process.stdout.readline() if ready else None
        if line:
            return line.rstrip("\n")
        if line is None:
            process.kill()
            process.wait()
            return "hung"
        return f"crashed {process.wait()}"

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait()
