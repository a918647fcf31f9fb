"""R3Net, its backbones, the key layouts of weights files, pretrained sources and trained models.

``BACKBONES`` comes with the package. The other names need torch: each is imported from its module
when first used (PEP 562), so that the command line lists the backbones without importing torch.
"""

from importlib import import_module
from typing import Any

from .backbones import BACKBONES

_LAZY = {  # name -> the module that defines it
    "Backbone": "r3net",
    "R3Net": "r3net",
    "build_backbone": "r3net",
    "Weights": "backbone_weights",
    "load_backbone_weights": "backbone_weights",
    "resolve_weights": "backbone_weights",
    "TrainedWeights": "trained_model",
    "build_model": "trained_model",
    "infer_backbone": "trained_model",
    "read_trained_weights": "trained_model",
    "resolve_checkpoint": "trained_model",
    "convert_original_backbone_state_dict": "key_layouts",
    "convert_original_r3net_state_dict": "key_layouts",
    "load_model_state": "key_layouts",
    "to_our_layout": "key_layouts",
}

__all__ = ["BACKBONES", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_LAZY[name]}", __name__), name)
