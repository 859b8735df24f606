"""Calls a zoo library's C functions (tests/unit/modellib.py) with the arguments a fuzzer
describes, in a process of its own, so that a crash is the fuzzer's failure and not its worker's:
`python c_entry_worker.py LIBRARY DIRECTORY` reads one call per line (JSON, see `call`) and
writes one result per line: the status, the message, and whether a failed call changed the
model. Files are made only inside DIRECTORY."""

from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
from typing import Any

from dlvm.runtime import DLDataType, DLDevice, DLTensor, DType

# The zoo's entries: each argument's dtype and shape (modellib.SPEC), inputs then outputs.
ENTRIES: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    "infer": [("f32", (3,)), ("f32", (2,))],
    "train": [("f32", (3,)), ("f32", ())],
    "mix": [("i64", (2, 2)), ("bool", (2,)), ("i64", (2,)), ("i16", ())],
}
PARAMS = ["W", "b", "k", "mask", "h", "c", "n", "z"]
SLACK = 2048  # bytes after each buffer, so an in-range byte_offset stays inside it


class Worker:
    def __init__(self, library: str, directory: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.directory = directory
        self.lib.dlrt_last_error.restype = ctypes.c_char_p
        self.keep: list[Any] = []
        self.model = ctypes.c_void_p()
        create = self.lib.zoo_create
        create.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p]
        assert create(b"cpu", 1, ctypes.byref(self.model)) == 0
        self.lib.zoo_destroy.argtypes = [ctypes.c_void_p]

    def buffer(self, nbytes: int) -> int:
        """A zeroed, 64-byte aligned buffer of nbytes + SLACK bytes, kept until the call ends."""
        raw = ctypes.create_string_buffer(nbytes + SLACK + 64)
        self.keep.append(raw)
        address = ctypes.addressof(raw)
        return address + (-address % 64)

    def params(self) -> bytes:
        """Every parameter's bytes, through zoo_get_param."""
        out = b""
        for name in PARAMS:
            buf = ctypes.create_string_buffer(64)
            assert self.lib.zoo_get_param(self.model, name.encode(), buf) == 0
            out += buf.raw
        return out

    def tensor(self, spec: dict[str, Any] | None) -> int:
        """The address of a DLTensor as `spec` describes it (0 for None)."""
        if spec is None:
            return 0
        shape: Any = None
        strides: Any = None
        if spec["shape"] is not None:
            shape = (ctypes.c_int64 * max(1, len(spec["shape"])))(*spec["shape"])
        if spec["strides"] is not None:
            strides = (ctypes.c_int64 * max(1, len(spec["strides"])))(*spec["strides"])
        data = 0 if spec["data"] is None else self.buffer(spec["data"]) + spec["misalign"]
        code, bits, lanes = spec["dtype"]
        t = DLTensor(
            data=data or None,
            device=DLDevice(*spec["device"]),
            ndim=spec["ndim"],
            dtype=DLDataType(code, bits, lanes),
            shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=spec["byte_offset"],
        )
        self.keep += [shape, strides, t]
        return ctypes.addressof(t)

    def model_arg(self, call: dict[str, Any]) -> int | None:
        return self.model.value if call.get("model", True) else None

    def call(self, call: dict[str, Any]) -> tuple[int, bool]:
        """Runs one call; its status and whether it had the model's parameters change."""
        fn = call["fn"]
        before = self.params()
        if fn in ENTRIES:
            sizes = [DType.from_ir(d).size * max(1, _count(s)) for d, s in ENTRIES[fn]]
            args = [self.buffer(n) if ok else None for n, ok in zip(sizes, call["args"])]
            f = getattr(self.lib, f"zoo_{fn}")
            f.argtypes = [ctypes.c_void_p] * (1 + len(args))
            status = f(self.model_arg(call), *args)
        elif fn.endswith("_dl"):
            f = getattr(self.lib, f"zoo_{fn}")
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            table = None
            if call["args"] is not None:
                table = (ctypes.c_void_p * 4)(*[self.tensor(t) for t in call["args"]])
                self.keep.append(table)
            status = f(self.model_arg(call), table)
        elif fn in ("get_param", "set_param"):
            f = getattr(self.lib, f"zoo_{fn}")
            f.argtypes = [ctypes.c_void_p] * 3
            name = None if call["name"] is None else base64.b64decode(call["name"])
            status = f(self.model_arg(call), name, self.buffer(64) if call["buffer"] else None)
        elif fn in ("save", "load"):
            f = getattr(self.lib, f"zoo_{fn}")
            f.argtypes = [ctypes.c_void_p] * 2
            path = call["path"]
            if path is not None:
                relative = base64.b64decode(path)
                assert b".." not in relative.split(b"/"), "only files inside the directory"
                path = os.path.join(os.fsencode(self.directory), relative)
            status = f(self.model_arg(call), path)
        elif fn == "crash":  # what a crash looks like to the fuzzer (its own test)
            ctypes.string_at(0)
            status = 0
        else:  # create
            out = ctypes.c_void_p(1)
            device = None if call["device"] is None else base64.b64decode(call["device"])
            where = ctypes.byref(out) if call["out"] else None
            status = self.lib.zoo_create(device, call["seed"], where)
            assert status != 0 or out.value, "create succeeded without a model"
            assert status == 0 or not call["out"] or out.value is None, "a failed create set *out"
            self.lib.zoo_destroy(out.value if status == 0 else None)
        changed = status != 0 and self.params() != before
        self.keep.clear()
        return status, changed


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def main() -> None:
    worker = Worker(sys.argv[1], sys.argv[2])
    for line in sys.stdin:
        status, changed = worker.call(json.loads(line))
        message = worker.lib.dlrt_last_error().decode("utf-8", "replace") if status else ""
        print(json.dumps({"status": status, "message": message, "changed": changed}), flush=True)


if __name__ == "__main__":
    main()
