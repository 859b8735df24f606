"""The TEL samples (samples/*.tel) end to end on the interpreter: `init` gives parameters of the
declared shapes and initialisers; `infer` agrees with the independent NumPy models of
tel_reference in float64 (and closely in float32); `train_step` returns the objective of the
NumPy model, differentiates it correctly (the gradient, recovered from the optimiser's update,
matches central differences of the NumPy loss), applies the optimiser as stdlib/optim.tel's
NumPy model does, and lowers the loss; XOR is learnt exactly; `telc check` and
`telc build --emit ir/optimized` accept every sample."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
import tel_reference as ref
from click.testing import CliRunner
from telhelp import (
    Arrays,
    central_gradient,
    compiled_sample,
    entry,
    has_entry,
    param_names,
    run_infer,
    run_init,
    run_train_step,
    sample_names,
    sample_path,
    zero_states,
)

from dlvm.interp.objects import NP_DTYPES
from dlvm.ir import parse_module
from dlvm.ir.verifier import verify
from telc.cli import cli

SAMPLES = sample_names()
TRAINABLE = [name for name in SAMPLES if has_entry(compiled_sample(name).interface, "train")]

# XOR's four examples and labels, as in samples/xor.tel.
XOR_X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
XOR_LABELS = np.array([[0.0], [1.0], [1.0], [0.0]])


def module_name(sample: str) -> str:
    return compiled_sample(sample).interface.name


# Training inputs are uniform in [0, scale): mnist's single layer with sgd(rate: 0.1) expects
# images whose squared norm is moderate (real MNIST digits are mostly black), not 784 values
# uniform in [0, 1), on which it oscillates.
TRAIN_INPUT_SCALE = {"mnist": 0.1}

# Integer inputs (token ids, class indices) are drawn in [0, INTEGER_BOUND) (default 2).
INTEGER_BOUND = {"transformer": 32, "resnet": 4}


def random_inputs(sample: str, kind: str, rng: np.random.Generator) -> Arrays:
    """Inputs of the sample's entry point of KIND: the four XOR examples for xor; elsewhere
    uniform values in [-1, 1) for infer, and for training values in [0, TRAIN_INPUT_SCALE)
    with one-hot rows (0/1 values when there is one column) for float `labels`; integers of
    the input's own type in [0, INTEGER_BOUND) for an integer input."""
    compiled = compiled_sample(sample)
    out: Arrays = {}
    for name, ty in entry(compiled.interface, kind).inputs:
        shape = tuple(ty.shape)
        if module_name(sample) == "xor":
            out[name] = {"x": XOR_X, "labels": XOR_LABELS}[name]
        elif ty.dtype.is_int:
            bound = INTEGER_BOUND.get(sample, 2)
            out[name] = rng.integers(0, bound, size=shape).astype(NP_DTYPES[ty.dtype])
        elif name == "labels" and kind == "train":
            rows, classes = math.prod(shape[:-1]), shape[-1]
            if classes == 1:
                out[name] = rng.integers(0, 2, size=shape).astype(np.float64)
            else:
                hot = np.eye(classes)[rng.integers(0, classes, size=rows)]
                out[name] = hot.reshape(shape)
        elif kind == "train":
            out[name] = rng.uniform(0.0, TRAIN_INPUT_SCALE.get(sample, 1.0), size=shape)
        else:
            out[name] = rng.uniform(-1.0, 1.0, size=shape)
    return out


def perturbed(params: Arrays, rng: np.random.Generator, scale: float = 0.3) -> Arrays:
    """The parameters plus Gaussian noise, so that zero-initialised biases and unit scales take
    arbitrary values too."""
    return {k: v + scale * rng.standard_normal(v.shape) for k, v in params.items()}


# --- init ----------------------------------------------------------------------------------------

PARAM_DECL = re.compile(r"^\s*(\w+)\s*:\s*(?:param|buffer)\s*\[([^\]]*)\]\s*=\s*(.+?)\s*(//.*)?$")


