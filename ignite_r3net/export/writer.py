"""``export``: a trained R3Net as one ONNX or TorchScript file that gives ``predict``'s maps without
this package (``--format hub``: ``hub_folder``). The file holds :class:`SaliencyGraph`, uint8 RGB
``(N, 3, H, W)`` in, float ``(N, 1, H, W)`` in 0..1 out, batch, height and width dynamic.

* ONNX: ``torch.onnx.export(dynamo=True)``, torch's supported exporter (the TorchScript-based one is
  deprecated); opset 18 is the oldest it writes natively (down-converting to 17 fails for R3Net).
* TorchScript: ``torch.jit.trace``; R3Net's sizes all come from tensor shapes, which the tracer
  records as shape operations, so the trace holds at every input size (tested).

The file is written under a temporary name, loaded back standalone, compared with the PyTorch model
at another batch and size than the traced one, and only then renamed: a failed export leaves no file.
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
from ..exported_model import INPUT_NAME, METADATA_FILE, OUTPUT_NAME, contract, load_exported, quiet_torchscript
from ..model.trained_model import build_model, read_trained_weights
from ..options import ExportOptions
from ..output_paths import check_writable_file
from .formats import SUFFIXES
from .hub_folder import write_hub_folder

ONNX_EXPORT_MISSING = "--format onnx needs the optional extra: pip install 'ignite_r3net[onnx]'"
_ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")  # torch's exporter, and the check of the written file
TOLERANCE = 1e-4  # largest difference to the PyTorch model accepted when checking the written file

# Example input for tracing, and another batch and size for checking the file: height != width (or
# the exporter would tie them) and both above 32 (the backbone's stride), so no size becomes 1.
_TRACE_SHAPE = (2, 3, 64, 96)
_CHECK_SHAPE = (1, 3, 45, 71)


class SaliencyGraph(nn.Module):
    """R3Net in eval mode with its preprocessing: uint8 RGB ``(N, 3, H, W)`` to saliency ``(N, 1, H, W)``
    in 0..1. ``normalize_image``'s normalisation, bit for bit, in buffers that follow the module to
    its device: ``x * (1 / (255 std)) + (-mean / std)`` in float32."""

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
    """Export ``options.checkpoint`` to ``options.output`` as ``options.format``; returns the path.
    Raises ``OptionError`` (a wrong option or output name, a missing extra), ``CheckpointError``
    (unreadable checkpoint, unwritable file) or ``ExportError`` (the file does not give the maps)."""
    options.validate()
    if options.format == "hub":
        return write_hub_folder(options)
    out = _check_output(options)
    if options.format == "onnx" and any(importlib.util.find_spec(m) is None for m in _ONNX_MODULES):
        raise OptionError(ONNX_EXPORT_MISSING)
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


def _write_onnx(graph: SaliencyGraph, example: torch.Tensor, path: Path, metadata: dict[str, str], opset: int) -> None:
    # height and width from 33: at 32 or less the backbone's last map is 1x1 and torch.export would
    # want that case traced separately; the ONNX graph itself runs at those sizes too (tests: 20x27)
    dim = torch.export.Dim
    dynamic_shapes = {"image": {0: dim("batch"), 2: dim("height", min=33), 3: dim("width", min=33)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on decompositions: nothing to act on
        program = torch.onnx.export(
            graph,
            (example,),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=dynamic_shapes,
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
    """The largest difference to ``graph`` of ``path`` loaded standalone; ``ExportError`` beyond ``TOLERANCE``."""
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
