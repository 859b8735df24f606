"""The PyTorch models of bench/onnx_models.py (issue 26, part 5), each with its input's shape
at a batch, its number of classes and its export to ONNX: an MLP, LeNet-5, a ResNet-18-sized
network at 32x32 (torchvision's BasicBlocks with batch normalisation, written out here), an
LSTM and a GRU classifier and a two-layer transformer encoder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)
from export_samples import LeNet5  # samples/lenet.onnx's model
from torch import nn

CLASSES = 10


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions with batch normalisation, and a 1x1
    convolution on the shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images (CIFAR's stem: one 3x3 convolution, no max pooling), widths
    `width` to 8·width (64: 11.2M parameters)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, cin = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            cout = width << i
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Recurrent(nn.Module):
    """An LSTM or GRU over the sequence, its last output classified."""

    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(32, 64, batch_first=True)
        self.fc = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class Encoder(nn.Module):
    """nn.TransformerEncoder, two layers of d_model 64 and 4 heads (no dropout: the steps are
    compared with PyTorch's), the sequence's mean classified."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.fc = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.encoder(x).mean(1))


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    make: Callable[[], nn.Module]
    sample: tuple[int, ...]  # one example's shape (the input is [batch, *sample])


MODELS = [
    Model("mlp", "MLP 784-256-128-10", MLP, (784,)),
    Model("lenet", "LeNet-5 28x28", LeNet5, (1, 28, 28)),
    Model("resnet18", "ResNet-18 32x32", ResNet18, (3, 32, 32)),
    Model("lstm", "LSTM 32-64, 16 steps", lambda: Recurrent(nn.LSTM), (16, 32)),
    Model("gru", "GRU 32-64, 16 steps", lambda: Recurrent(nn.GRU), (16, 32)),
    Model("encoder", "Transformer encoder 2x(64, 4 heads), 16 tokens", Encoder, (16, 64)),
]


def made(model: Model) -> nn.Module:
    """The model's module, the same every time (seeded), in eval mode, with every parameter
    and buffer distinct: PyTorch's exporter merges initializers of equal values into one,
    which would make the two layers of the encoder (copies of one layer) share their weights,
    and a batch norm's running variance its weight (both ones at first). So each parameter
    gets a little noise, and batch norm's running statistics are those of two batches."""
    torch.manual_seed(0)
    module = model.make()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
        if any(isinstance(m, nn.BatchNorm2d) for m in module.modules()):
            module.train()
            for _ in range(2):
                module(torch.randn(8, *model.sample, generator=g))
    return module.eval()


def export(module: nn.Module, sample: tuple[int, ...], path: Path, dtype: torch.dtype) -> None:
    """The module in eval mode to ONNX (opset 17, TorchScript's exporter) with a dynamic batch:
    input `x`, output `logits`. Constant folding off, so that batch normalisation stays a node
    (with it, the exporter folds it into the convolution) and initializers keep their
    state-dict names."""
    module.eval()
    example = torch.zeros(2, *sample, dtype=dtype)
    torch.onnx.export(
        module,
        (example,),
        str(path),
        dynamo=False,
        opset_version=17,
        do_constant_folding=False,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
    )