def declared_initialisers(sample: str) -> dict[str, str]:
    """Each param and buffer of the sample's source with the text of its initialiser."""
    with open(sample_path(sample), encoding="utf-8") as f:
        found = {}
        for line in f:
            m = PARAM_DECL.match(line)
            if m:
                found[m.group(1)] = m.group(3)
    return found


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as docs/tel.md defines them."""
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


@pytest.mark.parametrize("sample", SAMPLES)
def test_init_gives_declared_shapes_and_initialisers(sample: str) -> None:
    compiled = compiled_sample(sample)
    params = run_init(compiled, seed=0)
    again = run_init(compiled, seed=0)
    other = run_init(compiled, seed=1)
    inits = declared_initialisers(sample)
    assert sorted(inits) == sorted(param_names(compiled.interface))
    for name, ty in compiled.interface.params:
        value = params[name]
        assert value.shape == tuple(ty.shape), name
        assert np.all(np.isfinite(value)), name
        np.testing.assert_array_equal(value, again[name], err_msg=f"{name}: same seed differs")
        text = inits[name]
        if re.fullmatch(r"-?[0-9.]+", text):
            np.testing.assert_array_equal(value, np.full(value.shape, float(text)), err_msg=name)
        else:
            assert not np.array_equal(value, other[name]), f"{name}: seed has no effect"
        if text == "glorot()":
            fan_in, fan_out = fans(value.shape)
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            assert np.all(np.abs(value) <= bound), name
            # Uniform in [-bound, bound]: not concentrated near zero.
            assert np.abs(value).max() > 0.5 * bound, name


# --- infer ---------------------------------------------------------------------------------------


# -O2 folds constants in the module's precision (f32): the transformer's gelu constant
# 1 / sqrt(2) and attention's 1 / sqrt(K) become f32 values, whose rounding (about 1e-8) two
# blocks carry to about 2e-7 in the logits (-O0 matches the NumPy model to 1e-14).
INFER_ATOL = {"transformer": 1e-6}


@pytest.mark.parametrize("perturb", [False, True], ids=["init", "perturbed"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_infer_matches_reference(sample: str, perturb: bool) -> None:
    compiled = compiled_sample(sample)
    rng = np.random.default_rng(11)
    params = run_init(compiled, seed=3)
    if perturb:
        params = perturbed(params, rng)
    inputs = random_inputs(sample, "infer", rng)
    got = run_infer(compiled, inputs, params)
    expected = ref.SAMPLES[module_name(sample)](inputs, params)
    infer = entry(compiled.interface, "infer")
    assert sorted(got) == sorted(expected)
    for name, ty in infer.outputs:
        assert np.shape(got[name]) == tuple(ty.shape), name
        atol = INFER_ATOL.get(sample, 1e-9)
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=atol, err_msg=name)


@pytest.mark.parametrize("sample", SAMPLES)
def test_infer_float32_close_to_reference(sample: str) -> None:
    compiled = compiled_sample(sample)
    rng = np.random.default_rng(12)
    params = perturbed(run_init(compiled, seed=4), rng)
    params = {k: v.astype(np.float32) for k, v in params.items()}
    inputs = {
        k: v.astype(np.float32) if v.dtype.kind == "f" else v
        for k, v in random_inputs(sample, "infer", rng).items()
    }
    got = run_infer(compiled, inputs, params, float64=False)
    expected = ref.SAMPLES[module_name(sample)](inputs, params)
    for name, value in got.items():
        assert np.asarray(value).dtype == np.float32, name
        np.testing.assert_allclose(value, expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


# --- train ---------------------------------------------------------------------------------------


def _bce(y: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.mean(labels * np.log(y) + (1 - labels) * np.log(1 - y)))


# The NumPy objective of each sample's `train` declaration, from its inputs and parameters.
REFERENCE_LOSSES: dict[str, Callable[[Arrays, Arrays], float]] = {
    "mnist": lambda i, p: float(ref.mse(ref.mnist(i, p)["y"], i["labels"])),
    "digits": lambda i, p: float(ref.cross_entropy(ref.digits(i, p)["y"], i["labels"])),
    "ffnn": lambda i, p: float(ref.cross_entropy(ref.ffnn(i, p)["y"], i["labels"])),
    "cnn": lambda i, p: float(ref.cross_entropy(ref.cnn(i, p)["y"], i["labels"])),
    "lstm": lambda i, p: float(ref.cross_entropy(ref.lstm(i, p)["y"], i["labels"])),
    "rnn": lambda i, p: float(-np.mean(np.sum(i["labels"] * ref.rnn(i, p)["logp"], axis=-1))),
    "xor": lambda i, p: _bce(ref.xor(i, p)["y"], i["labels"]),
    "transformer": lambda i, p: float(
        ref.sparse_softmax_cross_entropy(
            ref.transformer(i, p)["logits"].reshape(-1, 32), i["next_ids"]
        )
    ),
    # autoencoder: its objective goes through dropout, random while training, so the NumPy
    # model cannot reproduce it; its training is checked through the loss `infer` returns.
}

# Each sample's `using` clause: the optimiser and its hyper-parameters (the rest default).
OPTIMISERS: dict[str, tuple[str, dict[str, float]]] = {
    "mnist": ("sgd", {"rate": 0.1}),
    "digits": ("sgd", {"rate": 0.1}),
    "ffnn": ("momentum", {"rate": 0.05, "beta": 0.9}),
    "cnn": ("adam", {"rate": 0.01}),
    "lstm": ("adam", {"rate": 0.01}),
    "rnn": ("rmsprop", {"rate": 0.01}),
    "xor": ("adam", {"rate": 0.05}),
    "autoencoder": ("momentum", {"rate": 0.05, "beta": 0.9}),
    "transformer": ("adam", {"rate": 0.003}),
}

DEFAULTS = {
    "sgd": {"rate": 0.01},
    "momentum": {"rate": 0.01, "beta": 0.9},
    "adam": {"rate": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
    "rmsprop": {"rate": 0.001, "rho": 0.9, "eps": 1e-8},
}


def recovered_gradient(
    opt: str, hyper: dict[str, float], w: np.ndarray, w_next: np.ndarray, old: Arrays, new: Arrays
) -> np.ndarray:
    """The gradient an optimiser step was given, solved from its inputs and results."""
    if opt == "sgd":
        return (w - w_next) / hyper["rate"]
    if opt == "momentum":
        return new["v"] - hyper["beta"] * old["v"]
    if opt == "adam":
        return (new["m"] - hyper["beta1"] * old["m"]) / (1 - hyper["beta1"])
    assert opt == "rmsprop"
    return (w - w_next) * (np.sqrt(new["s"]) + hyper["eps"]) / hyper["rate"]


def reference_step(
    opt: str, hyper: dict[str, float], w: np.ndarray, g: np.ndarray, old: Arrays, step: int
) -> tuple[np.ndarray, Arrays]:
    """tel_reference's optimiser: the new weight and state."""
    if opt == "sgd":
        return ref.sgd(w, g, **hyper), {}
    if opt == "momentum":
        w_next, v = ref.momentum(w, g, old["v"], **hyper)
        return w_next, {"v": v}
    if opt == "adam":
        w_next, m, v = ref.adam(w, g, old["m"], old["v"], step, **hyper)
        return w_next, {"m": m, "v": v}
    assert opt == "rmsprop"
    w_next, s = ref.rmsprop(w, g, old["s"], **hyper)
    return w_next, {"s": s}


