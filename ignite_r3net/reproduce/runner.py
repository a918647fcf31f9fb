"""``reproduce``: train, evaluate every test set in ``--data-root`` (a rerun resumes the training and reuses every
evaluation of the same checkpoint on the same pairs), score the authors' maps and write the results table."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic_files import read_json_object, write_json, write_text
from ..config import TrainConfig
from ..content_key import ContentKey
from ..data.folder import listing_digest
from ..data.registry import STANDARD_BY_NAME, TEST_SETS, check_count, found_sets, standard_set
from ..distributed.process_setup import use_device
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, install_extra, warn
from ..evaluation.comparison_table import reference, reference_for
from ..evaluation.evaluate import evaluate_checkpoint, evaluate_maps
from ..metrics.keys import REFERENCE_NAMES
from ..model.backbone_weights import sha256_of
from ..model.trained_model import resolve_checkpoint
from ..options import EvaluateOptions, InferenceOptions, ProcessOptions, ProfileOptions
from ..options.reproduce import REPRODUCE_DEFAULTS, ReproduceOptions
from ..profiling.report import markdown_table, measured_with
from ..training.recipe_config import config_from_options
from ..training.start import train

# the evaluations of one model: variant -> data set -> {"listing", "r3net": row, "standard": row}
VARIANTS = {"no-crf": False, "crf": True}
METRICS = ("maxF", "mae")
COLUMNS = {"no-crf": "ours", "crf": "ours + CRF"}
COST_SIZE = (400, 300)  # the cost beside the table: one image of this height and width, a typical test image
COST_RUNS = (2, 5)  # its untimed and timed runs


@dataclass
class Model:
    """A model of the reproduction: label (``seed 2018``, ``checkpoint``), checkpoint, ``evaluate_model``'s scores."""

    label: str
    checkpoint: str
    scores: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


def reproduce(given: Mapping[str, Any], options: ReproduceOptions) -> dict[str, Any]:
    """Train (unless ``options.checkpoint``), evaluate, write OUTPUT_DIR/results.{md,csv,json} and return its JSON;
    OptionError for a wrong option, no ``--data-root`` or test set in it, or a refused resume."""
    options.validate()
    given = {**REPRODUCE_DEFAULTS, **given}
    data_root = given.get("data_root")
    if data_root is None:
        raise OptionError("reproduce needs --data-root DIR: the folder holding MSRA10K and the test sets")
    out = Path(given["output_dir"])
    configs = [] if options.checkpoint else _training_configs(given, options.seeds)
    test_sets = found_sets(data_root)  # the standard test sets, their counts checked
    if not test_sets:
        raise OptionError(f"--data-root {data_root} holds none of the test sets {', '.join(TEST_SETS)}")
    for name, folder in test_sets.items():
        check_count(folder, STANDARD_BY_NAME[name])
    missing = [name for name in TEST_SETS if name not in test_sets]
    if missing:
        warn(f"--data-root {data_root}: not found, left out of the table: {', '.join(missing)}")
    models = [Model("checkpoint", options.checkpoint)] if options.checkpoint else []
    for config in configs:
        train(config)
        path = Path(config.output_dir) / f"checkpoint_{config.iters}.pt"
        if not path.is_file():
            raise OptionError(f"the training in {config.output_dir} ended without its final checkpoint {path.name}")
        models.append(Model(f"seed {config.seed}", str(path)))
    processes = ProcessOptions(nproc=given.get("nproc", 1), backend=given.get("backend"))
    # the backbone of --checkpoint from its config.json or weights, unless --backbone is given
    inference = InferenceOptions(backbone=given.get("backbone"), workers=given.get("workers", 2))
    progress = given.get("progress", True)
    evaluations = out / "evaluations"
    variants = dict(VARIANTS)
    if importlib.util.find_spec("pydensecrf") is None:
        warn(f"the crf extra is not installed ({install_extra('crf')}): the CRF columns stay empty")
        variants = {"no-crf": False}
    for model in models:
        model.scores = evaluate_model(
            model.checkpoint, test_sets, evaluations, processes, inference, variants, progress
        )
    author = score_author_maps(options.author_maps, test_sets, evaluations, progress) if options.author_maps else None
    cost = model_cost(models[0].checkpoint, given.get("device", "auto"), evaluations) if models else None
    results = build_results(models, test_sets, missing, author, options, data_root, cost)
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


