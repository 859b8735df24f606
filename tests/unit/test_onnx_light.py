"""The nine `light` models the onnx wheel ships (AlexNet, DenseNet-121, Inception v1 and v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512: real architectures with constant weights)
imported and run by the interpreter on the conformance suite's input, against their stored
outputs, with the suite's tolerances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import numpy_helper  # noqa: E402

from dlvm.interp import run_function  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))


def test_the_wheel_ships_nine():
    assert len(MODELS) == 9


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_its_stored_output(name):
    imp = import_model(LIGHT / f"light_{name}.onnx")
    ((_, ty),) = imp.inputs
    n = int(np.prod(ty.shape))
    x = (np.arange(n).reshape(ty.shape) / n).astype(np.float32)  # the suite's dummy input
    stored = onnx.TensorProto()
    stored.ParseFromString((LIGHT / f"light_{name}_output_0.pb").read_bytes())
    (got,) = run_function(imp.module, imp.function.name, [x] + [p.value for p in imp.params])
    np.testing.assert_allclose(got, numpy_helper.to_array(stored), rtol=1e-3, atol=1e-7)
