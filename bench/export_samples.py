"""Writes samples/lenet.onnx: LeNet-5 for 28x28 digits, exported from PyTorch (seeded, so the
file is the same each time) with a dynamic batch axis named `batch`, as docs/onnx.md's
workflow does. Run in bench/.venv, which has PyTorch: `bench/.venv/bin/python
bench/export_samples.py`."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


class LeNet5(nn.Module):
    """LeNet-5 as it is usually written for 28x28 inputs: two 5x5 convolutions (the first
    padded), 2x2 max pooling, three dense layers, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def main() -> None:
    torch.manual_seed(0)
    model = LeNet5().eval()
    torch.onnx.export(
        model,
        (torch.zeros(1, 1, 28, 28),),
        SAMPLES / "lenet.onnx",
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    print(f"wrote {SAMPLES / 'lenet.onnx'}")


if __name__ == "__main__":
    main()
