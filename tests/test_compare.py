"""``compare``: numbers vs PySODMetrics, tables vs results.json, curves drawn, the cache, --nproc 2,
missing maps, checkpoint methods, and bad inputs as one line before any work."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import blob_mask, free_port, pysod_curves, pysod_reference
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.evaluation.figures import method_style
from ignite_r3net.metrics.keys import METRIC_KEYS
from ignite_r3net.model.r3net import R3Net

DATASETS = {"SetA": [(40, 52), (36, 44), (48, 40), (44, 56), (38, 38)], "SetB": [(42, 50), (50, 34), (40, 46)]}
NOISE = {"M1": 45.0, "M2": 80.0, "M3": 60.0}  # M3 has maps of SetA only
DEFAULT_COLUMNS = ("mae", "maxF", "Sm", "maxE", "wF")


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` runs in this process: hide any GPU of the host, as the subprocess tests do."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# one torch thread per process, as the suite's child processes have (conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Masks of two data sets (``<name>/GT``) and maps of three methods (``methods/<M>/<name>``)."""
    root = tmp_path_factory.mktemp("compare")
    rng = np.random.default_rng(11)
    for dataset, sizes in DATASETS.items():
        (root / dataset / "GT").mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            gt = blob_mask(rng, h, w)
            Image.fromarray(gt).save(root / dataset / "GT" / f"{dataset.lower()}_{i}.png")
            for method, noise in NOISE.items():
                if method == "M3" and dataset == "SetB":
                    continue
                folder = root / "methods" / method / dataset
                folder.mkdir(parents=True, exist_ok=True)
                sal = np.clip(gt * 0.6 + rng.normal(50, noise, (h, w)), 0, 255).astype(np.uint8)
                Image.fromarray(sal).save(folder / f"{dataset.lower()}_{i}.png")
    return root


def _args(bench: Path, out: Path, methods: tuple[str, ...] = ("M1", "M2", "M3"), *extra: str) -> list[str]:
    return [
        "compare",
        "--datasets",
        *(f"{d}={bench / d / 'GT'}" for d in DATASETS),
        "--methods",
        *(f"{m}={bench / 'methods' / m}" for m in methods),
        "--out",
        str(out),
        "--show",
        "0",  # the visual comparison has tests of its own (test_visual_comparison.py)
        *extra,
    ]


