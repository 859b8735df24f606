"""ONNX's backend conformance suite (onnx.backend.test.BackendTest) run on DLVM's compiled
libraries: the node, simple, pytorch-converted, pytorch-operator and light groups, on the CPU.
conftest.py selects the cases, marks those of known_failures.txt as strict expected failures
and prints the counts of each group."""

import warnings

import onnx.backend.test
from conformance_backend import DlvmBackend

with warnings.catch_warnings():
    # The node cases compute their expected outputs as they are made, some overflowing or
    # dividing by zero on purpose.
    warnings.simplefilter("ignore", RuntimeWarning)
    backend_test = onnx.backend.test.BackendTest(DlvmBackend, __name__)

globals().update(backend_test.test_cases)
