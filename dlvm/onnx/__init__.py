"""The ONNX importer (docs/onnx.md): `import_model` reads a model (a path, bytes or an
onnx.ModelProto) and returns its graph as one IR function with the names and values of its
inputs, outputs and parameters. Needs the optional `onnx` package (`pip install 'telc[onnx]'`),
imported only when a model is imported."""

from dlvm.onnx.declared import declared_inputs
from dlvm.onnx.fixed import ValuesNeeded
from dlvm.onnx.imported import Imported, ImportedTensor
from dlvm.onnx.importer import import_model

__all__ = ["Imported", "ImportedTensor", "ValuesNeeded", "declared_inputs", "import_model"]
