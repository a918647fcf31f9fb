"""Trained models on the Hugging Face Hub: ``export --format hub`` writes the folder a user uploads,
and every command reads it back as ``hf-hub:ORG/NAME[@REVISION]``. No network: the Hub cache is built
by hand from exported folders, in huggingface_hub's layout (blobs, snapshot symlinks, refs), and
``HF_HUB_OFFLINE=1`` (conftest) keeps huggingface_hub in it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_tiny_dataset, plan_of, save_spread_r3net
from huggingface_hub import ModelCard
from PIL import Image
from safetensors.torch import load_file

from ignite_r3net import cli
from ignite_r3net.checkpoint_io import load_checkpoint
from ignite_r3net.config import TrainConfig
from ignite_r3net.export import writer
from ignite_r3net.export.model_card import model_card, read_results
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.training.start import resolve_initial_weights

REPO = "lab/r3net-test"
MAIN = "1111111111111111111111111111111111111111"
SECOND = "2222222222222222222222222222222222222222"
RUN_WEIGHTS_SHA = "ab" * 32
# an evaluate --json row (its format: images, then the nine metrics; the card shows five)
EVALUATED = {"images": 7, "mae": 0.0412, "maxF": 0.9123, "Sm": 0.8801, "maxE": 0.9456, "wF": 0.8702}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _export(checkpoint: Path | str, out: Path, *extra: str) -> None:
    args = ["export", "--checkpoint", str(checkpoint), "--format", "hub", "--output", str(out), *extra]
    assert cli.main(args) == 0


@pytest.fixture(scope="module")
def run_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A best_model file in a run folder whose config.json records the recipe and starting weights."""
    run = tmp_path_factory.mktemp("run")
    weights = {"source": "imagenet", "file": "/home/me/.cache/resnet18-f37072fd.pth", "sha256": RUN_WEIGHTS_SHA}
    config = TrainConfig(backbone="resnet18", iters=123, lr=0.007, crop=64, data="/data/DUTS-TR")
    plan_of(config, weights=weights).save(run / "config.json")
    return save_spread_r3net(run / "best_model_123_maxF=0.9000.pt", seed=1)


@pytest.fixture(scope="module")
def other_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_spread_r3net(tmp_path_factory.mktemp("other") / "best_model_1_maxF=0.5000.pt", seed=2)


@pytest.fixture(scope="module")
def exported(run_checkpoint: Path, other_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The two models exported as a user would, the first with every model-card option."""
    root = tmp_path_factory.mktemp("exported")
    (root / "evaluate.json").write_text(json.dumps({"ECSSD": EVALUATED}))
    card = ["--trained-on", "DUTS-TR", "--repo-id", REPO, "--license", "apache-2.0"]
    _export(run_checkpoint, root / "main", *card, "--results", str(root / "evaluate.json"))
    _export(other_checkpoint, root / "second")
    return {"main": root / "main", "second": root / "second"}


def add_to_hub_cache(cache: Path, repo: str, folder: Path, commit: str, refs: tuple[str, ...]) -> None:
    """``folder``'s files as huggingface_hub stores a download: content in ``blobs/<sha256>``, the
    snapshot ``snapshots/<commit>/<name>`` a relative symlink to it, each ref a file naming the commit."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir(exist_ok=True)
    for file in folder.iterdir():
        blob = root / "blobs" / _sha256(file)
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    for ref in refs:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)


