"""``train --val-split F``: a fraction of the ``--data`` pairs held out for validation by name, so that no pair
changes side when pairs are added; recorded in config.json and OUTPUT_DIR/val_split.txt, kept by a resume,
refused with ``--val-data`` and the synthetic set."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_TRAIN, log_lines, make_data_root, make_tiny_dataset, plan_of

from ignite_r3net import cli
from ignite_r3net.checkpoint_io import load_checkpoint
from ignite_r3net.config import TrainConfig
from ignite_r3net.data.loader import SaliencyTrainSet
from ignite_r3net.data.split import held_out_pairs
from ignite_r3net.training.recipe_config import batch_layout
from ignite_r3net.training.start import resolve_data

pytestmark = pytest.mark.timeout(240)

SPLIT, PAIRS, ITERS = 0.3, 16, 2


def _held_out(stem: str, fraction: float) -> bool:
    """The rule, written out: the first 16 hex digits of the sha256 of the file stem, as a share of 16**16."""
    return int(hashlib.sha256(stem.encode()).hexdigest()[:16], 16) / 16**16 < fraction


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.jpg"))


def _resolved(tmp_path: Path, *folders: Path, fraction: float = SPLIT, **options) -> dict:
    config = TrainConfig(
        data=[str(f) for f in folders], val_split=fraction, output_dir=str(tmp_path), crop=32, **options
    )
    config.validate()
    data = resolve_data(config, batch_layout(config, 1))
    return {"data": data.folders, **dataclasses.asdict(data)}


def test_a_pair_keeps_its_side_when_pairs_are_added(tmp_path: Path) -> None:
    folder, _ = make_tiny_dataset(tmp_path / "data", n=30, n_val=0)
    first = _resolved(tmp_path, folder)
    held = first["val_held_out"]
    training = set(_stems(folder)) - set(held)
    assert held == [s for s in _stems(folder) if _held_out(s, SPLIT)] and 0 < len(held) < 30
    assert first["data_sets"][0]["pairs"] == 30 - len(held) and first["data_sets"][0]["held_out"] == len(held)
    # 30 more pairs, of other names, sorted between the first ones
    for image in sorted(folder.glob("*.jpg")):
        for suffix in (".jpg", ".png"):
            shutil.copy(image.with_suffix(suffix), folder / f"{image.stem}_new{suffix}")
    grown = _resolved(tmp_path, folder)
    assert set(held) <= set(grown["val_held_out"])  # the held-out pairs stay held out
    assert not training & set(grown["val_held_out"])  # and the training pairs train
    added = [s for s in _stems(folder) if s.endswith("_new")]
    assert [s for s in grown["val_held_out"] if s.endswith("_new")] == [s for s in added if _held_out(s, SPLIT)]


def test_several_folders_and_data_root_names(tmp_path: Path) -> None:
    # two folders whose pairs share their names: a name is held out in both
    a, _ = make_tiny_dataset(tmp_path / "a", n=12, n_val=0, seed=1)
    b, _ = make_tiny_dataset(tmp_path / "b", n=12, n_val=0, seed=2)
    both = _resolved(tmp_path, a, b)
    assert [d["held_out"] for d in both["data_sets"]] == [len(both["val_held_out"])] * 2
    assert both["listings"]["val_data"].startswith(f"--val-split {SPLIT}: ")
    # names of standard sets under --data-root, in two layouts (side by side; images/ + masks/)
    root = make_data_root(tmp_path / "root", n=12, sets=("MSRA10K", "HKU-IS"))
    named = _resolved(tmp_path, Path("MSRA10K"), Path("HKU-IS"), data_root=str(root))
    assert [Path(f).name for f in named["data"]] == ["Imgs", "hkuis"]
    assert sum(d["held_out"] for d in named["data_sets"]) == len(held_out_pairs(named["data"], SPLIT)) > 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    """A 1-process run of ITERS iterations validating on the pairs --val-split holds out of 16 (checkpoints
    and validations at 1 and 2; at most 2 pairs scored per validation, which the log says with the held-out
    count)."""
    root = tmp_path_factory.mktemp("val-split")
    folder, _ = make_tiny_dataset(root / "data", n=PAIRS, n_val=0)
    args = ["--data", str(folder), "--val-split", str(SPLIT), "--iters", str(ITERS), "--checkpoint-every", "1"]
    args += ["--val-max", "2", "--no-val-at-start", "--no-progress", *TINY_TRAIN]
    out = root / "first"
    assert cli.main([*args, "--output-dir", str(out)]) == 0
    return folder, args, out


def test_the_run_validates_on_the_held_out_pairs_and_records_them(run, capsys) -> None:
    folder, _, out = run
    held = [s for s in _stems(folder) if _held_out(s, SPLIT)]
    config = json.loads((out / "config.json").read_text())
    resolved = config["resolved"]
    assert config["val_split"] == SPLIT and resolved["val_held_out"] == held and resolved["val_data"] is None
    assert (out / "val_split.txt").read_text().splitlines() == held
    lines = log_lines(out / "train.log")
    said = f"--val-split {SPLIT}: {len(held)} of {PAIRS} pairs held out for validation, listed in {out}/val_split.txt"
    assert lines.count(said) == 1
    validation = f"validation: 2 of the {len(held)} pairs of --val-split {SPLIT} (--val-max 2), evenly spaced"
    assert any(line.startswith(validation) for line in lines)
    assert [line.split("]")[0] for line in lines if line.startswith("[val iter")] == ["[val iter 1", "[val iter 2"]
    assert list(out.glob("best_model_*.pt"))  # kept by the validation's max F
    # trained on the others only
    checkpoint = torch.load(out / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    assert checkpoint["trainer"]["epoch_length"] == (PAIRS - len(held)) // 2
    trained = SaliencyTrainSet([folder], crop=32, rotate=0, val_split=SPLIT).pairs
    assert sorted(image.stem for image, _ in trained) == sorted(set(_stems(folder)) - set(held))


def test_a_resume_keeps_the_split_and_refuses_another(run, tmp_path, capsys) -> None:
    folder, args, first = run
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copy(first / "checkpoint_1.pt", out)
    capsys.readouterr()
    changed = [*args, "--output-dir", str(out), "--resume", "auto"]
    changed[changed.index("--val-split") + 1] = "0.5"
    assert cli.main(changed) == 2
    err = capsys.readouterr().err.strip()
    assert f"--val-split 0.5 (checkpoint: {SPLIT})" in err and len(err.splitlines()) == 1, err
    assert cli.main([*args, "--output-dir", str(out), "--resume", "auto"]) == 0
    assert (out / "val_split.txt").read_text() == (first / "val_split.txt").read_text()
    assert (
        json.loads((out / "config.json").read_text())["resolved"]["val_held_out"]
        == json.loads((first / "config.json").read_text())["resolved"]["val_held_out"]
    )
    resumed, uninterrupted = (load_checkpoint(o / f"checkpoint_{ITERS}.pt")["model"] for o in (out, first))
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)  # the same pairs trained on


@pytest.mark.parametrize(
    "given, message",
    [
        (["--val-data", "VAL"], "--val-split and --val-data both choose the validation pairs: give one"),
        ([], "--val-split holds out pairs of --data folders; the synthetic set has its own validation pairs"),
        (["--val-split", "1"], "--val-split must be a fraction between 0 and 1 (both excluded), got 1.0"),
        (["--val-split", "0.001"], "--val-split 0.001 holds out 0 of the 4 pairs of --data DATA, leaving no pair for"),
    ],
)
def test_a_split_that_cannot_be_is_one_error_line(tmp_path, capsys, given, message) -> None:
    folder, val = make_tiny_dataset(tmp_path / "data", n=4, n_val=1)
    data = [] if not given else ["--data", str(folder)]
    words = ["--val-split", "0.5", *data, *given, "--output-dir", str(tmp_path / "out"), *TINY_TRAIN]
    words = [str(val) if w == "VAL" else w for w in words]
    assert cli.main(words) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message.replace('DATA', str(folder))}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_train_log_and_the_trackers_record_how_many_names_not_each() -> None:
    from ignite_r3net.training.trackers import recipe_params
    from ignite_r3net.training.train_log import header_lines

    names = [f"ILSVRC2012_test_{i:08d}" for i in range(1000)]  # a tenth of DUTS-TR: 25 kB of names
    plan = plan_of(TrainConfig(data=["/data/DUTS-TR"], val_split=0.1))
    plan = dataclasses.replace(plan, data=dataclasses.replace(plan.data, val_held_out=names))
    assert recipe_params(plan)["val_held_out"] == "1000 names (listed in config.json)"
    configuration = header_lines(plan, None, 0, torch.device("cpu"))[0][0]
    assert configuration.startswith("configuration: {") and names[0] not in configuration
    assert plan.record()["resolved"]["val_held_out"] == names
