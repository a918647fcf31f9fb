"""``--backbone timm:NAME`` and ``--head-width F``: R3Net on timm's feature levels at the paper's strides, with a
slim head; a run of it trains on one and two processes, resumes bit for bit, refuses another backbone or head
width, and its checkpoints go unchanged to predict, evaluate, serve, export and ``--init-from``. timm's own weights
come from its Hub repository (a cache built here; no network), and without timm the backbone is one line.

The trained run is ``conftest.timm_run`` (timm's 82k-parameter EfficientNet, head width 0.25), shared with
tests/test_int8.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TIMM_EVERY, TIMM_ITERS, TIMM_TRAIN, timm_run_args
from helpers import REPO, cpu_env, free_port, make_tiny_dataset
from PIL import Image
from safetensors.torch import save_file

from ignite_r3net import cli
from ignite_r3net.checkpoint_io import load_checkpoint
from ignite_r3net.model.backbone_weights import load_backbone_weights, resolve_weights
from ignite_r3net.model.r3net import R3Net, build_backbone
from ignite_r3net.model.timm_backbone import TIMM_MISSING

pytestmark = pytest.mark.timeout(300)

BACKBONE = TIMM_TRAIN[TIMM_TRAIN.index("--backbone") + 1]
HUB_REPO = "timm/test_efficientnet.r160_in1k"  # what timm names for --pretrained imagenet
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _maps(folder: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.asarray(Image.open(p)).astype(int) for p in sorted(folder.glob("*.png"))}


@pytest.mark.slow  # over 1 s: two ResNet-18s on one image
def test_timms_resnet18_gives_torchvision_resnet18s_stages(tmp_path: Path) -> None:
    """The levels chosen (the stem max-pooled as layer0, then strides 4, 8, 16, 32) are the paper's: timm's
    resnet18, loaded by timm from a file of torchvision's keys, gives torchvision's five stages."""
    torch.manual_seed(0)
    ours = build_backbone("resnet18")
    file = tmp_path / "resnet18.pth"
    torch.save({k.removeprefix("layer0."): v for k, v in ours.state_dict().items()}, file)
    timm_resnet = build_backbone("timm:resnet18")
    load_backbone_weights(timm_resnet, file)
    image = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        for want, got in zip(ours.eval()(image), timm_resnet.eval()(image), strict=True):
            torch.testing.assert_close(got, want)


def test_a_timm_model_without_the_papers_strides_or_unknown_is_one_line(tmp_path: Path, capsys) -> None:
    train, _ = make_tiny_dataset(tmp_path / "data", n=2, n_val=1)
    common = ["--data", str(train), "--output-dir", str(tmp_path / "out"), "--pretrained", "none"]
    for name, why in (
        ("timm:test_vit", "gives 3 feature level(s), at strides 16, 16, 16; R3Net needs levels at strides 4, 8, 16"),
        ("timm:no_such_model", "timm cannot build no_such_model with features_only=True: Unknown model"),
    ):
        assert cli.main([*common, "--backbone", name]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --backbone {name}: ") and why in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_without_timm_a_timm_backbone_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError, as where it is not installed
    train, _ = make_tiny_dataset(tmp_path / "data", n=2, n_val=1)
    args = ["--data", str(train), "--output-dir", str(tmp_path / "out"), *TIMM_TRAIN]
    assert cli.main(args) == 2
    assert capsys.readouterr().err.strip() == f"error: {TIMM_MISSING}"
    assert TIMM_MISSING == (
        '--backbone timm:NAME needs the optional extra timm: pip install -e ".[timm]" in the clone of ignite_r3net'
    )
    assert cli.main(["profile", "--backbone", BACKBONE, "--size", "32", "32", "--repeats", "1"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {TIMM_MISSING}"


def test_imagenet_weights_are_timms_from_the_hub_cache_and_offline_without_it_one_line(tmp_path: Path, monkeypatch):
    """``--pretrained imagenet`` for a timm backbone is the Hub repository timm names for it, read from the
    Hugging Face cache; without it in the cache, offline, the one line the other backbones give. A timm file of
    another model is refused, counting the weights it lacks."""
    import huggingface_hub.constants
    import timm

    from ignite_r3net.errors import OptionError

    torch.manual_seed(5)
    full = {k: v.contiguous() for k, v in timm.create_model(BACKBONE.removeprefix("timm:")).state_dict().items()}
    snapshot = tmp_path / "hub" / ("models--" + HUB_REPO.replace("/", "--")) / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(COMMIT)
    save_file(full, str(snapshot / "model.safetensors"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # as HF_HOME does

    weights = resolve_weights("imagenet", BACKBONE)
    assert weights is not None and weights.source == f"hf-hub:{HUB_REPO}"
    model = R3Net(BACKBONE, 0.25)
    load_backbone_weights(model.backbone, weights.file)
    body = model.backbone.body.state_dict()  # the features: the classifier and the last 1x1 conv are not
    assert len(body) > 50 and all(torch.equal(value, full[key]) for key, value in body.items())

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(OptionError) as refused:
        resolve_weights("imagenet", BACKBONE)
    message = str(refused.value)
    assert message.startswith(f"--pretrained imagenet (timm's ImageNet weights of {BACKBONE}, hf-hub:{HUB_REPO})")
    assert "is not in the Hugging Face cache" in message and "(HF_HUB_OFFLINE is set)" in message
    assert "--pretrained none" in message and len(message.splitlines()) == 1

    other = tmp_path / "convnext.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model("test_convnext").state_dict().items()}, str(other))
    with pytest.raises(ValueError, match=rf"backbone weights {other} does not fit {BACKBONE}: \d+ of the model's \d+"):
        load_backbone_weights(model.backbone, other)


# ------------------------------------------------------------------------------------------- a trained run


def test_the_run_records_backbone_and_head_width_and_resumes_bit_for_bit(timm_run: Path, tmp_path: Path) -> None:
    out, last_but_one = timm_run / "out", TIMM_ITERS - TIMM_EVERY
    config = json.loads((out / "config.json").read_text())
    assert config["backbone"] == BACKBONE and config["head_width"] == 0.25
    checkpoint = load_checkpoint(out / f"checkpoint_{TIMM_ITERS}.pt")
    assert checkpoint["recipe"]["backbone"] == BACKBONE and checkpoint["recipe"]["head_width"] == 0.25
    assert checkpoint["model"]["predict0.weight"].shape == (1, 64, 1, 1)  # 256 x 0.25 channels

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(out / f"checkpoint_{last_but_one}.pt", resumed)
    assert cli.main([*timm_run_args(timm_run / "data", resumed), "--resume", "auto"]) == 0
    got = load_checkpoint(resumed / f"checkpoint_{TIMM_ITERS}.pt")
    for name, tensor in checkpoint["model"].items():
        assert torch.equal(tensor, got["model"][name]), name


def test_a_resume_with_another_backbone_or_head_width_is_refused(timm_run: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "again"
    folder.mkdir()
    shutil.copy(timm_run / "out" / f"checkpoint_{TIMM_ITERS - TIMM_EVERY}.pt", folder)
    for option, value, listed in (
        ("--head-width", "0.5", "--head-width 0.5 (checkpoint: 0.25)"),
        ("--backbone", "timm:test_convnext", f"--backbone timm:test_convnext (checkpoint: {BACKBONE})"),
    ):
        changed = timm_run_args(timm_run / "data", folder)
        changed[changed.index(option) + 1] = value
        assert cli.main([*changed, "--resume", "auto"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --resume ") and listed in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in folder.iterdir()) == [f"checkpoint_{TIMM_ITERS - TIMM_EVERY}.pt"]


@pytest.mark.slow  # two gloo processes of their own
def test_two_processes_train_it(tmp_path: Path) -> None:
    train, _ = make_tiny_dataset(tmp_path / "data", n=4, n_val=1)
    args = ["--nproc", "2", "--data", str(train), "--output-dir", str(tmp_path / "out"), "--iters", "2"]
    args += ["--batch-size", "2", "--workers", "0", "--master-port", str(free_port()), *TIMM_TRAIN]
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args], cwd=REPO, env=cpu_env(), capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "training R3Net (timm:test_efficientnet, head width 0.25)" in proc.stdout
    recipe = load_checkpoint(tmp_path / "out" / "checkpoint_2.pt")["recipe"]
    assert recipe["world_size"] == 2 and recipe["backbone"] == BACKBONE and recipe["head_width"] == 0.25


@pytest.mark.slow  # predict, evaluate, serve, a TorchScript export and a training start: several seconds
def test_its_checkpoint_predicts_evaluates_serves_exports_and_starts_a_run(timm_run: Path, tmp_path: Path, capsys):
    """Every command takes the checkpoint as it is (the backbone from config.json beside it, the head width from
    its shapes): the maps of predict, serve and the TorchScript file agree; the Hub folder and its card record
    both; ``--init-from`` starts from it, and refuses another head width in one line."""
    pytest.importorskip("fastapi")
    import httpx
    from serve_helpers import serving

    from ignite_r3net.options.serve import ServeOptions
    from ignite_r3net.serve.app import create_app
    from ignite_r3net.serve.model import load_served_model

    checkpoint, val = timm_run / "out" / f"checkpoint_{TIMM_ITERS}.pt", timm_run / "data" / "val"
    images = tmp_path / "images"
    images.mkdir()
    for image in val.glob("*.jpg"):
        shutil.copy(image, images)
    predict = ["predict", "--input", str(images), "--workers", "0", "--no-progress"]
    assert cli.main([*predict, "--checkpoint", str(checkpoint), "--output", str(tmp_path / "maps")]) == 0
    maps = _maps(tmp_path / "maps")
    assert len(maps) == 4 and all(m.max() - m.min() > 100 for m in maps.values())  # confident maps

    evaluate = ["evaluate", "--checkpoint", str(checkpoint), "--data", str(val), "--json", str(tmp_path / "e.json")]
    assert cli.main([*evaluate, "--workers", "0", "--no-progress"]) == 0
    final = [line for line in (timm_run / "out" / "train.log").read_text().splitlines() if "final validation" in line]
    (row,) = json.loads((tmp_path / "e.json").read_text()).values()
    assert f"max F {row['maxF']:.4f}" in final[0]  # validation scored the same model

    options = ServeOptions(checkpoint=str(checkpoint))
    with serving(create_app(load_served_model(options, torch.device("cpu")), options)) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/healthz").json()["backbone"] == BACKBONE
            for image in sorted(images.iterdir()):
                response = client.post("/predict", files={"image": (image.name, image.read_bytes())})
                served = np.asarray(Image.open(__import__("io").BytesIO(response.content))).astype(int)
                assert np.abs(served - maps[image.stem]).max() <= 1, image.name

    scripted = tmp_path / "r3net.pt"
    export = ["export", "--checkpoint", str(checkpoint), "--output"]
    assert cli.main([*export, str(scripted), "--format", "torchscript"]) == 0
    assert cli.main([*predict, "--model", str(scripted), "--output", str(tmp_path / "ts")]) == 0
    assert all(np.abs(got - maps[stem]).max() <= 1 for stem, got in _maps(tmp_path / "ts").items())

    hub = tmp_path / "hub"
    assert cli.main([*export, str(hub), "--format", "hub"]) == 0
    recorded = json.loads((hub / "config.json").read_text())
    assert recorded["backbone"] == BACKBONE and recorded["head_width"] == 0.25
    assert f"# R3Net ({BACKBONE}, head width 0.25) for salient object detection" in (hub / "README.md").read_text()

    train = ["--data", str(timm_run / "data" / "train"), "--iters", "1", "--batch-size", "2", "--workers", "0"]
    other = list(TIMM_TRAIN)
    other[other.index("--head-width") + 1] = "0.5"
    capsys.readouterr()
    assert cli.main([*train, *other, "--output-dir", str(tmp_path / "wide"), "--init-from", str(checkpoint)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --init-from {checkpoint} holds an R3Net of head width 0.25, not 0.5: add --head-width 0.25"
    )
    assert cli.main([*train, *TIMM_TRAIN, "--output-dir", str(tmp_path / "tuned"), "--init-from", str(checkpoint)]) == 0
    assert json.loads((tmp_path / "tuned" / "config.json").read_text())["resolved"]["weights"]["source"] == "init-from"
