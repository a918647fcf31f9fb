"""The weights a fresh run starts from (``--init-from`` or ``--pretrained``): fetched once per node
before any worker starts, checked, and recorded in ``config.weights``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..checkpoint_io import load_checkpoint, model_state_dict
from ..config import TrainConfig
from ..errors import CheckpointError, OptionError, error_line
from ..model.backbone_weights import IMAGENET, NONE, Weights, load_backbone_weights, resolve_weights, sha256_of
from ..model.key_layouts import HEAD_PREFIXES, backbone_state_dict_from_any, to_our_layout
from ..model.r3net import build_backbone
from ..model.trained_model import check_fits, find_backbone, infer_backbone


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
            try:  # a file of another architecture is one line, before any worker
                load_backbone_weights(build_backbone(config.backbone), weights.file)
            except ValueError as e:
                hint = _what_the_file_fits(weights.file, config.backbone)
                raise OptionError(f"--pretrained {config.pretrained}: {error_line(e)}{hint}") from None
    return dataclasses.replace(config, weights=weights.as_dict() if weights else None)


def _what_the_file_fits(file: str, backbone: str) -> str:
    """Where a ``--pretrained`` file that does not fit ``backbone`` belongs, as the end of the error
    line: another backbone (``--backbone X``, as ``--init-from`` suggests), or ``--init-from`` for a
    whole trained R3Net; empty when its shapes fit no backbone we build."""
    try:
        whole = model_state_dict(load_checkpoint(file, what="weights file"), file)
        if any(key.startswith(HEAD_PREFIXES) for key in to_our_layout(whole)):
            found = infer_backbone(whole)
            named = f" ({found})" if found else ""
            return f"; it holds a whole trained R3Net{named}: start from it with --init-from {file}"
        found = infer_backbone({f"backbone.{k}": v for k, v in backbone_state_dict_from_any(whole).items()})
    except (CheckpointError, ValueError):  # not a layout we read: the mismatch line says enough
        return ""
    if found is not None and found != backbone:
        return f"; it holds {found} weights: add --backbone {found}"
    return ""


def _init_from_weights(config: TrainConfig) -> Weights:
    if config.pretrained not in (IMAGENET, NONE):  # the default, or an explicit "no backbone weights"
        raise OptionError("--init-from and --pretrained both give the starting weights: choose one")
    path = Path(config.init_from)
    if not path.is_file():
        raise OptionError(f"--init-from {path}: no such file")
    try:
        state = model_state_dict(load_checkpoint(path), path)
    except CheckpointError as e:
        raise OptionError(f"--init-from: {e}") from None
    found = find_backbone(path, state)
    if found is not None and found != config.backbone:
        raise OptionError(
            f"--init-from {path} holds an R3Net with backbone {found}, not {config.backbone}: add --backbone {found}"
        )
    check_fits(config.backbone, state, path)  # or one line saying why not
    return Weights(source="init-from", file=str(path.resolve()), sha256=sha256_of(path))


def _recorded_weights(output_dir: str) -> dict[str, str] | None:
    """The ``weights`` record of the run's config.json, if it has one."""
    try:
        return TrainConfig.load(Path(output_dir) / "config.json").weights
    except (OSError, ValueError, TypeError):
        return None
