"""A trained R3Net from a checkpoint file (ours, the original release's, ``export --format hub``'s) or
``hf-hub:ORG/NAME[@REVISION]``. The backbone is ``--backbone``, else ``config.json``'s beside the file,
else inferred from the shapes (a timm backbone cannot be); the head width is read from the shapes; checked
on the meta device, so a mismatch is one line before any allocation."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..atomic_files import read_json_object
from ..checkpoint_io import load_checkpoint, model_state_dict
from ..errors import OptionError, error_line
from .backbone_weights import fetch_hub_file, is_hub_source, sha256_of
from .backbones import BACKBONE_NAMES, BACKBONES, is_known_backbone
from .key_layouts import load_model_state, to_our_layout
from .r3net import HEAD_CHANNELS, R3Net

HUB_WEIGHTS = "model.safetensors"  # what ``export --format hub`` writes, beside its config.json
HUB_CONFIG = "config.json"


@dataclass
class TrainedWeights:
    """A model state_dict read from ``path`` (the local file of ``source``) and the backbone it fits."""

    path: str
    backbone: str
    state: dict[str, torch.Tensor]
    source: str = ""
    head_width: float = 1.0

    def sha256(self) -> str:
        return sha256_of(self.path)


def resolve_checkpoint(source: str | Path, what: str | None = None) -> Path:
    """The local file of a checkpoint source: a path as it is (``load_checkpoint`` checks it), else the
    Hub repository's ``model.safetensors`` and ``config.json``. ``OptionError`` begins with ``what``."""
    if not is_hub_source(str(source)):
        return Path(source)
    what, ways_out = what or f"--checkpoint {source}", "use a local checkpoint file"
    weights = fetch_hub_file(str(source), HUB_WEIGHTS, what, ways_out)
    if weights is None:
        raise OptionError(
            f"{what}: the repository holds no {HUB_WEIGHTS} (one written by 'export --format hub'); {ways_out}"
        )
    fetch_hub_file(str(source), HUB_CONFIG, what, ways_out)  # beside the weights; without it, --backbone or shapes
    return weights


def read_trained_weights(source: str | Path, backbone: str | None = None) -> TrainedWeights:
    """The checked model weights of ``source``; ``backbone`` overrides the file's own. One-line errors."""
    path = resolve_checkpoint(source)
    state = model_state_dict(load_checkpoint(path), path)
    name = backbone or find_backbone(path, state)
    if name is None:
        raise OptionError(f"cannot tell the backbone of {source}: pass --backbone")
    width = infer_head_width(state)
    check_fits(name, state, source, width)
    return TrainedWeights(str(path), name, state, str(source), width)


def find_backbone(path: str | Path, state: Mapping[str, torch.Tensor]) -> str | None:
    """The backbone in the ``config.json`` beside ``path``, else the one the shapes match, else None."""
    name = (read_json_object(Path(path).parent / "config.json") or {}).get("backbone")
    return name if isinstance(name, str) and name else infer_backbone(state)


def build_model(weights: TrainedWeights, device: torch.device | str = "cpu") -> nn.Module:
    """R3Net with ``weights`` loaded, in eval mode on ``device``."""
    model = R3Net(weights.backbone, weights.head_width)
    load_model_state(model, weights.state)
    return model.to(device).eval()


def check_fits(backbone: str, state: Mapping[str, torch.Tensor], path: str | Path, head_width: float = 1.0) -> None:
    """Load ``state`` into an R3Net on the meta device: a mismatch is one ``OptionError`` line."""
    if not is_known_backbone(backbone):
        raise OptionError(f"unknown --backbone {backbone!r}; valid names: {BACKBONE_NAMES}")
    with torch.device("meta"):
        model = R3Net(backbone, head_width)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "copying into a meta parameter is a no-op": intended
            load_model_state(model, state)
    except (ValueError, RuntimeError) as e:
        raise OptionError(
            f"checkpoint {path} does not fit backbone {backbone} (wrong --backbone?): {error_line(e)}"
        ) from None


def infer_head_width(state: Mapping[str, torch.Tensor]) -> float:
    """The head width of an R3Net state_dict (any layout): ``predict0``'s input channels / 256; 1 if not there."""
    try:
        weight = to_our_layout(state).get("predict0.weight")
    except ValueError:
        return 1.0
    return weight.shape[1] / HEAD_CHANNELS if weight is not None and weight.dim() == 4 else 1.0


def infer_backbone(state: Mapping[str, torch.Tensor]) -> str | None:
    """The backbone whose shapes match ``state`` (any layout), or None: the blocks per stage and the
    grouping of the first 3x3 convolution tell every backbone in ``BACKBONES`` apart."""
    try:
        sd = to_our_layout(state)
    except ValueError:
        return None
    prefixes = [f"backbone.layer{stage}." for stage in range(1, 5)]  # blocks per stage: backbone.layerN.<block>.
    layers = tuple(len({k.split(".")[2] for k in sd if k.startswith(prefix)}) for prefix in prefixes)
    bottleneck = "backbone.layer1.0.conv3.weight" in sd
    conv2 = sd.get("backbone.layer1.0.conv2.weight")
    if conv2 is None or conv2.dim() != 4:
        return None
    # conv2 of the first block is (width, width / groups, 3, 3) with width = groups * width_per_group
    groups, per_group = conv2.shape[0] // conv2.shape[1], conv2.shape[1]
    for name, spec in BACKBONES.items():
        if layers != spec.layers or (spec.block == "Bottleneck") != bottleneck:
            continue
        if not bottleneck or (spec.groups, spec.width_per_group) == (groups, per_group):
            return name
    return None
