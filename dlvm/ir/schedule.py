"""How a function runs, decided at stage schedule (docs/ir.md, "Stages"), printed as one line
before `func`: `[schedule cpu parallel 1 vectorize 8 grain 4096]` for a compute function,
`[schedule host]` for a host function (whose frame dlvm/codegen/frame.py plans). The first word
is the target; then `key value` pairs, a value being an integer or integers joined by `x`
(`tile 64 x 256`)."""

from __future__ import annotations

from dataclasses import dataclass

TARGETS = ("cpu", "cuda", "host")


@dataclass(frozen=True)
class Schedule:
    target: str
    items: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def get(self, key: str, default: int = 0) -> int:
        for k, v in self.items:
            if k == key:
                return v[0]
        return default

    def get_all(self, key: str) -> tuple[int, ...] | None:
        for k, v in self.items:
            if k == key:
                return v
        return None

    def __str__(self) -> str:
        words = ["schedule", self.target]
        for k, v in self.items:
            words += [k, " x ".join(map(str, v))]
        return "[" + " ".join(words) + "]"
