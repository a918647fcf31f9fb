"""``export``: a trained R3Net as one ONNX or TorchScript file that gives ``predict``'s maps
without this package (or, with ``--format hub``, as a Hugging Face Hub folder: ``hub_folder``).

What is exported is :class:`SaliencyGraph`, the inference graph: uint8 RGB ``(N, 3, H, W)`` in,
the ImageNet normalisation (the constants and operations of ``normalize_image``), R3Net in eval
mode (sigmoid of the last refinement, resized to the input), float ``(N, 1, H, W)`` in 0..1 out.
Batch, height and width are dynamic.

* ONNX goes through ``torch.onnx.export(dynamo=True)`` (``torch.export``, translated by
  onnxscript), torch's default and supported exporter; the TorchScript-based one is deprecated and
  marked for removal. Opsets 18 to 23: 18 is the oldest it writes natively (it would try to
  down-convert to 17 and, for this model, fail).
* TorchScript is ``torch.jit.trace``: R3Net's sizes all come from tensor shapes, which the
  tracer records as shape operations, so the trace holds at every input size (tested).

The file is written under a temporary name, loaded back standalone (onnxruntime session,
``torch.jit.load``), run on an image of another size and batch than the one traced and compared
with the PyTorch model, and only then renamed to ``--output``: a failed export leaves no file.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import torch
from torch import nn

from .. import __version__
from ..atomic_files import atomic_output
from ..data.transforms import IMAGENET_MEAN, IMAGENET_STD
from ..errors import CheckpointError, ExportError, OptionError
from ..exported_model import (
    INPUT_NAME,
    METADATA_FILE,
    OUTPUT_NAME,
    contract,
    load_exported,
    quiet_torchscript,
)
from ..model.trained_model import build_model, read_trained_weights
from ..options import ExportOptions
from ..output_paths import check_writable_file
from .formats import DEFAULT_OPSET, FORMATS, OPSETS, SUFFIXES
from .hub_folder import write_hub_folder

__all__ = [
    "FORMATS",
    "SUFFIXES",
    "DEFAULT_OPSET",
    "OPSETS",
    "ONNX_EXPORT_MISSING",
    "SaliencyGraph",
    "export_model",
]

ONNX_EXPORT_MISSING = "--format onnx needs the optional extra: pip install 'ignite_r3net[onnx]'"
TOLERANCE = 1e-4  # largest difference to the PyTorch model accepted when checking the written file

# Example input for tracing, and a different batch and size for checking the written file. The
# sizes differ from each other (equal ones would let the exporter tie height to width) and exceed
# 32 (the backbone's stride), so no size is specialised to 1.
_TRACE_SHAPE = (2, 3, 64, 96)
_CHECK_SHAPE = (1, 3, 45, 71)


class SaliencyGraph(nn.Module):
    """R3Net's inference graph with its preprocessing: uint8 RGB ``(N, 3, H, W)`` to saliency
    ``(N, 1, H, W)`` in 0..1.

    The normalisation is ``normalize_image``'s, written with buffers (they follow the module to
    its device) rather than constants made at call time: ``x * (1 / (255 std)) + (-mean / std)``
    in float32, bit for bit the same tensor.

    Example::

        >>> graph = SaliencyGraph(R3Net("resnet18"))
        >>> graph(torch.zeros(1, 3, 64, 64, dtype=torch.uint8)).shape
        torch.Size([1, 1, 64, 64])
    """

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.eval()
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(1, -1, 1, 1)
        self.register_buffer("scale", 1.0 / (255.0 * std), persistent=False)
        self.register_buffer("shift", -mean / std, persistent=False)
        self.eval()

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.model(image.to(torch.float32) * self.scale + self.shift)


def export_model(options: ExportOptions) -> Path:
    """Export the model in ``options.checkpoint`` to ``options.output`` as ``options.format``
    (``onnx``, ``torchscript``, or ``hub``: ``hub_folder.write_hub_folder``); returns the path written.

    Options are checked before the weights are read; the file is checked before it gets its name.

    Args:
        options: the command's options (``--checkpoint``, ``--format``, ``--output``, ``--opset``,
            ``--backbone``).

    Raises:
        OptionError: a wrong option, an output name that does not fit the format, or a missing
            extra (``--format onnx`` needs onnx, onnxscript and onnxruntime).
        CheckpointError: the checkpoint cannot be read, or the file cannot be written.
        ExportError: the written file does not load or does not give the PyTorch model's maps.
    """
    options.validate()
    if options.format == "hub":
        return write_hub_folder(options)
    out = _check_output(options)
    if options.format == "onnx":
        _require_onnx_export()
    weights = read_trained_weights(options.checkpoint, options.backbone)
    graph = SaliencyGraph(build_model(weights, "cpu"))
    metadata = contract(weights.backbone, weights.source, f"ignite_r3net {__version__}, torch {torch.__version__}")
    example = torch.randint(0, 256, _TRACE_SHAPE, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    try:
        with atomic_output(out) as tmp:  # makes out's folder too, inside the error handling
            if options.format == "onnx":
                _write_onnx(graph, example, tmp, metadata, options.onnx_opset)
            else:
                _write_torchscript(graph, example, tmp, metadata)
            difference = _check_written(tmp, graph)
    except OSError as e:
        raise CheckpointError(f"cannot write {out}: {e.strerror or e}") from e
    details = f"opset {options.onnx_opset}, " if options.format == "onnx" else ""
    print(
        f"wrote {out} ({options.format}, {details}backbone {weights.backbone}; uint8 (N, 3, H, W) -> float "
        f"(N, 1, H, W); max difference to PyTorch {difference:.1e})"
    )
    return out


def _check_output(options: ExportOptions) -> Path:
    """``--output``: a file name with the format's suffix, in a folder, not the checkpoint itself."""
    out = Path(options.output)
    suffix = SUFFIXES[options.format]
    if out.is_dir():
        raise OptionError(f"--output {out} is a folder; give a file name ending in {suffix}")
    if out.suffix.lower() != suffix:
        raise OptionError(
            f"--output {out} must end in {suffix} for --format {options.format} (predict --model tells the "
            "format by it)"
        )
    if out.exists() and out.resolve() == Path(options.checkpoint).resolve():
        raise OptionError(f"--output {out} is the checkpoint itself; choose another file name")
    check_writable_file(out, "--output")
    return out


