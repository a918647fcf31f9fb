"""The weights a fresh run starts from (``--init-from`` or ``--pretrained``): fetched once per node
before any worker starts, checked, and recorded in ``config.weights``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..checkpoint_io import load_checkpoint, model_state_dict
from ..config import TrainConfig
from ..errors import CheckpointError, OptionError, error_line
from ..model.backbone_weights import IMAGENET, NONE, Weights, load_backbone_weights, resolve_weights, sha256_of
from ..model.r3net import build_backbone
from ..model.trained_model import check_fits, find_backbone, resolve_checkpoint


def resolve_initial_weights(config: TrainConfig) -> TrainConfig:
    """Fetch (once per node, before any worker starts) and check the weights a fresh run starts
    from: ``--init-from``'s whole model, else ``--pretrained``'s backbone; record them in
    ``config.weights``. A resumed run keeps the record of its first start (its checkpoint holds
    the weights)."""
    if config.resume:
        return dataclasses.replace(config, weights=_recorded_weights(config.output_dir))
    if config.init_from:
        weights = _init_from_weights(config)
    else:
        weights = resolve_weights(config.pretrained, config.backbone)
        if weights is not None:
            try:  # a file of another architecture is one line listing the keys, before any worker
                load_backbone_weights(build_backbone(config.backbone), weights.file)
            except ValueError as e:
                raise OptionError(f"--pretrained {config.pretrained}: {error_line(e)}") from None
    return dataclasses.replace(config, weights=weights.as_dict() if weights else None)


def _init_from_weights(config: TrainConfig) -> Weights:
    if config.pretrained not in (IMAGENET, NONE):  # the default, or an explicit "no backbone weights"
        raise OptionError("--init-from and --pretrained both give the starting weights: choose one")
    assert config.init_from is not None
    # a Hub source is fetched here, once per node; workers read the local file recorded in config.weights
    path = resolve_checkpoint(config.init_from, f"--init-from {config.init_from}")
    if not path.is_file():
        raise OptionError(f"--init-from {path}: no such file")
    try:
        state = model_state_dict(load_checkpoint(path), path)
    except CheckpointError as e:
        raise OptionError(f"--init-from: {e}") from None
    found = find_backbone(path, state)
    if found is not None and found != config.backbone:
        raise OptionError(
            f"--init-from {config.init_from} holds an R3Net with backbone {found}, not {config.backbone}: "
            f"add --backbone {found}"
        )
    check_fits(config.backbone, state, config.init_from)  # or one line saying why not
    # absolute, not resolved: a Hub cache's file is a symlink to a blob without the .safetensors suffix
    return Weights(source="init-from", file=str(path.absolute()), sha256=sha256_of(path))


def _recorded_weights(output_dir: str) -> dict[str, str] | None:
    """The ``weights`` record of the run's config.json, if it has one."""
    try:
        return TrainConfig.load(Path(output_dir) / "config.json").weights
    except (OSError, ValueError, TypeError):
        return None
