"""``export --format hub``: a folder for ``hf upload ORG/NAME DIR``, which every command then reads
as ``--checkpoint hf-hub:ORG/NAME``: ``model.safetensors`` (the state_dict in our key layout, no
pickle), ``config.json`` (the backbone, the exported files' input contract, the source checkpoint,
the starting weights with their sha256s, and the run's training recipe verbatim when the checkpoint
has one beside it: review its paths before uploading) and ``README.md``, the model card.

The folder is filled under a temporary name, read back (weights, backbone, output on an image) and
only then renamed to ``--output``: a failed export leaves the folder that was there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from .. import __version__
from ..atomic_files import atomic_folder, write_json, write_text
from ..errors import ExportError, OptionError
from ..exported_model import contract
from ..model.trained_model import HUB_CONFIG, HUB_WEIGHTS, TrainedWeights, build_model, read_trained_weights
from ..options import ExportOptions
from ..output_paths import check_writable_folder
from .model_card import model_card, read_results

HUB_FORMAT = 1  # config.json's "ignite_r3net": {"format": ...}; bump when the folder's layout changes
CARD = "README.md"
_CHECK_SHAPE = (1, 3, 45, 71)


def write_hub_folder(options: ExportOptions) -> Path:
    """Write the Hub folder of ``options.checkpoint`` to ``options.output``; returns its path. Raises
    ``OptionError`` (an output that is a file or a folder of other files, an unreadable ``--results``),
    ``CheckpointError`` (unreadable checkpoint) or ``ExportError`` (the folder does not give the model)."""
    out = _check_output_folder(Path(options.output))
    results = read_results(options.results) if options.results else None
    weights = read_trained_weights(options.checkpoint, options.backbone)
    model = build_model(weights, "cpu")
    config = hub_config(weights)
    card_options = {"license": options.license, "trained_on": options.trained_on, "repo_id": options.repo_id}
    with atomic_folder(out) as tmp:
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(tmp / HUB_WEIGHTS))
        write_json(config, tmp / HUB_CONFIG)
        write_text(model_card(config, results, card_options), tmp / CARD)
        _check_folder(tmp, model, weights.backbone)
    print(
        f"wrote {out} (hub: {HUB_WEIGHTS}, {HUB_CONFIG}, {CARD}; backbone {weights.backbone}; read back and "
        f"checked); upload it with: hf upload {options.repo_id or 'ORG/NAME'} {out}"
    )
    return out


def hub_config(weights: TrainedWeights) -> dict[str, Any]:
    """The config.json of a Hub folder holding ``weights``."""
    training, starting = _run_record(Path(weights.path))
    meta = contract(weights.backbone, weights.source, f"ignite_r3net {__version__}, torch {torch.__version__}")
    return {
        "ignite_r3net": {"format": HUB_FORMAT, "version": __version__},
        "architecture": "R3Net",
        "backbone": weights.backbone,
        "contract": meta,
        "checkpoint": {"source": meta["source"], "sha256": weights.sha256()},  # a Hub id, or the file's name
        "starting_weights": starting,
        "training": training,
    }


def _run_record(checkpoint: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(training recipe, starting weights) from the config.json beside ``checkpoint``, a training run's
    or a Hub folder's (its records carried over); (None, None) when there is none."""
    try:
        record = json.loads((checkpoint.parent / HUB_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(record, dict):
        return None, None
    if "ignite_r3net" in record:  # re-exporting a Hub folder
        return record.get("training"), record.get("starting_weights")
    if "iters" not in record or "backbone" not in record:  # not a training run's
        return None, None
    weights = record.get("weights")
    if not isinstance(weights, dict):
        return record, None
    # the file's name, not this machine's path to it
    return record, {**weights, "file": Path(str(weights.get("file", ""))).name}


def _check_output_folder(out: Path) -> Path:
    """A new or empty folder, or one holding an earlier hub export (replaced whole)."""
    if out.exists() and not out.is_dir():
        raise OptionError(f"--output {out} is a file; --format hub writes a folder")
    if out.is_dir() and any(out.iterdir()) and not _is_hub_export(out):
        raise OptionError(
            f"--output {out} holds files of its own; give a new or empty folder (an earlier hub export is replaced)"
        )
    check_writable_folder(out, "--output")  # atomic_folder makes the parent when it writes
    return out


def _is_hub_export(folder: Path) -> bool:
    try:
        return "ignite_r3net" in json.loads((folder / HUB_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


@torch.no_grad()
def _check_folder(folder: Path, model: torch.nn.Module, backbone: str) -> None:
    """Read ``folder`` back as every command will and compare its weights and an output with ``model``'s."""
    back = read_trained_weights(folder / HUB_WEIGHTS)
    if back.backbone != backbone:
        raise ExportError(f"the exported folder reads as backbone {back.backbone}, not {backbone}")
    reloaded = build_model(back, "cpu")
    expected = model.state_dict()
    if reloaded.state_dict().keys() != expected.keys() or not all(
        torch.equal(v, expected[k]) for k, v in reloaded.state_dict().items()
    ):
        raise ExportError("the exported model.safetensors does not hold the checkpoint's weights; nothing was written")
    image = torch.rand(_CHECK_SHAPE, generator=torch.Generator().manual_seed(1))
    if not torch.equal(reloaded(image), model(image)):
        raise ExportError("the exported folder's model gives other maps than the checkpoint's; nothing was written")
