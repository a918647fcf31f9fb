"""Key mapping between the layouts of weights files, and strict loading. **ours**: ``backbone.layer0.conv1.weight``,
``predict3.6.bias`` (``module.``-prefixed from DDP); **torchvision** / timm ResNet: ``conv1.weight``, ``fc.*``;
**original** (zijundeng/R3Net): the torch7-converted ResNeXt, one nested ``nn.Sequential`` with positional keys
(``4.0.0.0.0.weight``: layer1, block 0, first conv), wrapped as ``layer0`` (children 0..3) and ``layer1..4`` (4..7)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import torch
from torch import nn

from ..errors import listing

logger = logging.getLogger(__name__)

StateDict = Mapping[str, torch.Tensor]

# Inside one block of the torch7-converted ResNeXt:
#   <block>.0 = ConcatTable(residual branch, shortcut); <block>.1 = add; <block>.2 = relu
#   residual branch = Sequential(Sequential(conv1, bn1, relu, conv2, bn2, relu), conv3, bn3)
_ORIGINAL_BLOCK_PARTS = {
    "0.0.0.0": "conv1",
    "0.0.0.1": "bn1",
    "0.0.0.3": "conv2",
    "0.0.0.4": "bn2",
    "0.0.1": "conv3",
    "0.0.2": "bn3",
    "0.1.0": "downsample.0",
    "0.1.1": "downsample.1",
}
# Top-level children of the torch7-converted Sequential that carry weights.
_ORIGINAL_TOP = {"0": "conv1", "1": "bn1", "10.1": "fc"}
_ORIGINAL_STAGE_OFFSET = 3  # child 4 is layer1, ..., child 7 is layer4
_ORIGINAL_BLOCK_KEY = re.compile(r"^(\d+)\.(\d+)\.(.+)\.(weight|bias|running_mean|running_var|num_batches_tracked)$")
# key prefixes of R3Net's head (everything but the backbone)
HEAD_PREFIXES = ("reduce_low.", "reduce_high.") + tuple(f"predict{i}." for i in range(7))
_DDP_PREFIX = "module."


def convert_original_backbone_state_dict(sd: StateDict) -> dict[str, torch.Tensor]:
    """The torch7-converted ResNeXt keys (``4.0.0.0.0.weight``) as torchvision keys; ValueError on others."""
    new_keys = {key: _convert_original_backbone_key(key) for key in sd}
    unknown = [key for key, new_key in new_keys.items() if new_key is None]
    if unknown:
        raise ValueError(f"keys not in the original ResNeXt layout: {listing(unknown)}")
    return {str(new_keys[key]): value for key, value in sd.items()}


def _convert_original_backbone_key(key: str) -> str | None:
    for old, new in _ORIGINAL_TOP.items():
        if key.startswith(old + ".") and key.count(".") == old.count(".") + 1:
            return new + key[len(old) :]
    match = _ORIGINAL_BLOCK_KEY.match(key)
    if match is None:
        return None
    child, block, part, param = match.groups()
    stage = int(child) - _ORIGINAL_STAGE_OFFSET
    if not 1 <= stage <= 4 or part not in _ORIGINAL_BLOCK_PARTS:
        return None
    return f"layer{stage}.{block}.{_ORIGINAL_BLOCK_PARTS[part]}.{param}"


def convert_original_r3net_state_dict(sd: StateDict) -> dict[str, torch.Tensor]:
    """A whole original R3Net checkpoint in our keys: the backbone's renamed, the head's unchanged."""
    backbone: dict[str, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for key, value in _strip_ddp_prefix(sd).items():
        if key.startswith(HEAD_PREFIXES):
            out[key] = value
            continue
        match = re.match(r"^layer(\d)\.(.+)$", key)
        if match is None:
            raise ValueError(f"key {key!r} is not in the original R3Net layout")
        stage, rest = int(match.group(1)), match.group(2)
        # layer0 is Sequential(children 0..3): its indices are the top-level ones; layerN is child N + 3
        child = rest if stage == 0 else f"{stage + _ORIGINAL_STAGE_OFFSET}.{rest}"
        backbone[child] = value
    for key, value in convert_original_backbone_state_dict(backbone).items():
        out[_torchvision_to_backbone_key(key, prefix="backbone.")] = value
    return out


def _torchvision_to_backbone_key(key: str, prefix: str = "") -> str:
    if key.startswith(("conv1.", "bn1.")):
        return f"{prefix}layer0.{key}"
    return prefix + key


def _strip_ddp_prefix(sd: StateDict) -> dict[str, torch.Tensor]:
    if sd and all(k.startswith(_DDP_PREFIX) for k in sd):
        return {k[len(_DDP_PREFIX) :]: v for k, v in sd.items()}
    return dict(sd)


def strict_load(module: nn.Module, sd: Mapping[str, torch.Tensor], what: str) -> None:
    """Load ``sd`` exactly; a ValueError lists missing / unexpected keys. Absent ``num_batches_tracked`` are
    tolerated: PyTorch < 0.4.1 (the original release) had none, and only ``momentum=None`` reads them."""
    given, own = set(sd), module.state_dict()
    needed = [key for key in own if key in given or not key.endswith("num_batches_tracked")]
    missing = sorted(set(needed) - given)
    unexpected = sorted(given - set(own))
    if missing or unexpected:
        # counts and a few names: hundreds of them would hide the line's point
        parts = []
        if missing:
            parts.append(f"{len(missing)} of the model's {len(needed)} keys are not in it [{listing(missing, 3)}]")
        if unexpected:
            parts.append(f"{len(unexpected)} of its {len(given)} keys are not the model's [{listing(unexpected, 3)}]")
        raise ValueError(f"{what} does not match the model: {'; '.join(parts)}")
    module.load_state_dict({**own, **sd}, strict=True)  # own: the absent num_batches_tracked


def backbone_state_dict_from_any(sd: StateDict) -> dict[str, torch.Tensor]:
    """A backbone state_dict of any layout in :class:`Backbone` keys; ``fc.*`` keys dropped (logged)."""
    sd = _strip_ddp_prefix(sd)
    if "0.weight" in sd:  # the original torch7-converted ResNeXt
        sd = convert_original_backbone_state_dict(sd)
    fc_keys = sorted(k for k in sd if k.startswith("fc."))
    if fc_keys:
        logger.info("ignoring ImageNet classifier keys: %s", ", ".join(fc_keys))
    return {_torchvision_to_backbone_key(k): v for k, v in sd.items() if not k.startswith("fc.")}


def load_model_state(model: nn.Module, state_dict: StateDict) -> None:
    """Load a whole R3Net state_dict of any layout strictly; a ValueError lists missing / unexpected keys."""
    strict_load(model, to_our_layout(state_dict), "model state_dict")


def to_our_layout(state_dict: StateDict) -> dict[str, torch.Tensor]:
    """An R3Net state_dict in our key layout: a DDP ``module.`` prefix stripped, the original's converted."""
    sd = _strip_ddp_prefix(state_dict)
    if "layer0.0.weight" in sd:  # the original release's
        sd = convert_original_r3net_state_dict(sd)
    return sd
