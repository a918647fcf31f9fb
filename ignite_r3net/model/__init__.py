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
    "Weights": "pretrained",
    "load_backbone_weights": "pretrained",
    "resolve_weights": "pretrained",
    "TrainedWeights": "trained",
    "build_model": "trained",
    "infer_backbone": "trained",
    "read_trained_weights": "trained",
    "convert_original_backbone_state_dict": "weights",
    "convert_original_r3net_state_dict": "weights",
    "load_model_state": "weights",
    "to_our_layout": "weights",
}

__all__ = ["BACKBONES", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_LAZY[name]}", __name__), name)
