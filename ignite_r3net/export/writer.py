"""``export``: a trained R3Net as one ONNX or TorchScript file that gives ``predict``'s maps without this
package (read back by ``load_exported``, for ``predict --model``), or (``--for rembg``) as rembg's
``u2net_custom`` model, or (``--format hub``) as a folder with its model card for ``hf upload``, which every
command reads as ``--checkpoint hf-hub:ORG/NAME``. Each is checked against PyTorch before it is renamed into
place."""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from .. import __version__
from ..atomic_files import (
    atomic_folder,
    atomic_output,
    check_writable_file,
    check_writable_folder,
    read_json_object,
    write_json,
    write_text,
)
from ..data.transforms import IMAGENET_MEAN, IMAGENET_STD
from ..errors import CheckpointError, ExportError, OptionError, install_extra
from ..inference.model import load_exported, onnx_session, quiet_torchscript
from ..model.backbone_weights import is_hub_source
from ..model.trained_model import HUB_CONFIG, HUB_WEIGHTS, TrainedWeights, build_model, read_trained_weights
from ..options import ExportOptions
from ..options.formats import SUFFIXES
from ..profiling.report import read_report
from .fidelity import check_fidelity
from .model_card import model_card, read_results
from .quantize import Int8Plan, quantize_in_place

INPUT_NAME = "image"
OUTPUT_NAME = "saliency"
METADATA_FILE = "ignite_r3net.json"  # the TorchScript ``_extra_files`` entry holding the contract
ONNX_EXPORT_MISSING = f"--format onnx needs the optional extra: {install_extra('onnx')}"
_ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")  # torch's exporter, and the check of the written file
HUB_FORMAT = 1  # config.json's "ignite_r3net": {"format": ...}; bump when the folder's layout changes
CARD = "README.md"

# Example input for tracing, and another batch and size for checking the file: height != width (or
# the exporter would tie them) and both above 32 (the backbone's stride), so no size becomes 1.
_TRACE_SHAPE = (2, 3, 64, 96)
_CHECK_SHAPE = (1, 3, 45, 71)
REMBG_SIDE = 320  # rembg's u2net_custom resizes every image to 320x320
REMBG_SHAPE = (1, 3, REMBG_SIDE, REMBG_SIDE)


class SaliencyGraph(nn.Module):
    """R3Net in eval mode with ``normalize_image``'s normalisation, bit for bit: uint8 RGB in, saliency out."""

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
        # float32 in the exported graph; float64 when a copy of the graph gives the exact map (fidelity.py)
        return self.model(image.to(self.scale.dtype) * self.scale + self.shift)


def contract(weights: TrainedWeights) -> dict[str, str]:
    """The metadata of every exported file: what goes in, what comes out, where the weights came from."""
    return {
        "model": "R3Net saliency detection (Deng et al., IJCAI 2018), inference graph",
        "backbone": weights.backbone,
        "head_width": f"{weights.head_width:g}",
        "source": str(weights.source) if is_hub_source(str(weights.source)) else Path(weights.source).name,
        "input": f"{INPUT_NAME}: uint8 (N, 3, H, W), RGB, 0..255; N, H and W are dynamic",
        "output": f"{OUTPUT_NAME}: float32 (N, 1, H, W), saliency probability in 0..1 at the input's size",
        "preprocessing": "inside the graph: x / 255, minus mean (0.485, 0.456, 0.406), divided by "
        "std (0.229, 0.224, 0.225)",
        "map": "the 8-bit map that predict writes is round(saliency * 255)",
        "exported_by": f"ignite_r3net {__version__}, torch {torch.__version__}",
    }


def export_model(options: ExportOptions) -> Path:
    """Export ``options.checkpoint`` to ``options.output`` as ``options.format``; returns the path."""
    options.validate()
    if options.format == "hub":
        return write_hub_folder(options)
    out = _check_output(options)
    if options.format == "onnx" and any(importlib.util.find_spec(m) is None for m in _ONNX_MODULES):
        raise OptionError(ONNX_EXPORT_MISSING)
    int8 = None
    if options.quantize:  # the folders listed before any work
        int8 = Int8Plan.of(str(options.calibrate), str(options.check_data), options.max_drop)
    weights = read_trained_weights(options.checkpoint, options.backbone)
    plan = _rembg_plan(weights) if options.target == "rembg" else _plan(weights)
    try:
        with atomic_output(out) as tmp:  # makes out's folder too, inside the error handling
            if options.format == "onnx":
                _write_onnx(plan, tmp, options.onnx_opset)
            else:
                _write_torchscript(plan.graph, plan.example, tmp, plan.metadata)
            difference = _check_written(tmp, plan.graph, plan.load, plan.check_input)
            checked = quantize_in_place(tmp, plan.graph, int8, plan.metadata) if int8 else None
    except OSError as e:
        raise CheckpointError(f"cannot write {out}: {e.strerror or e}") from e
    details = f"{'INT8, ' if checked else ''}opset {options.onnx_opset}, " if options.format == "onnx" else ""
    print(
        f"wrote {out} ({options.format}, {details}backbone {weights.backbone}; {plan.summary}; max difference to "
        f"PyTorch {difference:.1e}{' before quantization' if checked else ''})"
    )
    if checked is not None:
        print(f"INT8 against float: {checked.summary()}")
    return out


