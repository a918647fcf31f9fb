"""The weights a fresh run starts from (``--init-from`` or ``--pretrained``): fetched once per node,
checked and recorded (``config.weights``) before any worker starts."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..checkpoint_io import load_checkpoint, model_state_dict
from ..config import TrainConfig
from ..errors import CheckpointError, OptionError, error_line, warn
from ..model.backbone_weights import IMAGENET, NONE, Weights, load_backbone_weights, resolve_weights, sha256_of
from ..model.key_layouts import HEAD_PREFIXES, backbone_state_dict_from_any, to_our_layout
from ..model.r3net import build_backbone
from ..model.trained_model import check_fits, find_backbone, infer_backbone, resolve_checkpoint
from .resume import read_record


def resolve_initial_weights(config: TrainConfig, resumed: bool) -> dict[str, str] | None:
    """The record ``{source, file, sha256}`` of ``--init-from``'s whole model, else ``--pretrained``'s
    backbone (None: random), fetched and checked; ``config.weights`` (from ``--config``) is what was
    expected. A resumed run keeps the record of its first start."""
    if resumed:
        return read_record(config.output_dir, "config.json").get("weights")
    weights: Weights | None
    if config.init_from:
        weights = _init_from_weights(config, config.init_from)
    else:
        weights = resolve_weights(config.pretrained, config.backbone)
        if weights is not None:
            try:  # a file of another architecture is one line, before any worker
                load_backbone_weights(build_backbone(config.backbone), weights.file)
            except ValueError as e:
                hint = _what_the_file_fits(weights.file, config.backbone)
                raise OptionError(f"--pretrained {config.pretrained}: {error_line(e)}{hint}") from None
    record = weights.as_dict() if weights else None
    expected = config.weights  # train --config expects the weights its saved run started from
    if expected and record and expected.get("sha256") != record["sha256"]:
        warn(
            f"the starting weights differ from those the saved recipe's run started from: {record['file']} has "
            f"sha256 {record['sha256'][:12]}..., the record says {expected.get('file')} with "
            f"{str(expected.get('sha256'))[:12]}..."
        )
    return record


def _what_it_holds(state: Mapping[str, torch.Tensor]) -> tuple[str, str | None] | None:
    """``("R3Net" or "backbone", its backbone or None)``; None for a layout we do not read."""
    try:
        if any(key.startswith(HEAD_PREFIXES) for key in to_our_layout(state)):
            return "R3Net", infer_backbone(state)
        return "backbone", infer_backbone({f"backbone.{k}": v for k, v in backbone_state_dict_from_any(state).items()})
    except ValueError:
        return None


def _what_the_file_fits(file: str, backbone: str) -> str:
    """Where a ``--pretrained`` file that does not fit ``backbone`` belongs, as the end of the error line
    (``--backbone X``, or ``--init-from`` for a whole R3Net); empty when nothing we build fits it."""
    try:
        held = _what_it_holds(model_state_dict(load_checkpoint(file, what="weights file"), file))
    except CheckpointError:  # the mismatch line says enough
        return ""
    kind, found = held or ("", None)
    if kind == "R3Net":
        named = f" ({found})" if found else ""
        return f"; it holds a whole trained R3Net{named}: start from it with --init-from {file}"
    if found is not None and found != backbone:
        return f"; it holds {found} weights: add --backbone {found}"
    return ""


def _init_from_weights(config: TrainConfig, init_from: str) -> Weights:
    if config.pretrained not in (IMAGENET, NONE):  # the default, or an explicit "no backbone weights"
        raise OptionError("--init-from and --pretrained both give the starting weights: choose one")
    # a Hub source is fetched here, once per node; workers read the local file recorded in config.weights
    path = resolve_checkpoint(init_from, f"--init-from {init_from}")
    if not path.is_file():
        raise OptionError(f"--init-from {path}: no such file")
    try:
        state = model_state_dict(load_checkpoint(path), path)
    except CheckpointError as e:
        raise OptionError(f"--init-from: {e}") from None
    found = find_backbone(path, state)
    if found is not None and found != config.backbone:
        raise OptionError(
            f"--init-from {init_from} holds an R3Net with backbone {found}, not {config.backbone}: "
            f"add --backbone {found}"
        )
    # backbone weights: the fix is --pretrained, not another --backbone (an unknown layout: check_fits says)
    held = _what_it_holds(state)
    if held is not None and held[0] == "backbone":
        named, flag = (f" ({held[1]})", f" --backbone {held[1]}") if held[1] else ("", "")
        raise OptionError(
            f"--init-from {init_from} holds backbone weights{named}, not a whole trained R3Net: start from them "
            f"with --pretrained {init_from}{flag}"
        )
    try:
        check_fits(config.backbone, state, init_from)  # or one line saying why not
    except OptionError as e:
        raise OptionError(f"--init-from: {e}") from None
    # absolute, not resolved: a Hub cache's file is a symlink to a blob without the .safetensors suffix
    return Weights(source="init-from", file=str(path.absolute()), sha256=sha256_of(path))
