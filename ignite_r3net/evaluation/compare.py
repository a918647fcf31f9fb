"""``compare``: the tables, curves and figures of many methods on many data sets, as papers print them.
Everything is checked before any work; a checkpoint method's maps are made into ``OUT/maps/<method>``
unless kept; the (method, data set) cells the cache lacks are scored (``scoring``) on ``--nproc`` processes.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..atomic_files import check_writable_folder, write_json, write_text
from ..data.checks import assert_dataset_ok
from ..data.folder import list_pairs
from ..data.registry import resolve_names
from ..distributed.topology import rank_set_by_launcher
from ..errors import CheckpointError, OptionError, listing, note, warn
from ..inference.crf import require_crf
from ..metrics.keys import protocol_fields
from ..model.backbone_weights import is_hub_source, sha256_of
from ..model.trained_model import read_trained_weights, resolve_checkpoint
from ..options import CompareOptions, EvaluateOptions, InferenceOptions
from . import scoring
from .comparison_table import build_table, comparison_csv, published_rows, table_csv, table_latex, table_markdown
from .evaluate import evaluate_checkpoint
from .figures import check_stems, draw_figures, figure_data, plot_fm, plot_pr
from .maps import MAP_EXTS, DatasetFolder, locate_dataset, match_maps, parse_named

# each scored (data set, method)'s per-image scores: {stem: {metric: value}}
CellScores = Mapping[tuple[str, str], Mapping[str, Mapping[str, float]]]
_MISSING_SHOWN = 5  # map names shown in the missing-maps error
StaleMaps = list[tuple["Benchmark", str, int]]  # (data set, inference key, images) of maps to (re)make


@dataclass(frozen=True)
class Benchmark(DatasetFolder):
    """A data set of ``--datasets``, by name."""

    name: str


@dataclass(frozen=True)
class Method:
    """A folder with a subfolder of maps per data set, or a checkpoint file (``hub``: its ``hf-hub:`` source)."""

    name: str
    source: Path
    hub: str | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.source.is_file()


@dataclass(frozen=True)
class Pair:
    """One (method, data set) cell: the matched (map, mask) files and how many masks had no map."""

    method: str
    dataset: str
    files: list[tuple[Path, Path]]
    missing: int


def compare(options: CompareOptions) -> dict[str, dict[str, dict[str, float]]]:
    """Compare ``options.methods`` on ``options.datasets`` into ``options.out``; returns ``{dataset:
    {method: {metric: value, "count": n}}}``. Raises ``OptionError`` (also for missing maps without
    ``--allow-missing`` and a run under torchrun), ``DataError``, ``CheckpointError``, ``WorkerFailed``."""
    options.validate()
    if rank_set_by_launcher():
        raise OptionError("compare starts its own processes (--nproc); run it without torchrun")
    if Path(options.out).exists() and not Path(options.out).is_dir():
        raise OptionError(f"--out {options.out} exists and is not a folder")
    options = replace(options, processes=options.processes.on_device())
    datasets_given = resolve_names(options.datasets, options.data_root, "--datasets", named=True)
    benches = [_benchmark(name, folder) for name, folder in parse_named(datasets_given, "--datasets")]
    if options.show_stems:
        check_stems(options.show_stems, {b.name: b.masks for b in benches})
    entries = [_method(name, src) for name, src in parse_named(options.methods, "--methods")]
    out_dir = Path(options.out).resolve()
    pairs = {m.name: _match_method(m, benches, options.allow_missing) for m in entries if not m.is_checkpoint}
    stale = {m.name: _stale_inference(m, benches, out_dir, options.inference) for m in entries if m.is_checkpoint}
    check_writable_folder(out_dir, "--out")
    out_dir.mkdir(parents=True, exist_ok=True)  # only now: a refused run leaves no folder
    for method in (m for m in entries if m.is_checkpoint):
        maps = out_dir / "maps" / method.name
        _make_maps(method, stale[method.name], maps, options)
        pairs[method.name] = _match_method(Method(method.name, maps), benches, allow_missing=False)
    scored = [p for m in entries for p in pairs[m.name] if p.files]
    cells = [(f"{p.method} on {p.dataset}", p.files) for p in scored]
    spec = options.processes.launch_spec()
    scores = scoring.score_cells(cells, out_dir / "cache", options.protocol, spec, options.progress)
    results, curves = _collect(scored, scores, options.protocol)
    datasets, methods = [b.name for b in benches], [m.name for m in entries]
    _write_outputs(results, curves, datasets, methods, options, out_dir)
    per_image = {(p.dataset, p.method): entry["per_image"] for p, entry in zip(scored, scores)}
    _write_per_image(per_image, datasets, methods, options, out_dir)
    if options.show or options.show_stems:
        # pairs[method] follows the order of benches; checkpoint methods' maps are in out_dir/maps by now
        shown = [{m.name: pairs[m.name][i].files for m in entries} for i in range(len(benches))]
        mae = [_per_image_mae(per_image, b.name, methods) for b in benches]
        figures = [figure_data(b.name, b.masks, b.data, shown[i], mae[i]) for i, b in enumerate(benches)]
        draw_figures(figures, options.show, options.show_stems, out_dir)
    return results


def _benchmark(name: str, folder: str) -> Benchmark:
    path = Path(folder)
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise OptionError(f"--datasets {name}={folder}: {folder} {what}")
    located = locate_dataset(path, f"--datasets {name}={folder}")
    return Benchmark(located.masks, located.data, name)


def _method(name: str, source: str) -> Method:
    if is_hub_source(source):  # fetched now: offline or unknown, it is one line before any work
        return Method(name, resolve_checkpoint(source, f"--methods {name}={source}").absolute(), source)
    path = Path(source).resolve()
    if not path.exists():
        raise OptionError(f"--methods {name}={source}: {source} does not exist")
    return Method(name, path)


def _dataset_folder(source: Path, dataset: str) -> Path | None:
    """``source/<dataset>``, else its one subfolder named so but for case and punctuation (``HKUIS``)."""
    exact = source / dataset
    if exact.is_dir():
        return exact
    loose = [p for p in sorted(source.iterdir()) if p.is_dir() and _name_key(p.name) == _name_key(dataset)]
    if len(loose) > 1:
        raise OptionError(f"{source}: {', '.join(p.name for p in loose)} could each be the maps of {dataset}")
    return loose[0] if loose else None


def _name_key(name: str) -> str:  # a folder name as compared with a data set name
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _match_method(method: Method, benches: list[Benchmark], allow_missing: bool) -> list[Pair]:
    """The method's maps matched to each data set's masks; warns of a data set it lacks."""
    folders = [_dataset_folder(method.source, bench.name) for bench in benches]
    if not any(folders):
        subfolders = sorted(p.name for p in method.source.iterdir() if p.is_dir())
        loose = any(p.suffix.lower() in MAP_EXTS for p in method.source.iterdir() if p.is_file())
        hint = "; it holds maps directly: give the folder above, with one subfolder per data set" if loose else ""
        raise OptionError(
            f"--methods {method.name}: {method.source} holds maps of none of the data sets "
            f"({', '.join(b.name for b in benches)}); its subfolders: {listing(subfolders, 10) or 'none'}{hint}"
        )
    pairs = []
    for bench, folder in zip(benches, folders):
        if folder is None:
            warn(
                f"method {method.name} has no maps of {bench.name} (no folder {method.source / bench.name}): cells '-'"
            )
            pairs.append(Pair(method.name, bench.name, [], 0))
            continue
        if folder.name != bench.name:
            note(f"method {method.name}: maps of {bench.name} read from {folder}")
        pairs.append(_match_folder(method.name, bench, folder, allow_missing))
    return pairs


def _match_folder(method: str, bench: Benchmark, folder: Path, allow_missing: bool) -> Pair:
    match = match_maps(folder, bench.masks)
    total = len(match.pairs) + len(match.masks_without_map)
    if match.masks_without_map and not allow_missing:
        names = listing((p.stem for p in match.masks_without_map), _MISSING_SHOWN)
        raise OptionError(
            f"method {method} lacks {len(match.masks_without_map)} of {total} maps of {bench.name} "
            f"in {folder}: {names}; --allow-missing scores the others (the cell is marked)"
        )
    if match.masks_without_map:
        outcome = "cell marked" if match.pairs else "cells '-'"
        warn(f"method {method} lacks {len(match.masks_without_map)} of {total} maps of {bench.name}: {outcome}")
    if match.maps_without_mask:
        warn(
            f"method {method}, {bench.name}: {len(match.maps_without_mask)} map(s) without a mask in "
            f"{bench.masks}, ignored: {listing((p.name for p in match.maps_without_mask), _MISSING_SHOWN)}"
        )
    return Pair(method, bench.name, [(m, k) for _, m, k in match.pairs], len(match.masks_without_map))


def _stale_inference(method: Method, benches: list[Benchmark], out: Path, options: InferenceOptions) -> StaleMaps:
    """The data sets whose maps must be (re)made, checked (images, data set, checkpoint) before any work."""
    stale = []
    settings: dict[str, Any] = {"backbone": options.backbone, "crf": options.crf, "amp": options.amp}
    # the input size only when given: maps made at full resolution keep their key
    settings |= {k: v for k, v in (("size", options.size), ("max_side", options.max_side)) if v is not None}
    if options.tf32 != "on":  # the default keeps the key of maps made before --tf32 existed
        settings["tf32"] = options.tf32
    if method.hub:  # the Hub file's path names its commit; its sha256 is recorded with the maps too
        settings["checkpoint"] = {"source": method.hub, "sha256": sha256_of(method.source)}
    for bench in benches:
        if bench.data is None:
            raise OptionError(
                f"--methods {method.name} is a checkpoint and needs the images of {bench.name}, but "
                f"{bench.masks} has no images beside it: give {bench.name}=DIR as the data set folder "
                "(images/ + masks/, Imgs/ + GT/, ..., or name.jpg beside name.png)"
            )
        files = list_pairs(bench.data)
        key = scoring.inference_key(method.source, files, settings)
        if scoring.recorded_key(out / "maps" / method.name / bench.name / scoring.MANIFEST) != key:
            # every problem of the images, by file name (headers only)
            assert_dataset_ok(bench.data, option=f"--datasets {bench.name}")
            stale.append((bench, key, len(files)))
    if stale:
        if options.crf:
            require_crf()
        try:  # a one-line error now, not after hours
            read_trained_weights(method.source, options.backbone)
        except (CheckpointError, OptionError) as e:
            raise type(e)(f"--methods {method.name}: {e}") from None
    return stale


def _make_maps(method: Method, stale: StaleMaps, root: Path, options: CompareOptions) -> None:
    """``method``'s maps of its stale data sets into ``root/<dataset>``, then each folder's manifest,
    written last: an interrupted run is redone."""
    if not stale:
        print(f"maps of {method.name}: kept from {root} (same checkpoint, images and options)", flush=True)
        return
    for bench, _, _ in stale:
        shutil.rmtree(root / bench.name, ignore_errors=True)  # maps of another checkpoint or image set
    print(f"maps of {method.name}: inference on {', '.join(b.name for b, _, _ in stale)}", flush=True)
    evaluate_checkpoint(
        EvaluateOptions(
            checkpoint=str(method.source),
            data=[str(b.data) for b, _, _ in stale],
            names=[b.name for b, _, _ in stale],
            save_maps=str(root),
            quiet=True,
            inference=options.inference,
            processes=options.processes,
            progress=options.progress,
        )
    )
    for bench, key, images in stale:
        scoring.write_manifest(root / bench.name, key, method.source, images)


def _collect(pairs: list[Pair], scores: list[dict[str, Any]], protocol: str) -> tuple[dict, dict]:
    """``{dataset: {method: {metric: value, "count": n[, "missing": k]}}}`` and the curves; warns of resized maps."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    curves: dict[str, dict[str, dict[str, list[float]]]] = {}
    for pair, entry in zip(pairs, scores):
        if entry["resized"]:
            warn(f"method {pair.method}, {pair.dataset}: {entry['resized']} map(s) resized (bilinear) to their mask")
        row = {**entry["metrics"], "count": entry["count"], **protocol_fields(protocol)}
        if pair.missing:
            row["missing"] = pair.missing
        results.setdefault(pair.dataset, {})[pair.method] = row
        curves.setdefault(pair.dataset, {})[pair.method] = entry["curves"]
    return results, curves