class _ExportPlan(NamedTuple):
    """What one exported file holds: the graph, its tracing and checking inputs, how to run the written file."""

    graph: nn.Module
    example: torch.Tensor
    check_input: torch.Tensor
    dynamic_shapes: dict[str, dict[int, Any]] | None  # None: the example's shape only
    load: Callable[[Path], Callable[[torch.Tensor], torch.Tensor]]
    metadata: dict[str, str]
    summary: str


def _plan(weights: TrainedWeights) -> _ExportPlan:
    """The file ``predict --model`` reads: uint8 images of any batch and size in, the normalisation inside."""
    generator = torch.Generator().manual_seed(0)
    dim = torch.export.Dim
    # height and width from 33: at 32 or less the backbone's last map is 1x1, which torch.export would
    # trace separately; the ONNX graph itself runs at those sizes too (tests: 20x27)
    dynamic_shapes = {"image": {0: dim("batch"), 2: dim("height", min=33), 3: dim("width", min=33)}}
    return _ExportPlan(
        graph=SaliencyGraph(build_model(weights, "cpu")),
        example=torch.randint(0, 256, _TRACE_SHAPE, dtype=torch.uint8, generator=generator),
        check_input=torch.randint(0, 256, _CHECK_SHAPE, dtype=torch.uint8, generator=generator.manual_seed(1)),
        dynamic_shapes=dynamic_shapes,
        load=load_exported,
        metadata=contract(weights),
        summary="uint8 (N, 3, H, W) -> float (N, 1, H, W)",
    )


def _rembg_plan(weights: TrainedWeights) -> _ExportPlan:
    """The file rembg runs as its ``u2net_custom`` model.

    rembg (``sessions/u2net_custom.py`` and ``BaseSession.normalize``) feeds a custom model one image resized to
    320x320 (LANCZOS), divided by its largest pixel value and normalised with the ImageNet mean and std, as float32
    (1, 3, 320, 320) under the model's first input name; it reads ``outputs[0][:, 0]``, min-max scales it to 0..1,
    truncates it to 8 bits and resizes that mask back to the image's size (LANCZOS). So the graph is R3Net itself,
    no normalisation inside, with the saliency probability (after the sigmoid) as its only output, (1, 1, 320,
    320)."""
    return _ExportPlan(
        graph=build_model(weights, "cpu"),
        example=_random_rembg_input(seed=0),
        check_input=_random_rembg_input(seed=1),
        dynamic_shapes=None,
        load=_load_rembg_model,
        metadata={
            **contract(weights),
            "input": f"{INPUT_NAME}: float32 (1, 3, {REMBG_SIDE}, {REMBG_SIDE}), RGB, normalised outside the graph",
            "output": f"{OUTPUT_NAME}: float32 (1, 1, {REMBG_SIDE}, {REMBG_SIDE}), saliency probability in 0..1; "
            "rembg reads [:, 0] and min-max scales it",
            "preprocessing": f"outside the graph, as rembg's u2net_custom does: resize to {REMBG_SIDE}x{REMBG_SIDE} "
            "(LANCZOS), divide by the image's largest value, minus mean (0.485, 0.456, 0.406), divided by "
            "std (0.229, 0.224, 0.225)",
            "map": "rembg's mask is the output min-max scaled to 0..255 and resized back to the image's size",
            "usage": 'rembg i -m u2net_custom -x \'{"model_path": "FILE.onnx"}\' in.jpg out.png',
        },
        summary=f"for rembg: float32 {REMBG_SHAPE}, normalised by rembg -> float (1, 1, {REMBG_SIDE}, {REMBG_SIDE})",
    )


def _random_rembg_input(seed: int) -> torch.Tensor:
    """A random photo of rembg's size as its ``normalize`` gives it to the model (to trace and to check the graph):
    divided by its largest value, minus the ImageNet mean, divided by the std, in float64, then float32."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, REMBG_SHAPE, dtype=torch.uint8, generator=generator).to(torch.float64)
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, -1, 1, 1)
    return ((x / x.amax().clamp_min(1e-6) - mean) / std).to(torch.float32)


def _load_rembg_model(path: str | Path) -> Callable[[torch.Tensor], torch.Tensor]:
    """The ONNX file ``path`` run as rembg runs it (its first input, its first output), after checking that it
    has rembg's contract; ``ExportError`` when it does not."""
    try:
        session = onnx_session(path, ["CPUExecutionProvider"])
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


def _check_output(options: ExportOptions) -> Path:
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