def evaluate_model(
    checkpoint: str,
    test_sets: Mapping[str, Path],
    root: Path,
    processes: ProcessOptions,
    inference: InferenceOptions,
    variants: Mapping[str, bool] = VARIANTS,
    progress: bool = True,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``checkpoint`` scored on every test set per CRF variant by ``evaluate --protocol r3net [--crf] --save-maps``,
    then ``evaluate --maps`` (standard), kept in ROOT/<sha256>/<variant>.json while the pairs are the same."""
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


def model_cost(checkpoint: str, device: str, root: Path) -> dict[str, Any]:
    """The model's cost measured by ``profile`` (one 400x300 image on ``device``, the one training used), kept
    in ROOT/<sha256>/cost-<device>.json: ``{"header": ..., "rows": [row]}``."""
    from ..profiling.command import profile

    where = use_device(LaunchSpec(device=device))
    path = root / sha256_of(resolve_checkpoint(checkpoint))[:16] / f"cost-{where}.json"
    done = _read_json(path)
    if not isinstance(done.get("rows"), list) or not done["rows"]:
        height, width = COST_SIZE
        profile(
            ProfileOptions(
                checkpoint=checkpoint, sizes=[height, width], batch_sizes=[1], device=where, json_path=str(path),
                warmup=COST_RUNS[0], repeats=COST_RUNS[1],
            )
        )  # fmt: skip
        done = _read_json(path)
    return done


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
    done = read_json_object(path) if path.is_file() else {}
    if done is None:
        warn(f"{path} cannot be read: evaluating again")
    return done or {}


# metric -> {"mean", and with several models their spread: "std" (sample standard deviation), "min", "max"}
Summary = dict[str, dict[str, float]]


def _summary(values: Sequence[float]) -> dict[str, float]:
    out = {"mean": statistics.fmean(values)}
    if len(values) > 1:
        out.update(std=statistics.stdev(values), min=min(values), max=max(values))
    return out


def _ours(models: Sequence[Model], variant: str, dataset: str, protocol: str) -> Summary | None:
    rows = [m.scores[variant][dataset][protocol] for m in models if variant in m.scores]
    return {metric: _summary([float(row[metric]) for row in rows]) for metric in METRICS} if rows else None


def _comparison(ours: Summary | None, ref: Mapping[str, float], tolerance: Mapping[str, float]) -> dict:
    if ours is None or not all(metric in ref for metric in METRICS):
        return {}
    delta = {metric: ours[metric]["mean"] - ref[metric] for metric in METRICS}
    # a rounding margin: the references are given to 3 decimals
    within = all(abs(delta[m]) <= tolerance[m] + 1e-9 for m in METRICS)
    return {"delta": delta, "within_tolerance": within}


def build_results(
    models: Sequence[Model],
    test_sets: Mapping[str, Path],
    missing: Sequence[str],
    author: Mapping[str, Mapping[str, Any]] | None,
    options: ReproduceOptions,
    data_root: str,
    cost: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything results.json holds: models, references, tolerances, an entry per found and the missing sets,
    and the first model's cost (``profile``'s header and row)."""
    tolerance = {"maxF": options.tolerance_maxf, "mae": options.tolerance_mae}
    sets: dict[str, Any] = {}
    for name, folder in test_sets.items():
        ref = reference_for(name)
        ref_values = ref.sets[name] if ref else {}
        entry: dict[str, Any] = {
            "folder": str(folder),
            "pairs": models[0].scores["no-crf"][name]["r3net"]["images"] if models else None,
            "published_pairs": STANDARD_BY_NAME[name].pairs,
            "reference": {"name": ref.name, **{m: ref_values[m] for m in METRICS if m in ref_values}} if ref else None,
        }
        for variant in COLUMNS:
            ours = _ours(models, variant, name, "r3net")
            standard = _ours(models, variant, name, "standard")
            entry[variant] = {"r3net": ours, "standard": standard, **_comparison(ours, ref_values, tolerance)}
        if author is not None and name in author:
            entry["author_maps"] = {p: {m: author[name][p][m] for m in METRICS} for p in ("r3net", "standard")}
        sets[name] = entry
    return {
        "data_root": data_root,
        "models": [{"label": m.label, "checkpoint": m.checkpoint} for m in models],
        "protocol": "maxF and MAE by the original R3Net code's definitions (--protocol r3net); 'standard': "
        "PySODMetrics on the same maps",
        "tolerance": tolerance,
        "references": {
            name: {"label": r.label, "source": r.source, "kind": r.kind, "note": r.note}
            for name, r in ((n, reference(n)) for n in REFERENCE_NAMES)
        },
        "sets": sets,
        "missing": list(missing),
        "cost": dict(cost) if cost else None,
    }


def _value(summary: Summary | None, metric: str) -> str:
    if not summary:
        return "-"
    cell = f"{summary[metric]['mean']:.3f}"
    return f"{cell} ± {summary[metric]['std']:.3f}" if "std" in summary[metric] else cell


def _comparison_cells(entry: Mapping[str, Any]) -> list[str]:
    # Δ maxF, Δ MAE and within, which _comparison gives together or not at all
    if "delta" not in entry:
        return ["-", "-", "-"]
    return [*(f"{entry['delta'][m]:+.3f}" for m in METRICS), "yes" if entry["within_tolerance"] else "no"]


def table_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table (one per found test set)."""
    header = ["data set", "pairs", "reference", "ref maxF", "ref MAE"]
    for title in COLUMNS.values():
        header += [f"{title} maxF", f"{title} MAE", "Δ maxF", "Δ MAE", "within"]
    header += ["standard maxF", "standard MAE"]
    with_author = any("author_maps" in e for e in results["sets"].values())
    if with_author:
        header += ["author maps maxF", "author maps MAE"]
    rows = []
    for name, entry in results["sets"].items():
        ref = entry["reference"] or {}
        marked = {"r3net-paper": "paper", "r3net-released-maps": "released maps ‡"}.get(ref.get("name", ""), "-")
        row = [name, str(entry["pairs"]), marked, *(f"{ref[m]:.3f}" if m in ref else "-" for m in METRICS)]
        for variant in COLUMNS:
            row += [*(_value(entry[variant]["r3net"], m) for m in METRICS), *_comparison_cells(entry[variant])]
        row += [_value(entry["no-crf"]["standard"], m) for m in METRICS]
        if with_author:
            author = entry.get("author_maps")
            row += [f"{author['r3net'][m]:.3f}" if author else "-" for m in METRICS]
        rows.append(row)
    return header, rows


def to_markdown(results: Mapping[str, Any]) -> str:
    """results.md: the table and what its columns mean."""
    header, rows = table_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    tolerance = results["tolerance"]
    models = results["models"]
    notes = [
        "",
        f"maxF and MAE by the original R3Net code's protocol (--protocol r3net), full resolution; standard: "
        f"PySODMetrics on the maps without CRF. Δ = ours - reference; within: |Δ maxF| <= {tolerance['maxF']} "
        f"and |Δ MAE| <= {tolerance['mae']}.",
        "Models: "
        + "; ".join(f"{m['label']}: {m['checkpoint']}" for m in models)
        + (f" (mean ± sample standard deviation of {len(models)} models)" if len(models) > 1 else ""),
    ]
    for name, ref in results["references"].items():
        mark = " ‡" if name == "r3net-released-maps" else ""
        notes.append(
            f"Reference {ref['label']}{mark}: {ref['source']}." + (f" Note: {ref['note']}." if ref["note"] else "")
        )
    if results["missing"]:
        notes.append(f"Missing (not found in {results['data_root']}): {', '.join(results['missing'])}.")
    cost = results.get("cost")
    if cost:
        height, width = COST_SIZE
        notes += [
            "",
            f"Cost of {models[0]['label']}: one {height}x{width} image. {measured_with(cost['header'], cost['rows'])}",
            "",
            markdown_table(cost["rows"]),
        ]
    return "\n".join(lines + notes) + "\n"


def to_csv(results: Mapping[str, Any]) -> str:
    header, rows = table_rows(results)
    missing = [[name, "missing"] for name in results["missing"]]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([header, *rows, *missing])
    return buffer.getvalue()


def write_results(results: Mapping[str, Any], out: Path) -> None:
    """Print the table and write OUT/results.md, results.csv and results.json."""
    markdown = to_markdown(results)
    print(markdown, flush=True)
    write_text(markdown, out / "results.md")
    write_text(to_csv(results), out / "results.csv")
    write_json(results, out / "results.json")
