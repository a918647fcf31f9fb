"""The models that make maps, for ``predict`` and ``serve``: a training checkpoint, an ``hf-hub:`` model or a
file written by ``export`` (ONNX through onnxruntime, or TorchScript), loaded by one function, ``load_model``, with
the same maps from each."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ..errors import OptionError, error_line, install_extra, optional_module
from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from .engine import SaliencyFunction, predict_maps, saliency_at_input_size, to_8bit_maps


@dataclass(frozen=True)
class LoadedModel:
    """A model's 8-bit maps at ``inference_shape(size, max_side)`` (before ``--crf`` and ``--threshold``), and what
    runs them."""

    maps: Callable[[torch.Tensor, int | None, int | None], torch.Tensor]  # a uint8 batch, --size, --max-side
    backbone: str | None  # None: an exported file (it holds its backbone)
    provider: str  # "torch", or onnxruntime's execution provider


def load_model(
    checkpoint: str | None,
    exported: str | None,
    device: torch.device,
    backbone: str | None = None,
    amp: str = "off",
    weights: TrainedWeights | None = None,
    threads: int | None = None,
) -> LoadedModel:
    """The ``exported`` file (onnxruntime with ``threads``, or TorchScript), else the ``checkpoint``'s R3Net (its
    ``weights`` when already read) run under ``amp``, on ``device``; one-line ``OptionError``/``CheckpointError``."""
    if exported is not None:
        run = load_exported(exported, device, threads)
        provider = run.provider if isinstance(run, OnnxModel) else "torch"
        return LoadedModel(
            lambda x, size, side: to_8bit_maps(saliency_at_input_size(run, x, size, side)), None, provider
        )
    assert checkpoint is not None  # the options hold one of the two
    weights = weights or read_trained_weights(checkpoint, backbone)
    model = build_model(weights, device)
    return LoadedModel(lambda x, size, side: predict_maps(model, x, amp, size, side), weights.backbone, "torch")


ONNXRUNTIME_MISSING = f"--model FILE.onnx needs onnxruntime: {install_extra('onnx')}"


def is_onnx(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".onnx"


def require_onnxruntime() -> ModuleType:
    return optional_module("onnxruntime", ONNXRUNTIME_MISSING)


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


def onnx_session(path: str | Path, providers: list[Any], threads: int | None = None) -> Any:
    """An onnxruntime ``InferenceSession`` of ``path`` (``threads`` for its operators); onnxruntime's own errors."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=providers)


def _load_onnx(path: Path, device: torch.device, threads: int | None) -> OnnxModel:
    providers = onnx_providers(device)  # a missing onnxruntime is its own error
    try:
        session = onnx_session(path, providers, threads)
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