def _write_onnx(plan: _ExportPlan, path: Path, opset: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on decompositions: nothing to act on
        program = torch.onnx.export(
            plan.graph,
            (plan.example,),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=plan.dynamic_shapes,
            opset_version=opset,
            verbose=False,
        )
    assert program is not None  # None only without dynamo=True
    program.model.metadata_props.update(plan.metadata)
    program.save(str(path), external_data=False)  # one self-contained file (R3Net is far below 2 GB)


def _write_torchscript(graph: nn.Module, example: torch.Tensor, path: Path, metadata: dict[str, str]) -> None:
    with quiet_torchscript(), torch.no_grad():  # R3Net's sizes all come from shapes: the trace holds at any size
        traced = torch.jit.trace(graph, (example,), check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={METADATA_FILE: json.dumps(metadata, indent=2)})


def _check_written(
    path: Path,
    graph: nn.Module,
    load: Callable[[Path], Callable[[torch.Tensor], torch.Tensor]] | None = None,
    image: torch.Tensor | None = None,
) -> float:
    """The largest difference to ``graph`` of ``path`` loaded standalone (by ``load``, default ``load_exported``),
    on ``image`` (default: a uint8 batch of another size than the traced one); ``ExportError`` unless its output
    is ``graph``'s up to float32 rounding (``fidelity.check_fidelity``)."""
    if image is None:
        image = torch.randint(0, 256, _CHECK_SHAPE, dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    try:
        exported = (load or load_exported)(path)
    except OptionError as e:
        raise ExportError(f"the exported file does not load: {e}") from None
    return check_fidelity(exported, graph, image)


def write_hub_folder(options: ExportOptions) -> Path:
    """Write the Hub folder of ``options.checkpoint`` to ``options.output``; returns its path."""
    out = Path(options.output)
    if out.exists() and not out.is_dir():
        raise OptionError(f"--output {out} is a file; --format hub writes a folder")
    if out.is_dir() and any(out.iterdir()) and "ignite_r3net" not in (read_json_object(out / HUB_CONFIG) or {}):
        raise OptionError(
            f"--output {out} holds files of its own; give a new or empty folder (an earlier hub export is replaced)"
        )
    check_writable_folder(out, "--output")  # atomic_folder makes the parent when it writes
    results = read_results(options.results) if options.results else None
    cost = read_report(options.profile, "--profile") if options.profile else None
    weights = read_trained_weights(options.checkpoint, options.backbone)
    other = sorted({str(r["backbone"]) for r in cost[1]} - {weights.backbone}) if cost is not None else []
    if other:  # the cost table must be of this architecture
        raise OptionError(
            f"--profile {options.profile} measured backbone {', '.join(other)}, but the checkpoint's is "
            f"{weights.backbone}"
        )
    model = build_model(weights, "cpu")
    training, starting = _run_record(Path(weights.path))
    meta = contract(weights)
    config = {
        "ignite_r3net": {"format": HUB_FORMAT, "version": __version__},
        "architecture": "R3Net",
        "backbone": weights.backbone,
        "head_width": weights.head_width,
        "contract": meta,
        "checkpoint": {"source": meta["source"], "sha256": weights.sha256()},  # a Hub id, or the file's name
        "starting_weights": starting,
        "training": training,
    }
    card_options = {"license": options.license, "trained_on": options.trained_on, "repo_id": options.repo_id}
    with atomic_folder(out) as tmp:
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(tmp / HUB_WEIGHTS))
        write_json(config, tmp / HUB_CONFIG)
        write_text(model_card(config, results, card_options, cost), tmp / CARD)
        _check_folder(tmp, model, weights.backbone)
    print(
        f"wrote {out} (hub: {HUB_WEIGHTS}, {HUB_CONFIG}, {CARD}; backbone {weights.backbone}; read back and "
        f"checked); upload it with: hf upload {options.repo_id or 'ORG/NAME'} {out}"
    )
    return out


def _run_record(checkpoint: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(training recipe, starting weights) from the config.json of a run, or a Hub folder, beside ``checkpoint``."""
    record = read_json_object(checkpoint.parent / HUB_CONFIG) or {}
    if "ignite_r3net" in record:  # re-exporting a Hub folder
        return record.get("training"), record.get("starting_weights")
    if "iters" not in record or "backbone" not in record:  # none, or not a training run's
        return None, None
    weights = (record.get("resolved") or record).get("weights")  # before config.json kept the resolved apart
    if not isinstance(weights, dict):
        return record, None
    # the file's name, not this machine's path to it
    return record, {**weights, "file": Path(str(weights.get("file", ""))).name}


@torch.no_grad()
def _check_folder(folder: Path, model: nn.Module, backbone: str) -> None:
    """Read ``folder`` back as every command will; its weights and an output must be ``model``'s."""
    back = read_trained_weights(folder / HUB_WEIGHTS)
    if back.backbone != backbone:
        raise ExportError(f"the exported folder reads as backbone {back.backbone}, not {backbone}")
    reloaded = build_model(back, "cpu")
    got, expected = reloaded.state_dict(), model.state_dict()
    if got.keys() != expected.keys() or not all(torch.equal(v, expected[k]) for k, v in got.items()):
        raise ExportError("the exported model.safetensors does not hold the checkpoint's weights; nothing was written")
    check_fidelity(reloaded, model, torch.rand(_CHECK_SHAPE, generator=torch.Generator().manual_seed(1)))
