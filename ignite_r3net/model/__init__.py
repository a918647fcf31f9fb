"""R3Net, its backbones, the key layouts of weights files, pretrained sources and trained models."""

from .backbones import BACKBONES, Backbone, build_backbone
from .pretrained import Weights, load_backbone_weights, resolve_weights
from .r3net import R3Net
from .trained import TrainedWeights, build_model, infer_backbone, read_trained_weights
from .weights import (
    convert_original_backbone_state_dict,
    convert_original_r3net_state_dict,
    load_model_state,
    to_our_layout,
)

__all__ = [
    "BACKBONES",
    "Backbone",
    "R3Net",
    "TrainedWeights",
    "Weights",
    "build_backbone",
    "build_model",
    "convert_original_backbone_state_dict",
    "convert_original_r3net_state_dict",
    "infer_backbone",
    "load_backbone_weights",
    "load_model_state",
    "read_trained_weights",
    "resolve_weights",
    "to_our_layout",
]