def _scored(stdout: str) -> list[str]:
    """The (method, data set) pairs a run computed, from its ``scored M on D`` lines."""
    return re.findall(r"^scored (\S+ on \S+):", stdout, re.M)


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", re.sub(r"<u>|</u>|\\textbf|\\underline|\$\^\*\$", "", cell)))


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_results_tables_and_curves(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert cli.main(_args(bench, out)) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "M3" in warnings[0] and "SetB" in warnings[0]
    assert sorted(_scored(captured.out)) == ["M1 on SetA", "M1 on SetB", "M2 on SetA", "M2 on SetB", "M3 on SetA"]

    results = json.loads((out / "results.json").read_text())
    curves = json.loads((out / "curves" / "curves.json").read_text())
    assert list(results) == ["SetA", "SetB"]  # command-line order
    assert list(results["SetA"]) == ["M1", "M2", "M3"] and list(results["SetB"]) == ["M1", "M2"]
    for dataset, methods in results.items():
        for method, row in methods.items():
            assert set(row) == {*METRIC_KEYS, "count"} and row["count"] == len(DATASETS[dataset])
            pairs = [
                (np.asarray(Image.open(p)), np.asarray(Image.open(bench / dataset / "GT" / p.name)))
                for p in sorted((bench / "methods" / method / dataset).iterdir())
            ]
            expected = pysod_reference(pairs)
            for key in METRIC_KEYS:
                assert row[key] == pytest.approx(expected[key], abs=1e-9), (dataset, method, key)
            for name, curve in pysod_curves(pairs).items():  # the plotted curves too
                np.testing.assert_allclose(curves[dataset][method][name], curve, rtol=0, atol=1e-9)

    _check_markdown(out / "table.md", results)
    _check_csv(out / "table.csv", results)
    _check_latex(out / "table.tex", results)
    _check_curves(out / "curves", results)
    _check_per_image(out / "per_image", results, bench)


def _check_per_image(folder: Path, results: dict, bench: Path) -> None:
    """A row per image, a column per method and table metric; each cell the image alone."""
    assert sorted(p.name for p in folder.iterdir()) == ["SetA.csv", "SetB.csv"]
    for dataset, methods in results.items():
        with (folder / f"{dataset}.csv").open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == ["image", *(f"{m}/{k}" for m in methods for k in DEFAULT_COLUMNS)]
        assert [r["image"] for r in rows] == [f"{dataset.lower()}_{i}" for i in range(len(DATASETS[dataset]))]
        for method in methods:  # the set's MAE, S and weighted F are the means of the images' own
            for key in ("mae", "Sm", "wF"):
                column = [float(r[f"{method}/{key}"]) for r in rows]
                assert np.mean(column) == pytest.approx(results[dataset][method][key], abs=1e-12)
    row = rows[0]
    alone = pysod_reference(
        [
            (
                np.asarray(Image.open(bench / "methods" / "M2" / "SetB" / f"{row['image']}.png")),
                np.asarray(Image.open(bench / "SetB" / "GT" / f"{row['image']}.png")),
            )
        ]
    )
    assert float(row["M2/maxF"]) == pytest.approx(alone["maxF"], abs=1e-6)


def _check_markdown(path: Path, results: dict) -> None:
    text = path.read_text().splitlines()
    header = text[0].strip("| ").split(" | ")
    lines = [line for line in text[2:] if line.startswith("|")]
    assert header[:3] == ["Method", "SetA mae↓", "SetA maxF↑"] and len(header) == 1 + 2 * len(DEFAULT_COLUMNS)
    rows = {line.strip("| ").split(" | ")[0]: line.strip("| ").split(" | ")[1:] for line in lines}
    assert list(rows) == ["M1", "M2", "M3"]
    assert rows["M3"][len(DEFAULT_COLUMNS) :] == ["-"] * len(DEFAULT_COLUMNS)
    for j, (dataset, metric) in enumerate((d, m) for d in DATASETS for m in DEFAULT_COLUMNS):
        present = {m: rows[m][j] for m in rows if rows[m][j] != "-"}
        for method, cell in present.items():
            assert _number(cell) == pytest.approx(round(results[dataset][method][metric], 3), abs=1e-9)
        # best bold, second-best underlined, as papers print them (lower MAE is better)
        order = sorted(present, key=lambda m: results[dataset][m][metric], reverse=metric != "mae")
        assert present[order[0]].startswith("**") and present[order[1]].startswith("<u>")
        assert not any(present[m].startswith(("**", "<u>")) for m in order[2:])


def _check_csv(path: Path, results: dict) -> None:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["method", *(f"{d}/{m}" for d in DATASETS for m in DEFAULT_COLUMNS)]
    for row in rows[1:]:
        for column, cell in zip(rows[0][1:], row[1:]):
            dataset, metric = column.split("/")
            if row[0] == "M3" and dataset == "SetB":
                assert cell == ""
            else:
                assert float(cell) == pytest.approx(round(results[dataset][row[0]][metric], 3), abs=1e-9)


def _check_latex(path: Path, results: dict) -> None:
    text = path.read_text()
    assert r"\begin{tabular}" in text and r"\multicolumn{5}{c}{SetA}" in text and r"\bottomrule" in text
    body = {line.split(" & ")[0]: line.rstrip(" \\").split(" & ")[1:] for line in text.splitlines() if line[:2] == "M1"}
    body |= {
        line.split(" & ")[0]: line.rstrip(" \\").split(" & ")[1:] for line in text.splitlines() if line[:2] == "M2"
    }
    for method, cells in body.items():
        for (dataset, metric), cell in zip(((d, m) for d in DATASETS for m in DEFAULT_COLUMNS), cells):
            assert _number(cell) == pytest.approx(round(results[dataset][method][metric], 3), abs=1e-9)
    assert text.count(r"\textbf{") == 2 * len(DEFAULT_COLUMNS)  # one best per column (no ties here)


def _colour_pixels(png: Path, colour: str) -> tuple[int, int]:
    """Pixels of ``png`` within a small distance of ``colour``, and how wide a span they cover."""
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    near = np.abs(rgb - target).max(-1) <= 40
    columns = np.flatnonzero(near.any(0))
    return int(near.sum()), int(columns.max() - columns.min()) if columns.size else 0


def _check_curves(folder: Path, results: dict) -> None:
    methods = ["M1", "M2", "M3"]
    for dataset in DATASETS:
        for kind in ("pr", "fm"):
            png = folder / f"{kind}_{dataset}.png"
            assert (folder / f"{kind}_{dataset}.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
            width = Image.open(png).size[0]
            for i, method in enumerate(methods):
                count, span = _colour_pixels(png, method_style(i)["color"])
                if method in results[dataset]:  # a line across the plot, not just the legend's sample
                    assert count > 150 and span > width // 3, (png.name, method, count, span)
                else:
                    assert count == 0, (png.name, method)
    curves = json.loads((folder / "curves.json").read_text())
    assert set(curves["SetA"]["M1"]) == {"precision", "recall", "fmeasure"}
    assert max(curves["SetA"]["M1"]["fmeasure"]) == pytest.approx(results["SetA"]["M1"]["maxF"], abs=1e-12)


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_cache_computes_only_new_pairs(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert cli.main(_args(bench, out, ("M1",))) == 0
    first = capsys.readouterr().out
    assert sorted(_scored(first)) == ["M1 on SetA", "M1 on SetB"]
    m1 = json.loads((out / "results.json").read_text())

    assert cli.main(_args(bench, out, ("M1", "M2"))) == 0  # one more method: only its pairs
    second = capsys.readouterr().out
    assert sorted(_scored(second)) == ["M2 on SetA", "M2 on SetB"]
    assert "2 of 4 (method, data set) pair(s) from the cache" in second
    both = json.loads((out / "results.json").read_text())
    assert both["SetA"]["M1"] == m1["SetA"]["M1"] and list(both["SetA"]) == ["M1", "M2"]
    header = (out / "per_image" / "SetA.csv").read_text().splitlines()[0]  # cached pairs included
    assert header.startswith("image,M1/mae,") and ",M2/mae," in header

    # a map rewritten (its modification time changes): only its pair again
    touched = bench / "methods" / "M2" / "SetA" / "seta_0.png"
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    # and a cache entry left half-written by a crash: recomputed, not fatal
    entries = (out / "cache").glob("*.json")
    m1_seta = next(e for e in entries if json.loads(e.read_text())["metrics"]["mae"] == m1["SetA"]["M1"]["mae"])
    m1_seta.write_text('{"format": 1, "key": "')
    assert cli.main(_args(bench, out, ("M2", "M1"), "--protocol", "standard")) == 0
    third = capsys.readouterr().out
    assert sorted(_scored(third)) == ["M1 on SetA", "M2 on SetA"]
    again = json.loads((out / "results.json").read_text())
    assert list(again["SetA"]) == ["M2", "M1"]  # rows follow the command line
    assert again["SetA"]["M1"] == m1["SetA"]["M1"] and again["SetB"] == {
        "M2": both["SetB"]["M2"],
        "M1": both["SetB"]["M1"],
    }

    assert cli.main(_args(bench, out, ("M1",), "--protocol", "r3net")) == 0  # the protocol is in the key
    assert sorted(_scored(capsys.readouterr().out)) == ["M1 on SetA", "M1 on SetB"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_processes_equal_one(bench: Path, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli.main(_args(bench, one)) == 0
    capfd.readouterr()
    extra = ["--nproc", "2", "--backend", "gloo", "--master-port", str(free_port())]
    assert cli.main(_args(bench, two, ("M1", "M2", "M3"), *extra)) == 0
    assert sorted(_scored(capfd.readouterr().out)) == [
        "M1 on SetA",
        "M1 on SetB",
        "M2 on SetA",
        "M2 on SetB",
        "M3 on SetA",
    ]
    for name in ("results.json", "curves/curves.json", "table.md", "table.tex", "table.csv", "per_image/SetA.csv"):
        assert (one / name).read_text() == (two / name).read_text(), name  # bit for bit


def test_missing_maps(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(bench / "methods" / "M1", partial)
    (partial / "SetA" / "seta_1.png").unlink()
    (partial / "SetA" / "seta_3.png").unlink()
    args = _args(bench, tmp_path / "out", ("M2",))
    args[args.index("--out") : args.index("--out")] = [f"P={partial}"]

    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert "lacks 2 of 5 maps of SetA" in err and "seta_1, seta_3" in err and "--allow-missing" in err
    assert not (tmp_path / "out").exists()  # before any work

    assert cli.main([*args, "--allow-missing"]) == 0
    captured = capsys.readouterr()
    assert "lacks 2 of 5 maps of SetA" in captured.err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["SetA"]["P"]["count"] == 3 and results["SetA"]["P"]["missing"] == 2
    assert "missing" not in results["SetB"]["P"]
    table = (tmp_path / "out" / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| P |")).split(" | ")
    assert row[1].endswith("*") and not row[1].startswith(("**", "<u>"))  # marked, not ranked
    assert "P on SetA: 3 of 5 images" in table


def _tiny_duts(root: Path) -> Path:
    """A DUTS-layout data set (images/ + masks/) of three small pairs."""
    rng = np.random.default_rng(5)
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i, (h, w) in enumerate([(48, 56), (40, 40), (52, 44)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / "images" / f"p{i}.jpg")
        Image.fromarray(blob_mask(rng, h, w)).save(root / "masks" / f"p{i}.png")
    return root


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_checkpoint_method(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = _tiny_duts(tmp_path / "DUTS-mini")
    ckpt = tmp_path / "checkpoint_10.pt"
    torch.manual_seed(0)
    torch.save({"model": R3Net("resnet18").state_dict(), "trainer": {"iteration": 10}}, ckpt)
    reference = tmp_path / "evaluate.json"
    common = ["--backbone", "resnet18", "--workers", "0"]
    assert (
        cli.main(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--json", str(reference), *common]) == 0
    )
    capsys.readouterr()

    out = tmp_path / "out"
    # D: the masks folder of a DUTS-layout folder (the images are found beside it); R: the folder itself
    datasets = [f"D={data / 'masks'}", f"R={data}"]
    args = ["compare", "--datasets", *datasets, "--methods", f"Ours={ckpt}", "--out", str(out), *common]
    assert cli.main([*args, "--show", "2"]) == 0
    first = capsys.readouterr().out
    assert "maps of Ours: inference on D, R" in first and _scored(first) == ["Ours on D", "Ours on R"]
    assert sorted(p.name for p in (out / "maps" / "Ours" / "D").glob("*.png")) == ["p0.png", "p1.png", "p2.png"]
    results = json.loads((out / "results.json").read_text())
    expected = json.loads(reference.read_text())["DUTS-mini"]
    for name in ("D", "R"):
        got = results[name]["Ours"]
        assert got["count"] == 3 and all(got[k] == expected[k] for k in METRIC_KEYS)  # the same code, exactly

    figure = json.loads((out / "figures" / "visual_D.json").read_text())  # the checkpoint's maps, drawn
    assert figure["columns"] == ["Image", "GT", "Ours"] and len(figure["stems"]) == 2

    assert cli.main([*args, "--show", "2"]) == 0  # maps and scores kept: no inference, nothing scored
    second = capsys.readouterr().out
    assert "maps of Ours: kept" in second and _scored(second) == []
    assert "figure of D: kept" in second

    assert cli.main([*args, "--max-side", "24"]) == 0  # another inference size: the maps are made again
    third = capsys.readouterr().out
    assert "maps of Ours: inference on D, R" in third and _scored(third) == ["Ours on D", "Ours on R"]
    assert json.loads((out / "results.json").read_text())["D"]["Ours"]["mae"] != results["D"]["Ours"]["mae"]


def _bad_cases(bench: Path, tmp: Path) -> list[tuple[list[str], str]]:
    gt = f"SetA={bench / 'SetA' / 'GT'}"
    m1 = f"M1={bench / 'methods' / 'M1'}"
    out = ["--out", str(tmp / "out")]
    empty = tmp / "empty_method"
    empty.mkdir(exist_ok=True)
    (tmp / "fake.pt").write_bytes(b"not a checkpoint")
    return [
        (["--datasets", f"SetA={tmp / 'nowhere'}", "--methods", m1, *out], "does not exist"),
        (["--datasets", gt, "--methods", f"M1={tmp / 'no_method'}", *out], "does not exist"),
        (["--datasets", "SetA", "--methods", m1, *out], "expected NAME=PATH"),
        (["--datasets", gt, "--methods", "=x", *out], "expected NAME=PATH"),
        (["--datasets", gt, "--methods", "M1=", *out], "expected NAME=PATH"),
        (["--datasets", gt, "--methods", m1, m1, *out], "given twice"),
        (["--datasets", gt, "--methods", m1, *out, "--metrics", "mae", "F"], "unknown F"),
        (["--datasets", gt, "--methods", f"E={empty}", *out], "holds maps of none of the data sets"),
        (["--datasets", gt, "--methods", f"M={bench / 'methods' / 'M1' / 'SetA'}", *out], "give the folder above"),
        (["--datasets", gt, "--methods", f"C={tmp / 'fake.pt'}", *out], "needs the images of SetA"),
    ]


def test_bad_inputs_are_one_line_before_any_work(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for args, message in _bad_cases(bench, tmp_path):
        assert cli.main(["compare", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err
        assert message in err, (args, err)
        assert not (tmp_path / "out").exists()


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_r3net_protocol_columns_marked_and_metric_names_any_case(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli.main(_args(bench, out, ("M1", "M2"), "--protocol", "r3net", "--metrics", "MAXF", "sm", "Mae")) == 0
    markdown = (out / "table.md").read_text()
    header = markdown.splitlines()[0]
    assert "SetA maxF↑†" in header and "SetA Sm↑ " in header and "SetA mae↓†" in header
    assert "† --protocol r3net: mae and maxF as the original R3Net code computes them" in markdown
    assert next(csv.reader((out / "table.csv").open()))[1:4] == ["SetA/maxF (r3net)", "SetA/Sm", "SetA/mae (r3net)"]
    tex = (out / "table.tex").read_text()
    assert r"F_\beta^{\max}\uparrow^\dagger$" in tex and r"S_\alpha\uparrow$" in tex
    row = json.loads((out / "results.json").read_text())["SetA"]["M1"]
    assert row["protocol"] == "r3net" and row["protocol_metrics"] == ["mae", "maxF"]

    standard = tmp_path / "standard"
    assert cli.main(_args(bench, standard, ("M1",))) == 0
    assert "†" not in (standard / "table.md").read_text() + (standard / "table.csv").read_text()
    assert "protocol" not in json.loads((standard / "results.json").read_text())["SetA"]["M1"]


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_cache_is_invalidated_by_a_changed_mask_or_library_version(
    bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    masks = tmp_path / "SetB"
    shutil.copytree(bench / "SetB" / "GT", masks)
    methods = [f"{m}={bench / 'methods' / m}" for m in ("M1", "M2")]
    args = ["compare", "--datasets", f"SetB={masks}", "--methods", *methods, "--out", str(tmp_path / "out")]
    assert cli.main(args) == 0
    assert sorted(_scored(capsys.readouterr().out)) == ["M1 on SetB", "M2 on SetB"]
    before = json.loads((tmp_path / "out" / "results.json").read_text())["SetB"]

    # a mask corrected (another object): every method scored on it again, with other numbers
    mask = masks / "setb_1.png"
    Image.fromarray(255 - np.asarray(Image.open(mask))).save(mask)
    assert cli.main(args) == 0
    assert sorted(_scored(capsys.readouterr().out)) == ["M1 on SetB", "M2 on SetB"]
    after = json.loads((tmp_path / "out" / "results.json").read_text())["SetB"]
    assert all(after[m]["mae"] != before[m]["mae"] for m in ("M1", "M2"))

    # a library that reads or scores the maps upgraded: scored again (to the same numbers here)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "999.0" if name == "numpy" else real_version(name))
    assert cli.main(args) == 0
    assert sorted(_scored(capsys.readouterr().out)) == ["M1 on SetB", "M2 on SetB"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["SetB"] == after


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_checkpoint_maps_are_remade_when_what_made_them_changes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The README: a checkpoint's maps are reused unless the checkpoint, the images or
    --backbone / --crf / --amp changed (test_checkpoint_method sees them reused)."""
    data = _tiny_duts(tmp_path / "DUTS-mini")
    ckpt = tmp_path / "checkpoint_10.pt"
    torch.manual_seed(0)
    torch.save({"model": R3Net("resnet18").state_dict(), "trainer": {"iteration": 10}}, ckpt)
    base = ["compare", "--datasets", f"R={data}", "--methods", f"Ours={ckpt}", "--out", str(tmp_path / "out")]
    base += ["--workers", "0"]

    def maps_made(*options: str) -> bool:
        assert cli.main([*base, *options]) == 0
        out = capsys.readouterr().out
        assert ("maps of Ours: inference on R" in out) != ("maps of Ours: kept" in out), out
        return "maps of Ours: inference on R" in out

    # each change alone remakes the maps (in the order of the README's claim)
    assert maps_made("--backbone", "resnet18")
    assert maps_made("--backbone", "resnet18", "--amp", "bf16")
    assert maps_made("--backbone", "resnet18", "--amp", "bf16", "--crf")
    assert maps_made("--amp", "bf16", "--crf")  # the backbone found in the checkpoint, not given
    first = json.loads((tmp_path / "out" / "results.json").read_text())["R"]["Ours"]
    torch.manual_seed(1)  # the checkpoint file replaced by other weights
    torch.save({"model": R3Net("resnet18").state_dict(), "trainer": {"iteration": 20}}, ckpt)
    assert maps_made("--amp", "bf16", "--crf")
    assert json.loads((tmp_path / "out" / "results.json").read_text())["R"]["Ours"] != first
    Image.fromarray(np.full((40, 40, 3), 128, np.uint8)).save(data / "images" / "p1.jpg")  # an image replaced
    assert maps_made("--amp", "bf16", "--crf")
    assert not maps_made("--amp", "bf16", "--crf")  # nothing changed: kept


def test_printed_ties_share_a_mark() -> None:
    """Ranks are taken on the printed values: 0.0504 and 0.0496 both print 0.050 and are both best;
    the next printed value is second-best. With one more digit they no longer tie."""
    from ignite_r3net.evaluation.comparison_table import build_table, table_latex, table_markdown

    results = {
        "S": {
            "A": {"mae": 0.0504, "maxF": 0.8496},
            "B": {"mae": 0.0496, "maxF": 0.8504},
            "C": {"mae": 0.0612, "maxF": 0.8401},
            "D": {"mae": 0.0731, "maxF": 0.8300},
        }
    }
    table = build_table(results, ["S"], ["A", "B", "C", "D"], ["mae", "maxF"], digits=3)
    rows = {
        line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:]
        for line in table_markdown(table).splitlines()[2:]
    }
    assert rows["A"] == rows["B"] == ["**0.050**", "**0.850**"]
    assert rows["C"] == ["<u>0.061</u>", "<u>0.840</u>"] and rows["D"] == ["0.073", "0.830"]
    latex = table_latex(table)
    assert latex.count(r"\textbf{0.050}") == 2 and latex.count(r"\textbf{0.850}") == 2
    assert r"\underline{0.061}" in latex and r"\underline{0.840}" in latex

    finer = build_table(results, ["S"], ["A", "B", "C", "D"], ["mae", "maxF"], digits=4)
    rows = {
        line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:]
        for line in table_markdown(finer).splitlines()[2:]
    }
    assert rows["B"] == ["**0.0496**", "**0.8504**"] and rows["A"] == ["<u>0.0504</u>", "<u>0.8496</u>"]
    assert rows["C"] == ["0.0612", "0.8401"]
