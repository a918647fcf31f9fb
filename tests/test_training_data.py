"""Several training sets (``--data A B``, ``--data A --data B``): trained on as one, recorded in
config.json folder by folder, held to on resume; and the validation options (``--no-val-at-start``,
``--val-max``, a run without validation)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil

import pytest
import torch
from helpers import TINY_TRAIN, log_lines, make_tiny_dataset, plan_of

from ignite_r3net.cli import build_parser, main, options_from_args
from ignite_r3net.config import TrainConfig
from ignite_r3net.data.folder import list_pairs
from ignite_r3net.data.loader import SaliencyEvalSet, SaliencyTrainSet
from ignite_r3net.training.train_log import header_lines

pytestmark = pytest.mark.timeout(240)

ITERS = 3


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Two training folders whose pairs share their names (syn_00000 ... in both) and a validation
    folder of 5 pairs."""
    root = tmp_path_factory.mktemp("sets")
    a, _ = make_tiny_dataset(root / "a", n=6, n_val=1, seed=1)
    b, val = make_tiny_dataset(root / "b", n=4, n_val=5, seed=2)
    return a, b, val


@pytest.fixture(scope="module")
def run(sets, tmp_path_factory):
    """One run on both folders, validating 2 of the 5 validation pairs, not before training."""
    a, b, val = sets
    out = tmp_path_factory.mktemp("run")
    args = ["--data", str(a), "--data", str(b), "--val-data", str(val), "--output-dir", str(out)]
    args += ["--iters", str(ITERS), "--checkpoint-every", str(ITERS), "--no-val-at-start", "--val-max", "2"]
    assert main([*args, *TINY_TRAIN]) == 0
    return out, args


def _options(*argv: str) -> TrainConfig:
    return options_from_args(TrainConfig, build_parser().parse_args(["train", *argv]))


def test_data_takes_several_folders_in_one_or_several_options():
    assert _options().data == ["synthetic"]
    assert _options("--data", "A").data == ["A"]
    assert _options("--data", "A", "B", "--data", "C").data == ["A", "B", "C"]


def test_a_config_json_of_one_folder_still_loads(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"data": "/data/DUTS-TR", "iters": 10}))
    assert TrainConfig.load(tmp_path / "config.json").data == ["/data/DUTS-TR"]


def test_pairs_of_the_same_name_in_two_folders_are_both_trained_on(sets):
    a, b, _ = sets
    union = SaliencyTrainSet([a, b], crop=32, rotate=0)
    assert union.pairs == list_pairs(a) + list_pairs(b)
    assert a / "syn_00000.jpg" in {image for image, _ in union.pairs}
    assert b / "syn_00000.jpg" in {image for image, _ in union.pairs}


def _listing(folder) -> str:
    """What a folder's pairs are recorded as: their count and the sha256 of their names, one
    ``image<TAB>mask`` line each, relative to the folder (12 hex digits of it)."""
    names = sorted(p.stem for p in folder.glob("*.jpg"))
    digest = hashlib.sha256("\n".join(f"{n}.jpg\t{n}.png" for n in names).encode()).hexdigest()
    return f"{len(names)} pairs (sha256 {digest[:12]})"


def test_the_run_trains_on_the_union_and_config_json_records_each_folder(run, sets):
    a, b, _ = sets
    out, _ = run
    config = json.loads((out / "config.json").read_text())
    assert config["data"] == config["resolved"]["data"] == [str(a), str(b)]
    assert config["resolved"]["data_sets"] == [
        {"folder": str(a), "pairs": 6, "listing": _listing(a)},
        {"folder": str(b), "pairs": 4, "listing": _listing(b)},
    ]
    checkpoint = torch.load(out / f"checkpoint_{ITERS}.pt", map_location="cpu", weights_only=True)
    assert checkpoint["trainer"]["epoch_length"] == (6 + 4) // 2  # one epoch: every pair of both, 2 per batch


def test_resume_refuses_other_training_folders_and_accepts_moved_ones(run, sets, tmp_path, capsys):
    a, b, _ = sets
    out, args = run
    resume = [*args, *TINY_TRAIN, "--resume", "auto"]
    capsys.readouterr()
    for data in ([str(a)], [str(b), str(a)]):  # one folder left out; the same folders in another order
        changed = [*resume]
        at = changed.index("--data")
        changed[at : at + 4] = ["--data", *data]
        assert main(changed) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "this run differs from the one the checkpoint continues" in err, err
        assert f"--data {data[0]}: " in err and f"(checkpoint: {a}: {_listing(a)}, {b}: {_listing(b)})" in err, err
    # the same pairs in other folders (the data set moved): the same run, here already complete
    moved = tmp_path / "moved"
    shutil.copytree(a, moved / "a")
    shutil.copytree(b, moved / "b")
    elsewhere = [str(moved / "a") if x == str(a) else str(moved / "b") if x == str(b) else x for x in resume]
    assert main(elsewhere) == 0
    assert f"is at iteration {ITERS} of {ITERS}; nothing to do" in capsys.readouterr().out


def test_validation_options_are_obeyed(run, sets):
    out, _ = run
    lines = log_lines(out / "train.log")
    assert not any(line.startswith("[val iter 0]") for line in lines), "--no-val-at-start"
    assert any(line.startswith(f"[val iter {ITERS}]") for line in lines)
    final = next(line for line in lines if line.startswith("final validation: "))
    assert "before training" not in final  # nothing to compare with
    _, _, val = sets
    said = f"validation: 2 of the 5 pairs of {val} (--val-max 2), evenly spaced, the same ones at every validation"
    assert lines.count(said) == 1


def test_val_max_scores_evenly_spaced_pairs(sets):
    _, _, val = sets
    pairs = list_pairs(val)
    assert SaliencyEvalSet(val, max_pairs=2).pairs == [pairs[0], pairs[2]]  # 0 * 5 // 2, 1 * 5 // 2
    assert SaliencyEvalSet(val, max_pairs=9).pairs == pairs


def test_a_run_without_validation_says_so_once_on_the_console_and_in_the_log():
    plan = plan_of(TrainConfig(data=["/data/DUTS-TR"], val_data=None))
    header, console = header_lines(plan, None, 0, torch.device("cpu"))
    for lines in (header, console):
        notes = [line for line in lines if line.startswith("note: no validation")]
        assert notes == [
            "note: no validation (no --val-data or --val-split): no validation scores, and no best_model_*.pt is kept "
            "(the checkpoints are)"
        ]
    assert (
        "note: --val-max 50 has no effect: there is no validation"
        in header_lines(plan_of(dataclasses.replace(plan.options, val_max=50)), None, 0, torch.device("cpu"))[1]
    )
    with_validation = plan_of(dataclasses.replace(plan.options, val_data="/data/ECSSD"))
    assert not any("no validation" in line for line in header_lines(with_validation, None, 0, torch.device("cpu"))[0])