@pytest.fixture
def hub_cache(exported: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache (what HF_HOME/hub holds) with REPO: ``main`` at the first export, tag
    ``v2`` at the second; huggingface_hub pointed at it, as HF_HOME does."""
    import huggingface_hub.constants

    cache = tmp_path / "hf" / "hub"
    add_to_hub_cache(cache, REPO, exported["main"], MAIN, ("main",))
    add_to_hub_cache(cache, REPO, exported["second"], SECOND, ("v2",))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for name, (h, w) in {"a.png": (40, 52), "b.jpg": (48, 36)}.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / name)
    return folder


def _maps(checkpoint: str, photos: Path, out: Path) -> dict[str, bytes]:
    args = ["predict", "--checkpoint", checkpoint, "--input", str(photos), "--output", str(out), "--workers", "0"]
    assert cli.main(args) == 0
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.png"))}  # beside OUTPUT/.predict


def test_folder_holds_the_weights_the_recipe_and_the_sha256s(exported: dict, run_checkpoint: Path) -> None:
    folder = exported["main"]
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    weights = load_file(folder / "model.safetensors")  # safetensors: no pickle
    expected = R3Net("resnet18")
    expected.load_state_dict(torch.load(run_checkpoint, weights_only=True))
    assert weights.keys() == expected.state_dict().keys()  # our key layout
    assert all(torch.equal(weights[k], v) for k, v in expected.state_dict().items())

    config = json.loads((folder / "config.json").read_text())
    assert config["backbone"] == "resnet18"
    assert config["checkpoint"] == {"source": run_checkpoint.name, "sha256": _sha256(run_checkpoint)}
    assert config["training"]["iters"] == 123 and config["training"]["lr"] == 0.007
    start = {"source": "imagenet", "file": "resnet18-f37072fd.pth", "sha256": RUN_WEIGHTS_SHA}  # the file's name only
    assert config["starting_weights"] == start
    assert config["contract"]["input"].startswith("image: uint8 (N, 3, H, W)")
    assert config["ignite_r3net"]["version"]

    card = ModelCard.load(folder / "README.md")  # huggingface_hub's own parser of the metadata
    meta = card.data.to_dict()
    assert meta["library_name"] == "ignite_r3net" and meta["license"] == "apache-2.0"
    assert meta["pipeline_tag"] == "image-segmentation" and meta["datasets"] == ["DUTS-TR"]
    assert {"saliency-detection", "salient-object-detection", "image-segmentation"} <= set(meta["tags"])
    assert f"--checkpoint hf-hub:{REPO}" in card.text and _sha256(run_checkpoint) in card.text
    assert "| ECSSD | 7 | 0.041 | 0.912 | 0.880 | 0.946 | 0.870 |" in card.text  # --results, rounded to 3
    assert ModelCard.load(exported["second"] / "README.md").data.to_dict()["license"] == "mit"  # the default


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_hub_checkpoint_gives_the_checkpoints_maps_byte_for_byte(
    hub_cache: Path, exported: dict, run_checkpoint: Path, other_checkpoint: Path, photos: Path, tmp_path: Path
) -> None:
    from_file = _maps(str(run_checkpoint), photos, tmp_path / "file")
    assert _maps(f"hf-hub:{REPO}", photos, tmp_path / "hub") == from_file
    # a revision: a tag and a commit hash name the second export; main stays the first
    other = _maps(str(other_checkpoint), photos, tmp_path / "other")
    assert other != from_file
    assert _maps(f"hf-hub:{REPO}@v2", photos, tmp_path / "tag") == other
    assert _maps(f"hf-hub:{REPO}@{SECOND}", photos, tmp_path / "commit") == other


@pytest.mark.parametrize("source", [f"hf-hub:{REPO}-absent", f"hf-hub:{REPO}@v3"], ids=["repository", "revision"])
def test_offline_without_the_repository_is_one_line(
    hub_cache: Path, photos: Path, tmp_path: Path, capsys: pytest.CaptureFixture, source: str
) -> None:
    args = ["predict", "--checkpoint", source, "--input", str(photos), "--output", str(tmp_path / "out")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    cache_line = f"error: --checkpoint {source}: model.safetensors is not in the Hugging Face cache {hub_cache} "
    assert err.startswith(cache_line), err
    assert "HF_HUB_OFFLINE is set" in err and "use a local checkpoint file" in err
    assert not (tmp_path / "out").exists()


def test_a_malformed_hub_source_is_one_line(photos: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for source in (f"hf-hub:{REPO}@", "hf-hub:"):
        args = ["predict", "--checkpoint", source, "--input", str(photos), "--output", str(tmp_path / "out")]
        assert cli.main(args) == 2
        expected = f"error: --checkpoint {source}: expected hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION"
        assert capsys.readouterr().err.strip() == expected


@pytest.mark.slow  # an integration of evaluate and compare (launches, scoring); the Hub part is resolve_checkpoint
def test_evaluate_and_compare_take_a_hub_checkpoint(
    hub_cache: Path, run_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, val = make_tiny_dataset(tmp_path / "data", n=1, n_val=3)
    scores = {}
    for name, source in (("file", str(run_checkpoint)), ("hub", f"hf-hub:{REPO}")):
        args = ["evaluate", "--checkpoint", source, "--data", str(val), "--workers", "0"]
        assert cli.main([*args, "--json", str(tmp_path / f"{name}.json")]) == 0
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert scores["hub"] == scores["file"]

    out = tmp_path / "comparison"
    methods = ["File=" + str(run_checkpoint), f"Hub=hf-hub:{REPO}"]
    args = ["compare", "--datasets", f"Val={val}", "--methods", *methods, "--out", str(out), "--workers", "0"]
    args += ["--show", "0"]
    assert cli.main(args) == 0
    results = json.loads((out / "results.json").read_text())["Val"]
    assert results["Hub"] == results["File"] and results["Hub"]["mae"] == scores["file"]["val"]["mae"]
    for stem in ("syn_00000", "syn_00001", "syn_00002"):
        hub_map = out / "maps" / "Hub" / "Val" / f"{stem}.png"
        assert hub_map.read_bytes() == (out / "maps" / "File" / "Val" / f"{stem}.png").read_bytes()


def test_init_from_a_hub_checkpoint_records_its_sha256(hub_cache: Path, exported: dict, tmp_path: Path) -> None:
    config = TrainConfig(backbone="resnet18", pretrained="none", init_from=f"hf-hub:{REPO}", output_dir=str(tmp_path))
    weights = resolve_initial_weights(config, resumed=False)
    assert weights is not None and weights["source"] == "init-from"
    assert weights["sha256"] == _sha256(exported["main"] / "model.safetensors")
    assert f"models--{REPO.replace('/', '--')}" in weights["file"]
    # what each worker then reads: the file recorded (a symlink into the cache's blobs)
    state = load_checkpoint(weights["file"])
    assert all(torch.equal(state[k], v) for k, v in load_file(exported["main"] / "model.safetensors").items())


def test_export_from_the_hub_keeps_the_records(hub_cache: Path, exported: dict, tmp_path: Path) -> None:
    """Re-exporting a Hub model (e.g. to ONNX elsewhere, or to another repository) keeps what its
    config.json recorded: the recipe and the starting weights; the source is the hf-hub: name."""
    _export(f"hf-hub:{REPO}", tmp_path / "again")
    first = json.loads((exported["main"] / "config.json").read_text())
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["training"] == first["training"] and again["starting_weights"] == first["starting_weights"]
    assert again["checkpoint"] == {
        "source": f"hf-hub:{REPO}",
        "sha256": _sha256(exported["main"] / "model.safetensors"),
    }
    assert _sha256(tmp_path / "again" / "model.safetensors") == again["checkpoint"]["sha256"]  # the same weights file


def test_compare_results_become_the_cards_table(exported: dict, tmp_path: Path) -> None:
    other = {"mae": 0.0501, "maxF": 0.9011, "Sm": 0.8702, "maxE": 0.9301, "wF": 0.8600, "count": 7}
    compared = {"ECSSD": {"Ours": {**EVALUATED, "count": 7}, "Other": other}}
    (tmp_path / "compare.json").write_text(json.dumps(compared))
    config = json.loads((exported["main"] / "config.json").read_text())
    card = model_card(config, read_results(tmp_path / "compare.json"), {})
    assert "| Ours | **0.041** | **0.912** | **0.880** | **0.946** | **0.870** |" in card  # best bold
    assert "| Other | <u>0.050</u> | <u>0.901</u> | <u>0.870</u> | <u>0.930</u> | <u>0.860</u> |" in card


def test_a_profile_becomes_the_cards_cost_table(run_checkpoint: Path, tmp_path: Path, capsys) -> None:
    """``export --format hub --profile FILE``: the rows ``profile --json`` measured, as a table with how they were
    measured; a profile of another backbone is refused."""
    cost = tmp_path / "cost.json"
    args = ["--checkpoint", str(run_checkpoint), "--size", "32", "32", "--warmup", "0", "--repeats", "1"]
    assert cli.main(["profile", *args, "--json", str(cost)]) == 0
    _export(run_checkpoint, tmp_path / "hub", "--profile", str(cost))
    card = (tmp_path / "hub" / "README.md").read_text()
    (row,) = json.loads(cost.read_text())["rows"]
    assert "## Cost" in card and "FLOPs / 2" in card and "synchronised around each run" in card
    assert f"| {row['device_name']} | inference 32x32 b1 fp32 | 18.57 | {row['gmacs_per_image']:.2f} |" in card
    report = json.loads(cost.read_text())
    report["rows"][0]["backbone"] = "resnet50"
    cost.write_text(json.dumps(report))
    common = ["export", "--checkpoint", str(run_checkpoint), "--format", "hub", "--output", str(tmp_path / "h")]
    capsys.readouterr()
    assert cli.main([*common, "--profile", str(cost)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --profile {cost} measured backbone resnet50, but the checkpoint's is resnet18\n"


def test_profile_takes_a_hub_checkpoint(hub_cache: Path, tmp_path: Path, capsys) -> None:
    """``profile --checkpoint hf-hub:ORG/NAME``: the cost of the model the Hub folder holds, named as given."""
    cost = tmp_path / "cost.json"
    args = ["--checkpoint", f"hf-hub:{REPO}", "--size", "32", "32", "--warmup", "0", "--repeats", "1"]
    assert cli.main(["profile", *args, "--json", str(cost)]) == 0
    assert f"profile: hf-hub:{REPO} on cpu" in capsys.readouterr().out
    (row,) = json.loads(cost.read_text())["rows"]
    assert row["model"] == f"hf-hub:{REPO}" and row["backbone"] == "resnet18"
    assert row["parameters"] == sum(p.numel() for p in R3Net("resnet18").parameters())


def test_an_export_replaces_only_an_export_and_fails_whole(
    run_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert cli.main(["export", "--checkpoint", str(run_checkpoint), "--format", "hub", "--output", str(mine)]) == 2
    assert "holds files of its own" in capsys.readouterr().err and (mine / "notes.txt").exists()

    out = tmp_path / "out"
    _export(run_checkpoint, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args: object) -> None:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(writer, "_check_folder", broken)
    with pytest.raises(RuntimeError):
        options = writer.ExportOptions(checkpoint=str(run_checkpoint), format="hub", output=str(out))
        writer.write_hub_folder(options)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier export, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "out"]  # no temporary folder left


def test_card_options_and_bad_results_are_one_line(run_checkpoint: Path, tmp_path: Path, capsys) -> None:
    common = ["export", "--checkpoint", str(run_checkpoint), "--output"]
    (tmp_path / "bad.json").write_text(json.dumps({"ECSSD": {"M": {"mae": 0.1}}}))
    cases = [
        (["x.onnx", "--format", "onnx", "--results", "r.json"], "error: --results applies to --format hub only"),
        ([str(tmp_path / "h"), "--format", "hub", "--results", str(tmp_path / "bad.json")], "M on ECSSD has no maxF"),
        ([str(tmp_path / "h"), "--format", "hub", "--results", str(tmp_path / "none.json")], "cannot read it"),
        ([str(tmp_path / "h"), "--format", "hub", "--profile", str(tmp_path / "bad.json")], "expected the JSON of"),
        (["x.onnx", "--format", "onnx", "--profile", "p.json"], "error: --profile applies to --format hub only"),
    ]
    for args, expected in cases:
        assert cli.main([*common, *args]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "h").exists()
