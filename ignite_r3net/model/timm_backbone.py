"""R3Net's backbone from a timm model, ``--backbone timm:NAME``: ``timm.create_model(NAME, features_only=True)``,
its last level at each of the strides 4, 8, 16, 32 as layer1..layer4 and its stride-2 level (the stem, if it has
one), max-pooled, as layer0; docs/training.md#timm-backbones says why and which models fit."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import OptionError, error_line, install_extra, listing, optional_module
from .backbones import TIMM_PREFIX

TIMM_MISSING = f"--backbone {TIMM_PREFIX}NAME needs the optional extra timm: {install_extra('timm')}"
STRIDES = (4, 8, 16, 32)  # layer1..layer4
STEM_STRIDE = 2


def require_timm() -> ModuleType:
    return optional_module("timm", TIMM_MISSING)


def create_features(backbone: str, state: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """timm's ``features_only`` model of ``timm:NAME``, random or with ``state`` (a timm checkpoint of the whole
    model) loaded by timm's own loader (its key conversions; the classifier left out)."""
    timm = require_timm()
    name = backbone[len(TIMM_PREFIX) :]
    weights = {} if state is None else {"pretrained": True, "pretrained_cfg_overlay": {"state_dict": dict(state)}}
    logger = logging.getLogger("timm")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its warning that the classifier's keys are unused: left out on purpose
    try:
        return timm.create_model(name, features_only=True, **weights)
    except Exception as e:  # noqa: BLE001 - unknown name, no features_only support, a weight of another shape
        if state is not None and timm.is_model(name):
            raise ValueError(f"timm cannot load it into {name}: {error_line(e)}") from None
        why = error_line(e)
        raise OptionError(f"--backbone {backbone}: timm cannot build {name} with features_only=True: {why}") from None
    finally:
        logger.setLevel(level)


def imagenet_weights(backbone: str) -> str:
    """``hf-hub:ORG/NAME`` of the weights timm loads for ``timm:NAME`` with ``pretrained=True``."""
    timm = require_timm()
    name = backbone[len(TIMM_PREFIX) :]
    try:
        hub_id = getattr(timm.models.get_pretrained_cfg(name), "hf_hub_id", None)
    except RuntimeError as e:  # an unknown pretrained tag
        raise OptionError(f"--pretrained imagenet: {error_line(e)}") from None
    if not hub_id:
        raise OptionError(
            f"--pretrained imagenet: timm publishes no Hugging Face Hub weights for {name}; "
            "use --pretrained none (random weights) or --pretrained FILE (a timm checkpoint)"
        )
    return f"hf-hub:{hub_id}"


class TimmBackbone(nn.Module):
    """The feature levels of a timm model as R3Net's stages; ``channels``: each one's channels."""

    def __init__(self, backbone: str) -> None:
        super().__init__()
        self.name = backbone
        self.body = create_features(backbone)
        info = cast(Any, self.body).feature_info  # timm's FeatureInfo
        strides = list(info.reduction())
        lacking = [s for s in STRIDES if s not in strides]
        if len(strides) < 4 or lacking:
            raise OptionError(
                f"--backbone {backbone}: its features_only model gives {len(strides)} feature level(s), at strides "
                f"{listing(strides)}; R3Net needs levels at strides 4, 8, 16 and 32 (none at {listing(lacking)})"
            )
        # the last level of each stride: the deepest features at that resolution
        levels = [max(i for i, s in enumerate(strides) if s == stride) for stride in STRIDES]
        self.pool_stem = STEM_STRIDE in strides
        if self.pool_stem:
            levels.insert(0, max(i for i, s in enumerate(strides) if s == STEM_STRIDE))
        self.levels = levels
        self.channels: tuple[int, ...] = tuple(info.channels()[i] for i in levels)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:  # the chosen levels, finest first
        features = self.body(x)
        chosen = [features[i] for i in self.levels]
        if self.pool_stem:
            chosen[0] = F.max_pool2d(chosen[0], kernel_size=3, stride=2, padding=1)
        return chosen

    def load_timm_weights(self, state: Mapping[str, torch.Tensor], what: str) -> None:
        """Load a timm checkpoint of the whole model; ``ValueError`` when a weight of the features is not in it.
        timm's loader for ``features_only`` takes what fits and leaves the rest random: two loads under
        different seeds tell which weights it left random (they differ)."""
        with torch.random.fork_rng():
            torch.manual_seed(0)
            loaded = create_features(self.name, state)
            torch.manual_seed(1)
            again = create_features(self.name, state).state_dict()
        weights = loaded.state_dict()
        random = [key for key, value in weights.items() if not torch.equal(value, again[key])]
        if random:
            raise ValueError(
                f"{what} does not fit {self.name}: {len(random)} of the model's {len(weights)} weights are not in "
                f"it [{listing(random, 3)}]"
            )
        self.body.load_state_dict(weights)
