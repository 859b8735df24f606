"""dlvm.distributed over MPI: samples/digits.tel trained by 2 ranks (each library built with
-D B=16, the per-rank batch) against 1 process on the whole batch, through mpiexec
(tests/unit/distributed_worker.py is one rank). Every launch is bounded by a timeout; the tests
that need MPI are skipped where there is none (telc[mpi] installs it).

The 2-rank runs end with the 1-process result up to rounding, not bitwise: the 1-process
gradient sums 32 rows in one reduction, the 2-rank one sums 16 rows per rank, then the two
partial means, then scales by 1/2, so the float32 sums are rounded in a different order. After
20 steps the largest difference measured is about 2e-7 of the parameters' largest magnitude
(SGD, float32), 3e-16 (float64) and 2e-6 (Adam, float32, which divides by sqrt(v)); the tests
assert 1e-5, 1e-12 and 1e-4 of it, far below what a wrong scale or a missing rank's gradients
would change (a whole update, about 1e-2 of it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed_worker import batch
from mpilaunch import TIMED_OUT, launch, needs_mpi

import dlvm
from dlvm.distributed import DataParallel, shard
from dlvm.distributed.mpi import mpi_module
from dlvm.loader import DeviceBuffer

WORKER = Path(__file__).with_name("distributed_worker.py")
DIGITS = Path(__file__).resolve().parents[2] / "samples" / "digits.tel"
SEED = 5  # rank R's model is created with SEED + R: rank 0's parameters reach every rank
STEPS = 20
ROWS = 32  # each step's whole batch: 16 rows per rank
LAUNCH_TIMEOUT = 60.0


def digits_text(optimiser: str, dtype: str) -> str:
    text = DIGITS.read_text(encoding="utf-8")
    text = text.replace("using sgd(rate: 0.1)", f"using {optimiser}")
    return text.replace("type float32", f"type {dtype}")


OPTIMISERS = {"sgd": "sgd(rate: 0.1)", "adam": "adam(rate: 0.01)"}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """library(optimiser, dtype, rows): digits with that optimiser and element type, built
    with --distributed for a batch of `rows`, once per test module and process."""
    from dlvm.codegen.build import build_library  # LLVM, only for the tests that build
    from telc.driver import compile_text, optimize

    directory = tmp_path_factory.mktemp("distributed")
    built: dict[tuple[str, str, int], Path] = {}

    def get(optimiser: str, dtype: str, rows: int) -> Path:
        key = (optimiser, dtype, rows)
        if key not in built:
            text = digits_text(OPTIMISERS[optimiser], dtype)
            compiled = compile_text(str(DIGITS), text, {"B": rows}, distributed=True)
            optimize(compiled.module)
            path = directory / f"digits_{optimiser}_{dtype}_{rows}.so"
            build_library(compiled.module, compiled.spec, path)
            built[key] = path
        return built[key]

    return get


def run_ranks(library: Path, out: Path, *args: str, ranks: int = 2) -> list[dict[str, np.ndarray]]:
    """The worker under mpiexec, which must succeed; each rank's record."""
    out.mkdir(parents=True, exist_ok=True)
    done = launch(WORKER, ranks, [str(library), str(out), *args], timeout=LAUNCH_TIMEOUT)
    assert done.rc == 0, f"status {done.rc}\n{done.stdout}\n{done.stderr}"
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(ranks)]


def one_process(library: Path, steps: range, rows: int, dtype=np.float32):
    """The model trained by one process (no all-reduce) on the first `rows` rows of each
    step's batch: its losses and the model itself (open)."""
    model = dlvm.load(library, seed=SEED)
    losses = [model.train_step(*(a[:rows] for a in batch(s, ROWS, dtype))) for s in steps]
    return np.array(losses), model