@pytest.mark.parametrize("sample", sorted(REFERENCE_LOSSES))
def test_train_step_matches_reference(sample: str) -> None:
    """Three train steps from zero state (steps 1, 2, 3): each returns the NumPy objective at
    the parameters it was given; the gradient it used (solved from the optimiser's update)
    matches central differences of the NumPy objective on a sample of coordinates; the new
    parameters and state are the NumPy optimiser's. In float64 and unoptimised (-O0): constant
    propagation folds in the IR's precision, so at -O2 the optimiser's constants are f32's
    (test_optimised_train_step_matches_unoptimised compares the two)."""
    compiled = compiled_sample(sample, level=0)
    train = entry(compiled.interface, "train")
    loss_fn = REFERENCE_LOSSES[sample]
    opt, given = OPTIMISERS[sample]
    hyper = {**DEFAULTS[opt], **given}
    rng = np.random.default_rng(21)
    params = perturbed(run_init(compiled, seed=5), rng, scale=0.1)
    inputs = random_inputs(sample, "train", rng)
    states = zero_states(train)
    assert all(p == param for (p, _, _), param in zip(train.states, _state_params(train)))
    for step in (1, 2, 3):
        loss, new_params, new_states = run_train_step(compiled, train, inputs, params, states, step)
        np.testing.assert_allclose(loss, loss_fn(inputs, params), rtol=1e-9, atol=1e-12)
        old_by_param = _states_by_param(train, states)
        new_by_param = _states_by_param(train, new_states)
        for name in train.params:
            w, w_next = params[name], new_params[name]
            old, new = old_by_param.get(name, {}), new_by_param.get(name, {})
            g = recovered_gradient(opt, hyper, w, w_next, old, new)
            coords = list(np.ndindex(w.shape))
            picked = [coords[k] for k in rng.permutation(len(coords))[:12]]

            def loss_at(value: np.ndarray, name: str = name, params: Arrays = params) -> float:
                return loss_fn(inputs, {**params, name: value})

            fd = central_gradient(loss_at, w, indices=picked)
            for c in picked:
                np.testing.assert_allclose(
                    g[c], fd[c], rtol=1e-5, atol=1e-8, err_msg=f"d loss / d {name}{c}, step {step}"
                )
            w_ref, states_ref = reference_step(opt, hyper, w, g, old, step)
            np.testing.assert_allclose(w_next, w_ref, rtol=1e-9, atol=1e-12, err_msg=name)
            assert sorted(new) == sorted(states_ref), name
            for state, value in states_ref.items():
                np.testing.assert_allclose(
                    new[state], value, rtol=1e-9, atol=1e-12, err_msg=f"{name}.{state}"
                )
        params, states = new_params, new_states


