"""``export``: the trained model as one ONNX or TorchScript file of its own."""

from __future__ import annotations

import argparse

from ..options import ExportOptions
from .common import add_command


def add_export(sub: argparse._SubParsersAction) -> None:
    add_command(
        sub,
        "export",
        ExportOptions,
        "ignite_r3net.export.writer:export_model",
        help="write the trained model as one ONNX or TorchScript file for use outside this package",
        description="Write R3Net's inference graph (eval mode, sigmoid output at the input's size) as one "
        "file that runs without this package. Input: RGB uint8 (N, 3, H, W), 0..255; output: float "
        "(N, 1, H, W) saliency in 0..1; batch, height and width are dynamic and the ImageNet "
        "normalisation is inside the graph (this contract is also stored in the file's metadata). The "
        "file is loaded back and compared with the PyTorch model before it is given its name.",
    )
