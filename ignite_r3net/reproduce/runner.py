"""The steps of ``reproduce``: train (or take ``--checkpoint``), evaluate every test set in ``--data-root``
(original protocol with and without CRF, standard protocol), score the authors' maps, write the table.
Each step calls its command (``train``, ``evaluate``); a rerun resumes the training and reuses every
evaluation of the same checkpoint file (by sha256) on the same pairs."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..atomic_files import write_json
from ..config import TrainConfig
from ..content_key import ContentKey
from ..data.folder import listing_digest
from ..data.registry import STANDARD_BY_NAME, TEST_SETS, check_count, found_sets, standard_set
from ..errors import OptionError, warn
from ..evaluation.evaluate import evaluate_checkpoint, evaluate_maps
from ..model.backbone_weights import sha256_of
from ..model.trained_model import resolve_checkpoint
from ..options import EvaluateOptions, InferenceOptions, ProcessOptions
from ..options.commands import REPRODUCE_DEFAULTS, ReproduceOptions
from ..training.recipe_config import config_from_options
from ..training.start import train
from .table import Model, build_results, write_results

# the evaluations of one model: variant -> data set -> {"listing", "r3net": row, "standard": row}
VARIANTS = {"no-crf": False, "crf": True}


def reproduce(given: Mapping[str, Any], options: ReproduceOptions) -> dict[str, Any]:
    """Train (unless ``options.checkpoint``), evaluate and write OUTPUT_DIR/results.{md,csv,json}; return
    results.json's content. ``given``: the training options of the command line (the paper's recipe,
    MSRA10K and ``--resume auto`` where not given; ``data_root`` is required). Raises OptionError for a
    wrong option, no test set in ``--data-root`` or a refused resume."""
    options.validate()
    given = {**REPRODUCE_DEFAULTS, **given}
    data_root = given.get("data_root")
    if data_root is None:
        raise OptionError("reproduce needs --data-root DIR: the folder holding MSRA10K and the test sets")
    out = Path(given["output_dir"])
    configs = [] if options.checkpoint else _training_configs(given, options.seeds)
    test_sets = _test_sets(data_root)
    models = [Model("checkpoint", options.checkpoint)] if options.checkpoint else []
    for config in configs:
        train(config)
        models.append(Model(f"seed {config.seed}", str(_final_checkpoint(config))))
    processes = ProcessOptions(nproc=given.get("nproc", 1), backend=given.get("backend"))
    # the backbone of --checkpoint from its config.json or weights, unless --backbone is given
    inference = InferenceOptions(backbone=given.get("backbone"), workers=given.get("workers", 2))
    progress = given.get("progress", True)
    evaluations = out / "evaluations"
    variants = _variants()
    for model in models:
        model.scores = evaluate_model(
            model.checkpoint, test_sets, evaluations, processes, inference, variants, progress
        )
    author = score_author_maps(options.author_maps, test_sets, evaluations, progress) if options.author_maps else None
    missing = [name for name in TEST_SETS if name not in test_sets]
    results = build_results(models, test_sets, missing, author, options, data_root)
    write_results(results, out)
    return results


def _training_configs(given: Mapping[str, Any], seeds: list[int] | None) -> list[TrainConfig]:
    """One config per seed, each training into OUTPUT_DIR/seed-N; all checked before any trains."""
    out = Path(given["output_dir"])
    chosen = seeds if seeds is not None else [given.get("seed", 2018)]
    configs = [config_from_options({**given, "seed": s, "output_dir": str(out / f"seed-{s}")}) for s in chosen]
    for config in configs:
        config.validate()
    return configs


def _final_checkpoint(config: TrainConfig) -> Path:
    path = Path(config.output_dir) / f"checkpoint_{config.iters}.pt"
    if not path.is_file():
        raise OptionError(f"the training in {config.output_dir} ended without its final checkpoint {path.name}")
    return path


def _test_sets(data_root: str) -> dict[str, Path]:
    """The standard test sets in ``data_root`` (their counts checked); warns naming the missing ones."""
    found = found_sets(data_root)
    if not found:
        raise OptionError(f"--data-root {data_root} holds none of the test sets {', '.join(TEST_SETS)}")
    for name, folder in found.items():
        check_count(folder, STANDARD_BY_NAME[name])
    missing = [name for name in TEST_SETS if name not in found]
    if missing:
        warn(f"--data-root {data_root}: not found, left out of the table: {', '.join(missing)}")
    return found


def _variants() -> dict[str, bool]:
    """The CRF variants that can run here: without the crf extra, only the one without CRF."""
    if importlib.util.find_spec("pydensecrf") is None:
        warn("the crf extra is not installed (pip install -e '.[crf]'): the CRF columns stay empty")
        return {"no-crf": False}
    return dict(VARIANTS)


def evaluate_model(
    checkpoint: str,
    test_sets: Mapping[str, Path],
    root: Path,
    processes: ProcessOptions,
    inference: InferenceOptions,
    variants: Mapping[str, bool] = VARIANTS,
    progress: bool = True,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``checkpoint`` scored on every test set per CRF variant: the original protocol (``evaluate
    --checkpoint --protocol r3net [--crf] --save-maps``), then the standard one on the same maps
    (``evaluate --maps``). Kept in ROOT/<sha256>/<variant>.json: a set is not scored again on the same pairs."""
    folder = root / sha256_of(resolve_checkpoint(checkpoint))[:16]
    listings = {name: listing_digest(path) for name, path in test_sets.items()}
    scores = {}
    for variant, crf in variants.items():
        cache = folder / f"{variant}.json"
        done = _read_json(cache)
        todo = [name for name in test_sets if done.get(name, {}).get("listing") != listings[name]]
        if todo:
            maps = folder / f"maps-{variant}"
            scored = folder / f"{variant}.r3net.json"
            evaluate_checkpoint(
                EvaluateOptions(
                    checkpoint=checkpoint,
                    data=[str(test_sets[name]) for name in todo],
                    names=todo,
                    protocol="r3net",
                    json_path=str(scored),
                    save_maps=str(maps),
                    inference=dataclasses.replace(inference, crf=crf),
                    processes=processes,
                    progress=progress,
                )
            )
            rows = json.loads(scored.read_text(encoding="utf-8"))
            for name in todo:
                standard = _score_maps(maps / name, test_sets[name], "standard", progress)
                done[name] = {"listing": listings[name], "r3net": rows[name], "standard": standard}
                write_json(done, cache)  # after each set: an interrupted rerun keeps what is done
        scores[variant] = {name: done[name] for name in test_sets}
    return scores


