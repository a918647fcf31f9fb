"""``export --format onnx --for rembg``: R3Net as rembg's ``u2net_custom`` model.

rembg (``sessions/u2net_custom.py`` and ``BaseSession.normalize``) feeds a custom model one image resized to
320x320 (LANCZOS), divided by its largest pixel value and normalised with the ImageNet mean and std, as float32
(1, 3, 320, 320) under the model's first input name; it reads ``outputs[0][:, 0]``, min-max scales it to 0..1,
truncates it to 8 bits and resizes that mask back to the image's size (LANCZOS). So the graph here takes the
normalised float input, with no normalisation inside, and gives the saliency probability (after the sigmoid)
as its only output, (1, 1, 320, 320). The writer (``writer.export_model``) writes and checks it as it does
every file, against the same model in float64 (``fidelity.check_fidelity``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..data.transforms import IMAGENET_MEAN, IMAGENET_STD
from ..errors import ExportError
from ..inference.model import require_onnxruntime

REMBG_SIDE = 320  # rembg's u2net_custom resizes every image to 320x320
REMBG_SHAPE = (1, 3, REMBG_SIDE, REMBG_SIDE)
REMBG_COMMAND = 'rembg i -m u2net_custom -x \'{"model_path": "FILE.onnx"}\' in.jpg out.png'


class RembgGraph(nn.Module):
    """R3Net in eval mode on rembg's input (float32 (1, 3, 320, 320), already normalised); saliency out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.eval()
        self.eval()

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.model(image)


def rembg_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) images as rembg's ``normalize`` gives them to the model, after its resize: each image
    divided by its largest value, minus the ImageNet mean, divided by the std, in float64, then float32."""
    x = images.to(torch.float64)
    largest = x.flatten(1).amax(dim=1).clamp_min(1e-6).view(-1, 1, 1, 1)
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, -1, 1, 1)
    return ((x / largest - mean) / std).to(torch.float32)


def random_rembg_input(seed: int) -> torch.Tensor:
    """A random photo of rembg's size, normalised as rembg does (to trace and to check the graph)."""
    generator = torch.Generator().manual_seed(seed)
    return rembg_input(torch.randint(0, 256, REMBG_SHAPE, dtype=torch.uint8, generator=generator))


def rembg_contract(weights_contract: dict[str, str], input_name: str, output_name: str) -> dict[str, str]:
    """The metadata of a rembg export: ``weights_contract`` (``writer.contract``) with rembg's input and output."""
    return {
        **weights_contract,
        "input": f"{input_name}: float32 (1, 3, {REMBG_SIDE}, {REMBG_SIDE}), RGB, normalised outside the graph",
        "output": f"{output_name}: float32 (1, 1, {REMBG_SIDE}, {REMBG_SIDE}), saliency probability in 0..1; "
        "rembg reads [:, 0] and min-max scales it",
        "preprocessing": f"outside the graph, as rembg's u2net_custom does: resize to {REMBG_SIDE}x{REMBG_SIDE} "
        "(LANCZOS), divide by the image's largest value, minus mean (0.485, 0.456, 0.406), divided by "
        "std (0.229, 0.224, 0.225)",
        "map": "rembg's mask is the output min-max scaled to 0..255 and resized back to the image's size",
        "usage": REMBG_COMMAND,
    }


def load_rembg_model(path: str | Path) -> Callable[[torch.Tensor], torch.Tensor]:
    """The ONNX file ``path`` run as rembg runs it (its first input, its first output), after checking that it
    has rembg's contract; ``ExportError`` when it does not."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own types
        raise ExportError(f"the exported file does not load: {e}") from None
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or inputs[0].type != "tensor(float)" or list(inputs[0].shape) != list(REMBG_SHAPE):
        found = ", ".join(f"{i.name} {i.type} {i.shape}" for i in inputs)
        raise ExportError(f"the exported file does not take rembg's float32 {REMBG_SHAPE} input (its inputs: {found})")
    if list(outputs[0].shape) != [1, 1, REMBG_SIDE, REMBG_SIDE]:
        raise ExportError(f"the exported file's first output is {outputs[0].shape}, not (1, 1, 320, 320)")
    name = inputs[0].name

    def run(image: torch.Tensor) -> torch.Tensor:
        array = np.ascontiguousarray(image.detach().to("cpu", torch.float32).numpy())
        return torch.from_numpy(session.run(None, {name: array})[0])

    return run