def _require_onnx_export() -> None:
    """onnx and onnxscript (torch's exporter) and onnxruntime (the check of the written file)."""
    if any(importlib.util.find_spec(name) is None for name in ("onnx", "onnxscript", "onnxruntime")):
        raise OptionError(ONNX_EXPORT_MISSING)


def _write_onnx(graph: SaliencyGraph, example: torch.Tensor, path: Path, metadata: dict[str, str], opset: int) -> None:
    # height and width from 33: at 32 or less the backbone's last map is 1x1 and torch.export would
    # want that case traced separately; the ONNX graph itself runs at those sizes too (tests: 20x27)
    batch, height, width = (
        torch.export.Dim("batch"),
        torch.export.Dim("height", min=33),
        torch.export.Dim("width", min=33),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on decompositions: nothing to act on
        program = torch.onnx.export(
            graph,
            (example,),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes={"image": {0: batch, 2: height, 3: width}},
            opset_version=opset,
            verbose=False,
        )
    assert program is not None  # None only without dynamo=True
    program.model.metadata_props.update(metadata)
    program.save(str(path), external_data=False)  # one self-contained file (R3Net is far below 2 GB)


def _write_torchscript(graph: SaliencyGraph, example: torch.Tensor, path: Path, metadata: dict[str, str]) -> None:
    with quiet_torchscript(), torch.no_grad():
        traced = torch.jit.trace(graph, (example,), check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={METADATA_FILE: json.dumps(metadata, indent=2)})


@torch.no_grad()
def _check_written(path: Path, graph: SaliencyGraph) -> float:
    """Load ``path`` standalone, run it at another batch and size than the trace's and return its
    largest difference to ``graph``; raises ``ExportError`` beyond ``TOLERANCE``."""
    image = torch.randint(0, 256, _CHECK_SHAPE, dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    try:
        exported = load_exported(path)
    except OptionError as e:
        raise ExportError(f"the exported file does not load: {e}") from None
    got, expected = exported(image), graph(image)
    if got.shape != expected.shape:
        raise ExportError(f"the exported model gives shape {tuple(got.shape)} for {tuple(image.shape)}")
    difference = float((got.float() - expected).abs().max())
    if not difference <= TOLERANCE:  # also catches NaN
        raise ExportError(
            f"the exported model's output differs from PyTorch's by {difference:.3g} (> {TOLERANCE}) "
            f"at {tuple(image.shape)}; nothing was written"
        )
    return difference