def score_author_maps(
    maps_root: str, test_sets: Mapping[str, Path], root: Path, progress: bool = True
) -> dict[str, dict[str, Any]]:
    """The authors' maps (a subfolder per set, named as the set or an alias) scored by our code with both
    protocols; kept in ROOT/author-maps.json, keyed by every map file (path, size, mtime) and the set's pairs."""
    folder = Path(maps_root)
    if not folder.is_dir():
        raise OptionError(f"--author-maps {maps_root} is not a folder")
    subfolders: dict[str, Path] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        dataset = standard_set(sub.name)
        if dataset is not None and dataset.name in test_sets:
            subfolders.setdefault(dataset.name, sub)
    if not subfolders:
        raise OptionError(f"--author-maps {maps_root}: no subfolder named after a test set ({', '.join(test_sets)})")
    cache = root / "author-maps.json"
    done = _read_json(cache)
    for name, sub in subfolders.items():
        files = sorted(p.resolve() for p in sub.iterdir() if p.is_file())
        key = ContentKey("author maps", 1).add_values(listing_digest(test_sets[name])).add_files(files).hexdigest()
        if done.get(name, {}).get("key") != key:
            r3net, standard = (_score_maps(sub, test_sets[name], p, progress) for p in ("r3net", "standard"))
            done[name] = {"key": key, "r3net": r3net, "standard": standard}
            write_json(done, cache)
    return {name: done[name] for name in subfolders}


def _score_maps(maps: Path, dataset: Path, protocol: str, progress: bool) -> dict[str, float]:
    return evaluate_maps(EvaluateOptions(maps=str(maps), gt=str(dataset), protocol=protocol, progress=progress))


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        warn(f"{path} cannot be read: evaluating again")
        return {}