@pytest.mark.parametrize("sample", sorted(REFERENCE_LOSSES))
def test_optimised_train_step_matches_unoptimised(sample: str) -> None:
    """Three train steps of the -O2 module give the -O0 module's loss, parameters and state, to
    f32 precision (the constants -O2 folds are f32 values)."""
    plain, optimised = compiled_sample(sample, level=0), compiled_sample(sample)
    train = entry(plain.interface, "train")
    rng = np.random.default_rng(4)
    params = perturbed(run_init(plain, seed=5), rng, scale=0.1)
    inputs = random_inputs(sample, "train", rng)
    states = [zero_states(train)] * 2
    for step in (1, 2, 3):
        got = [
            run_train_step(c, entry(c.interface, "train"), inputs, params, s, step)
            for c, s in zip((plain, optimised), states)
        ]
        (loss0, params0, states0), (loss2, params2, states2) = got
        np.testing.assert_allclose(loss2, loss0, rtol=1e-5)
        for name in train.params:
            np.testing.assert_allclose(params2[name], params0[name], rtol=1e-5, atol=1e-6)
        for a, b in zip(states2, states0):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        params, states = params0, [states0, states0]


def _state_params(train) -> list[str]:
    """The parameter of each state tensor, expected per parameter in parameter order."""
    names = [s for _, s, _ in train.states]
    per_param = len(names) // max(1, len(train.params))
    return [p for p in train.params for _ in range(per_param)]


