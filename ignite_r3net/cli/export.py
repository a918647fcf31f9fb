"""``export``: the trained model as one ONNX or TorchScript file of its own, or a Hugging Face Hub folder."""

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
        help="write the trained model as one ONNX or TorchScript file for use outside this package, or as a "
        "folder for the Hugging Face Hub",
        description="Write R3Net's inference graph (eval mode, sigmoid output at the input's size) as one "
        "file that runs without this package. Input: RGB uint8 (N, 3, H, W), 0..255; output: float "
        "(N, 1, H, W) saliency in 0..1; batch, height and width are dynamic and the ImageNet "
        "normalisation is inside the graph (this contract is also stored in the file's metadata). The "
        "file is loaded back and compared with the PyTorch model before it is given its name. "
        "--format hub writes a folder instead: model.safetensors (the state_dict), config.json (backbone, "
        "contract, the run's config.json as it is, starting weights and sha256s) and a model card README.md; "
        "upload it with your token (hf upload ORG/NAME DIR) and every command reads it as --checkpoint "
        "hf-hub:ORG/NAME.",
        epilog="example: python run.py export --checkpoint runs/r3net/best_model_8000_maxF=0.9350.pt --format hub "
        "--output r3net-duts --results comparison/results.json --trained-on DUTS-TR --repo-id me/r3net-duts",
    )