def _write_outputs(
    results: dict, curves: dict, datasets: list[str], methods: list[str], options: CompareOptions, out: Path
) -> None:
    """results.json, the three tables, and the PR and F-measure curves of each data set."""
    results = _in_order(results, datasets, methods)
    write_json(results, out / "results.json")
    published, notes = published_rows(options.reference or [], datasets)
    table = build_table(results, datasets, methods, options.metrics, options.digits, options.protocol, published)
    table.notes.extend(notes)
    markdown = table_markdown(table)
    write_text(markdown, out / "table.md")
    write_text(table_csv(table), out / "table.csv")
    write_text(table_latex(table), out / "table.tex")
    for dataset in datasets:
        lines = [(m, i, curves[dataset][m]) for i, m in enumerate(methods) if m in curves.get(dataset, {})]
        if lines:
            plot_pr(lines, dataset, out / "curves" / f"pr_{dataset}")
            plot_fm(lines, dataset, out / "curves" / f"fm_{dataset}")
    write_json(_in_order(curves, datasets, methods), out / "curves" / "curves.json")
    print(markdown, flush=True)
    print(f"wrote results.json, table.md, table.csv, table.tex, curves/ and per_image/ to {out}", flush=True)


def _in_order(by_dataset: dict, datasets: list[str], methods: list[str]) -> dict:
    return {d: {m: by_dataset[d][m] for m in methods if m in by_dataset.get(d, {})} for d in datasets}


def _write_per_image(
    cells: CellScores, datasets: list[str], methods: list[str], options: CompareOptions, out: Path
) -> None:
    """``per_image/<dataset>.csv``: a row per image, a column per method and ``--metrics``."""
    for dataset in datasets:
        present = {m: list(cells[dataset, m].items()) for m in methods if (dataset, m) in cells}
        if present:
            write_text(comparison_csv(present, options.metrics, options.protocol), out / "per_image" / f"{dataset}.csv")


def _per_image_mae(cells: CellScores, dataset: str, methods: list[str]) -> dict[str, dict[str, float]]:
    return {m: {stem: row["mae"] for stem, row in cells[dataset, m].items()} for m in methods if (dataset, m) in cells}
