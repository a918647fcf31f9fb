"""R3Net model, its backbones and weight loading."""

from ignite_r3net.model.backbones import BACKBONES, Backbone, build_backbone
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.model.weights import (
    convert_original_backbone_state_dict,
    convert_original_r3net_state_dict,
    load_model_state,
    to_our_layout,
)

__all__ = [
    "BACKBONES",
    "Backbone",
    "R3Net",
    "build_backbone",
    "convert_original_backbone_state_dict",
    "convert_original_r3net_state_dict",
    "load_model_state",
    "to_our_layout",
]
