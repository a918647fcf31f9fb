"""The one loader of a model that makes maps, for ``predict`` and ``serve``: a training checkpoint, an
``hf-hub:`` model or a file written by ``export`` (ONNX or TorchScript), with the same maps from each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..model.trained_model import TrainedWeights, build_model, read_trained_weights
from .engine import predict_maps, saliency_at_input_size, to_8bit_maps
from .exported import OnnxModel, load_exported

# a uint8 batch (N, 3, H, W) on the device, ``--size`` and ``--max-side`` to 8-bit maps (N, H, W)
SizedMapFunction = Callable[[torch.Tensor, int | None, int | None], torch.Tensor]


@dataclass(frozen=True)
class LoadedModel:
    """A model's 8-bit maps at ``inference_shape(size, max_side)`` (before ``--crf`` and ``--threshold``), and what
    runs them."""

    maps: SizedMapFunction
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
