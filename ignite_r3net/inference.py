"""Inference as an ignite Engine, shared by validation, ``evaluate`` and ``predict``: each step yields the
8-bit maps a saved PNG would hold, at the input's own size, so metrics on the fly equal those on saved maps.
Also the loading of exported models (ONNX, TorchScript) that ``predict --model`` runs."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import ignite.distributed as idist
import torch
import torch.nn.functional as F
from ignite.engine import Engine, Events
from ignite.metrics import Metric
from torch import nn

from .data.transforms import normalize_image
from .errors import OptionError, error_line, install_extra
from .progress import Progress

# the autocast dtype of each --amp choice (config.AMP_MODES), in training and inference
AMP_DTYPES: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}

# a uint8 image batch (N, 3, h, w) to saliency probabilities (N, 1, h, w): a model or an exported file
SaliencyFunction = Callable[[torch.Tensor], torch.Tensor]


def inference_shape(height: int, width: int, size: int | None = None, max_side: int | None = None) -> tuple[int, int]:
    """The (H, W) the model sees: ``size`` x ``size``, scaled down to ``max_side``, else full resolution."""
    if size is not None:
        return size, size
    longer = max(height, width)
    if max_side is not None and longer > max_side:
        return max(1, round(height * max_side / longer)), max(1, round(width * max_side / longer))
    return height, width


def saliency_at_input_size(
    run: SaliencyFunction, images: torch.Tensor, size: int | None = None, max_side: int | None = None
) -> torch.Tensor:
    """``run`` on the uint8 batch resized to ``inference_shape``, its saliency resized back."""
    height, width = images.shape[-2:]
    shape = inference_shape(height, width, size, max_side)
    if shape == (height, width):
        return run(images)
    resized = F.interpolate(images.float(), size=shape, mode="bilinear", align_corners=False, antialias=True)
    saliency = run(resized.round().clamp(0, 255).to(torch.uint8))
    return F.interpolate(saliency.float(), size=(height, width), mode="bilinear", align_corners=False)


@torch.no_grad()
def predict_maps(
    model: nn.Module, images: torch.Tensor, amp: str = "off", size: int | None = None, max_side: int | None = None
) -> torch.Tensor:
    """Saliency maps (N,H,W) uint8 of a uint8 batch (N,3,H,W) on the model's device, run at ``inference_shape``."""
    model.eval()
    dtype = AMP_DTYPES[amp]

    def run(batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast(batch.device.type, dtype=dtype, enabled=dtype is not None):
            return model(normalize_image(batch))

    return to_8bit_maps(saliency_at_input_size(run, images, size, max_side))


def to_8bit_maps(saliency: torch.Tensor) -> torch.Tensor:
    """Saliency (N,1,H,W) in 0..1 as the 8-bit maps (N,H,W) that are scored and saved: ``round(p * 255)``."""
    return (saliency.float().squeeze(1).clamp(0, 1) * 255).round().to(torch.uint8)


# an evaluator step's output: the 8-bit (H, W) maps and masks of its images
MapsAndMasks = tuple[list[torch.Tensor], list[torch.Tensor]]


def create_evaluator(
    model: nn.Module, device: torch.device, amp: str = "off", size: int | None = None, max_side: int | None = None
) -> Engine:
    """An Engine whose output is ``(maps, gts)``, (H,W) uint8 tensors at each image's size."""

    def eval_step(engine: Engine, batch: dict[str, Any]) -> MapsAndMasks:
        if any(batch.get("problem", ())):  # a pair the loader could not read, left out (validation)
            return [], []
        images = batch["image"].to(device, non_blocking=True)
        maps = predict_maps(model, images, amp, size, max_side)
        gts = batch["mask"].to(device, non_blocking=True).squeeze(1)
        return list(maps), list(gts)

    engine = Engine(eval_step)
    # the launcher reports a failure in one line; ignite's own error log would repeat it at length
    engine.logger.setLevel(logging.CRITICAL)
    return engine


def evaluator_step(engine: Engine) -> tuple[dict[str, Any], MapsAndMasks]:
    """The batch and output of the evaluator's step (ignite annotates ``State.batch``/``output`` as int)."""
    return cast(dict[str, Any], engine.state.batch), cast(MapsAndMasks, engine.state.output)


def attach_scoring(evaluator: Engine, metric: Metric) -> None:
    """Feed every step's ``(maps, gts, names)`` to ``metric``, after the handlers added before (a CRF)."""

    def update(engine: Engine) -> None:
        batch, (maps, gts) = evaluator_step(engine)
        metric.update((maps, gts, list(batch["name"]) if maps else []))

    evaluator.add_event_handler(Events.ITERATION_COMPLETED, update)


def score_shard(evaluator: Engine, loader: Any, metric: Metric, progress: Progress | None = None) -> dict[str, Any]:
    """``metric`` over every rank's images, ``evaluator`` run on this rank's shard (a collective, also when empty)."""
    metric.reset()
    if len(loader.sampler) > 0:
        world = idist.get_world_size()
        counting: AbstractContextManager[Any] = nullcontext()
        if progress is not None:
            count = progress.update
            counting = evaluator.add_event_handler(
                Events.ITERATION_COMPLETED, lambda engine: count(len(engine.state.batch["name"]) * world)
            )
        with counting:  # the handle removes its handler on exit
            evaluator.run(loader)
    return metric.compute()


ONNXRUNTIME_MISSING = f"--model FILE.onnx needs onnxruntime: {install_extra('onnx')}"


def is_onnx(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".onnx"


def require_onnxruntime() -> ModuleType:
    try:
        import onnxruntime
    except ImportError:
        raise OptionError(ONNXRUNTIME_MISSING) from None
    return onnxruntime


def load_exported(path: str | Path, device: torch.device | str = "cpu", threads: int | None = None) -> SaliencyFunction:
    """The exported model in ``path`` (``.onnx``: onnxruntime with ``threads``, else TorchScript)."""
    path = Path(path)
    if not path.is_file():
        raise OptionError(f"--model {path} does not exist")
    if is_onnx(path):
        return _load_onnx(path, torch.device(device), threads)
    return _load_torchscript(path, torch.device(device))


def onnx_providers(device: torch.device) -> list[Any]:
    """onnxruntime's execution providers for ``device``, first choice first (CUDA when installed, then CPU)."""
    ort = require_onnxruntime()
    providers: list[Any] = ["CPUExecutionProvider"]
    if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        index = device.index if device.index is not None else torch.cuda.current_device()  # else all on GPU 0
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
    return providers


@dataclass(frozen=True)
class OnnxModel:
    """An exported ``.onnx`` model in an onnxruntime session: call it on a uint8 batch."""

    session: Any  # onnxruntime.InferenceSession
    input_name: str
    output_name: str

    @property
    def provider(self) -> str:
        """The execution provider that runs the model (onnxruntime falls back to the CPU's silently)."""
        return str(self.session.get_providers()[0])

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        array = images.detach().to("cpu", torch.uint8).contiguous().numpy()
        saliency = self.session.run([self.output_name], {self.input_name: array})[0]
        return torch.from_numpy(saliency).to(images.device)


def _load_onnx(path: Path, device: torch.device, threads: int | None) -> OnnxModel:
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), options, providers=onnx_providers(device))
    except Exception as e:  # onnxruntime raises its own types (InvalidProtobuf, Fail, ...)
        raise OptionError(f"cannot load ONNX model {path}: {error_line(e)}") from None
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or inputs[0].type != "tensor(uint8)" or len(inputs[0].shape) != 4 or len(outputs) != 1:
        found = ", ".join(f"{i.name} {i.type} {i.shape}" for i in inputs)
        raise OptionError(
            f"--model {path} does not take one uint8 (N, 3, H, W) image batch (its inputs: {found}); "
            "export it with `python run.py export`"
        )
    return OnnxModel(session, inputs[0].name, outputs[0].name)


def _load_torchscript(path: Path, device: torch.device) -> SaliencyFunction:
    try:
        with quiet_torchscript():
            module = torch.jit.load(str(path), map_location=device)
    except Exception as e:  # torch raises RuntimeError and others for files that are not TorchScript
        raise OptionError(f"cannot load TorchScript model {path}: {_torchscript_load_reason(e)}") from None
    module.eval()

    @torch.no_grad()
    def run(images: torch.Tensor) -> torch.Tensor:
        return module(images.to(device))

    return run


def _torchscript_load_reason(e: BaseException) -> str:
    text = str(e)
    if "constants.pkl" in text or "data.pkl" in text:  # a zip written by torch.save, not by torch.jit.save
        return "it is a PyTorch file but not TorchScript (a checkpoint goes with --checkpoint)"
    if "central directory" in text or "zip archive" in text:
        return "it is not a readable TorchScript file (corrupt, truncated, or another format)"
    return error_line(e)


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Silence torch's deprecation warning on ``torch.jit`` (still what libtorch C++ and mobile apps load)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit.* is deprecated", category=FutureWarning)
        yield