def _states_by_param(train, values: list[np.ndarray]) -> dict[str, Arrays]:
    out: dict[str, Arrays] = {}
    for (param, state, _), value in zip(train.states, values):
        out.setdefault(param, {})[state] = value
    return out


@pytest.mark.parametrize("sample", TRAINABLE)
def test_training_lowers_the_loss(sample: str) -> None:
    """100 train steps on one fixed batch from `init`'s parameters, zero state, steps counting
    from 1, each step's parameters and state passed to the next: the loss goes down (the
    objective's value, and `infer`'s `loss` output where it has one: the autoencoder's, without
    dropout)."""
    compiled = compiled_sample(sample)
    train = entry(compiled.interface, "train")
    rng = np.random.default_rng(31)
    params = run_init(compiled, seed=7)
    inputs = random_inputs(sample, "train", rng)
    infer = entry(compiled.interface, "infer")
    infer_inputs = {n: inputs[n] for n, _ in infer.inputs}
    before = run_infer(compiled, infer_inputs, params)
    states = zero_states(train)
    losses = []
    for step in range(1, 101):
        loss, params, states = run_train_step(compiled, train, inputs, params, states, step)
        assert math.isfinite(loss), f"step {step}"
        losses.append(loss)
    assert np.mean(losses[-5:]) < 0.95 * np.mean(losses[:5]), losses
    assert losses[-1] < losses[0], losses
    if "loss" in before:
        after = run_infer(compiled, infer_inputs, params)
        assert float(after["loss"]) < 0.95 * float(before["loss"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_xor_is_learnt(seed: int) -> None:
    """samples/xor.tel: 300 steps of its adam, in its own float32, classify all four
    examples (y > 0.5 exactly for label 1)."""
    compiled = compiled_sample("xor")
    train = entry(compiled.interface, "train")
    params = {k: v.astype(np.float32) for k, v in run_init(compiled, seed, False).items()}
    inputs = {"x": XOR_X.astype(np.float32), "labels": XOR_LABELS.astype(np.float32)}
    states = zero_states(train, np.float32)
    losses = []
    for step in range(1, 301):
        loss, params, states = run_train_step(
            compiled, train, inputs, params, states, step, float64=False
        )
        losses.append(loss)
    y = run_infer(compiled, {"x": inputs["x"]}, params, float64=False)["y"]
    assert y.shape == (4, 1)
    predicted = (y > 0.5).astype(np.float64)
    np.testing.assert_array_equal(predicted, XOR_LABELS, err_msg=f"y = {y.ravel()}")
    assert losses[-1] < 0.2 * losses[0], (losses[0], losses[-1])


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES)
def test_telc_check_accepts_sample(sample: str) -> None:
    result = CliRunner().invoke(cli, ["check", "-q", sample_path(sample)])
    assert result.exit_code == 0, result.output
    assert result.output == ""


@pytest.mark.parametrize("stage", ["ir", "optimized"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_telc_build_emits_verified_ir(sample: str, stage: str) -> None:
    result = CliRunner().invoke(cli, ["build", sample_path(sample), "--emit", stage])
    assert result.exit_code == 0, result.output
    module = parse_module(result.output, sample_path(sample) + ".dl")
    assert not verify(module), [d.render() for d in verify(module)]
    names = {e.name for e in compiled_sample(sample).interface.entries}
    for name in names:
        assert module.function_named(name) is not None, name


@pytest.mark.parametrize("sample", SAMPLES)
def test_telc_short_form_builds_ir(sample: str, tmp_path) -> None:
    """`telc FILE --emit ir -o OUT` is `telc build FILE --emit ir -o OUT`."""
    out = tmp_path / "out.dl"
    result = CliRunner().invoke(cli, [sample_path(sample), "--emit", "ir", "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = CliRunner().invoke(cli, ["build", sample_path(sample), "--emit", "ir"]).output
    assert out.read_text(encoding="utf-8") == expected
