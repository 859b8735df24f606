"""How long the fuzzers run: briefly and reproducibly in `make test` (a fixed seed, a few
dozen examples each), at length under `make fuzz` (DLVM_FUZZ=long: many more examples, a random
seed, so every run explores new inputs). Each fuzzer's contract is the same: no traceback, no
exit status 3, no crash, no hang, every error located."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG = os.environ.get("DLVM_FUZZ") == "long"


def fuzz_settings(short: int, long: int | None = None) -> settings:
    """Hypothesis settings for a fuzzer: `short` examples with a fixed seed in `make test`,
    `long` (default 50 × short) with a random seed under `make fuzz`."""
    return settings(
        max_examples=(long if long is not None else 50 * short) if LONG else short,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=LONG,
    )