def checkpoint(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def assert_close_to_scale(got: dict, want: dict, fraction: float) -> None:
    """Every parameter of `want` within `fraction` of its largest magnitude of `got`'s."""
    for name, value in want.items():
        worst = np.max(np.abs(got[name] - value))
        assert worst <= fraction * np.max(np.abs(value)), (name, worst)


def params_of(record: dict[str, np.ndarray], names) -> dict[str, np.ndarray]:
    return {n: record[n] for n in names}


# -- 2 ranks against 1 process ------------------------------------------------------------------


@needs_mpi
@pytest.mark.parametrize(
    "dtype, fraction, loss_tolerance", [("float32", 1e-5, 1e-5), ("float64", 1e-12, 1e-12)]
)
def test_two_ranks_train_as_one_process_on_the_whole_batch(
    library, tmp_path, dtype, fraction, loss_tolerance
):
    """2 ranks x 16 rows (different initial parameters: rank 1's are replaced by rank 0's)
    end with the parameters of 1 process x 32 rows, up to the rounding of the module
    docstring, and every step's loss is the mean over the 32 rows."""
    ranks = run_ranks(library("sgd", dtype, 16), tmp_path, "--dtype", dtype, "--seed", str(SEED))
    losses, model = one_process(library("sgd", dtype, ROWS), range(STEPS), ROWS, np.dtype(dtype))
    with model:
        for record in ranks:
            assert_close_to_scale(params_of(record, model.params), model.params, fraction)
            np.testing.assert_allclose(record["losses"], losses, rtol=0, atol=loss_tolerance)
        for name in model.params:
            assert np.array_equal(ranks[0][name], ranks[1][name]), name


@needs_mpi
def test_two_ranks_on_identical_shards_are_bitwise_one_process(library, tmp_path):
    """Given the same 16 rows, 2 ranks compute the same gradients, and (g + g) * 0.5 == g
    exactly: parameters, Adam's moments and the step count equal 1 process's bitwise."""
    lib = library("adam", "float32", 16)
    ranks = run_ranks(lib, tmp_path, "--same-shards", "--seed", str(SEED))
    losses, model = one_process(lib, range(STEPS), 16)
    with model:
        model.save(tmp_path / "one.safetensors")
        for r, record in enumerate(ranks):
            assert np.array_equal(record["losses"], losses)
            got, want = (
                checkpoint(tmp_path / f"rank{r}.safetensors"),
                checkpoint(tmp_path / "one.safetensors"),
            )
            assert sorted(got) == sorted(want)
            for name in want:
                assert np.array_equal(got[name], want[name]), (r, name)


# -- Adam, checkpoints and resuming -------------------------------------------------------------

SAVE_AT = 10


@pytest.fixture(scope="module")
def adam_run(library, tmp_path_factory):
    """2 ranks x 16 rows, Adam, 20 steps, a checkpoint saved through DataParallel after 10."""
    out = tmp_path_factory.mktemp("adam")
    (out / "checkpoints").mkdir()
    ranks = run_ranks(
        library("adam", "float32", 16),
        out,
        "--seed",
        str(SEED),
        "--save-at",
        str(SAVE_AT),
        "--checkpoint",
        str(out / "checkpoints" / "step10.safetensors"),
    )
    return out, ranks


@needs_mpi
def test_adam_state_is_the_same_on_every_rank(adam_run):
    out, _ = adam_run
    first, second = (checkpoint(out / f"rank{r}.safetensors") for r in range(2))
    assert {n for n in first if n.endswith(("_m", "_v"))} >= {"W1_m", "W1_v", "b2_m", "b2_v"}
    assert int(first["__step__"]) == STEPS
    for name in first:
        assert np.array_equal(first[name], second[name]), name


@needs_mpi
def test_checkpoint_is_written_by_rank_0_only_and_there_when_save_returns(adam_run):
    out, ranks = adam_run
    assert [int(r["saves"]) for r in ranks] == [1, 0]
    assert all(bool(r["checkpoint_there"]) for r in ranks)
    assert sorted(os.listdir(out / "checkpoints")) == ["step10.safetensors"]
    assert int(checkpoint(out / "checkpoints" / "step10.safetensors")["__step__"]) == SAVE_AT


@needs_mpi
def test_resuming_with_one_process_continues_the_two_rank_run(library, adam_run):
    """The 2-rank checkpoint after 10 steps, loaded by 1 process x 32 rows (a model created
    with another seed: everything comes from the file), then 10 more steps, ends where the
    2-rank run did after 20 (Adam's tolerance: module docstring)."""
    out, ranks = adam_run
    lib = library("adam", "float32", ROWS)
    with dlvm.load(lib, seed=SEED + 100) as model:
        model.load(out / "checkpoints" / "step10.safetensors")
        losses = [model.train_step(*batch(s, ROWS)) for s in range(SAVE_AT, STEPS)]
        assert_close_to_scale(params_of(ranks[0], model.params), model.params, 1e-4)
        np.testing.assert_allclose(ranks[0]["losses"][SAVE_AT:], losses, rtol=0, atol=1e-5)


# -- a failing rank -----------------------------------------------------------------------------


@needs_mpi
def test_a_rank_whose_hook_fails_stops_the_job_with_every_model_unchanged(library, tmp_path):
    """Rank 1's all-reduce raises at step 3; rank 0's times out (5 s). Neither step changes
    its model, both report on stderr, and the job ends non-zero within the bound."""
    lib = library("adam", "float32", 16)
    args = [str(lib), str(tmp_path), "--fail-rank", "1", "--fail-at", "3", "--timeout", "5"]
    done = launch(WORKER, 2, args, timeout=LAUNCH_TIMEOUT)
    assert done.rc not in (0, TIMED_OUT), f"status {done.rc}\n{done.stderr}"
    assert done.seconds < 30
    assert "planted failure at step 3" in done.stderr
    assert "did not finish in 5 s: another rank failed or stopped" in done.stderr
    records = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    names = [n for n in records[0] if n.startswith("before.")]
    assert len(names) == 4
    for r, record in enumerate(records):
        assert int(record["failed_at"]) == 2
        for before in names:
            after = before.removeprefix("before.")
            assert np.array_equal(record[before], record[after]), (r, after)
            assert np.array_equal(record[after], records[0][after]), (r, after)
        assert int(checkpoint(tmp_path / f"rank{r}.safetensors")["__step__"]) == 2


# -- without MPI --------------------------------------------------------------------------------


class Recorder:
    """A Communicator of `size` processes seen from `rank`, which records what it is asked."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size, self.calls = rank, size, []

    def allreduce(self, buffer: np.ndarray | DeviceBuffer) -> None:
        self.calls.append("allreduce")

    def broadcast(self, array: np.ndarray, root: int = 0) -> None:
        self.calls.append(f"broadcast from {root}")
        array[...] = 0.25  # what root would send

    def barrier(self) -> None:
        self.calls.append("barrier")


def test_data_parallel_takes_roots_parameters_and_only_root_saves(library, tmp_path):
    lib = library("sgd", "float32", 16)
    comm = Recorder(rank=1, size=2)
    with dlvm.load(lib, seed=SEED) as model:
        dp = DataParallel(model, comm)
        assert comm.calls == ["broadcast from 0"] * 4
        assert all(np.all(p == 0.25) for p in model.params.values())
        dp.save(tmp_path / "ckpt.safetensors")
        assert not (tmp_path / "ckpt.safetensors").exists()
        assert comm.calls[-1] == "barrier"
        comm.rank = 0
        dp.save(tmp_path / "ckpt.safetensors")
        assert (tmp_path / "ckpt.safetensors").exists()
        comm.calls.clear()
        dp.load(tmp_path / "ckpt.safetensors")
        assert comm.calls == ["barrier"]


def test_a_library_built_without_distributed_is_refused_with_the_fix(tmp_path):
    from telhelp import build_sample

    refused = "built without --distributed.*telc build --distributed"
    with (
        dlvm.load(build_sample("xor", tmp_path)) as model,
        pytest.raises(ValueError, match=refused),
    ):
        DataParallel(model, Recorder(rank=0, size=2))


def test_shard_gives_each_rank_its_contiguous_slice():
    rows = np.arange(12).reshape(6, 2)
    assert [shard(rows, r, 3)[:, 0].tolist() for r in range(3)] == [[0, 2], [4, 6], [8, 10]]
    with pytest.raises(ValueError, match="a batch of 6 rows does not split into 4 equal shards"):
        shard(rows, 0, 4)
    with pytest.raises(ValueError, match="rank must be in"):
        shard(rows, 3, 3)


def test_missing_mpi4py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # `import mpi4py` raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'telc\[mpi\]'"):
        mpi_module()


BF16_SUM = """
import ml_dtypes
import numpy as np

from dlvm.distributed import MpiCommunicator

comm = MpiCommunicator(timeout=20)
# bf16 has no MPI type: the communicator sums it in f32 and rounds the sum to bf16.
block = np.array([1.0, 0.5 * (comm.rank + 1)], np.float32).astype(ml_dtypes.bfloat16)
comm.allreduce(block)
print(block.dtype, block.astype(np.float32).tolist())
"""


@needs_mpi
def test_bf16_blocks_are_summed(tmp_path):
    """A bf16 model's block (ml_dtypes) is summed, in place and still bf16 (it used to fail
    inside mpi4py, which has no bf16 type)."""
    script = tmp_path / "bf16_sum.py"
    script.write_text(BF16_SUM)
    done = launch(script, 2, timeout=60)
    assert done.rc == 0, done.report()
    assert done.rank_stdout == ("bfloat16 [2.0, 1.5]\n",) * 2, done.report()
