"""Starting weights: ``--pretrained`` (Hugging Face hub cache, torchvision cache, files, none) and
``--init-from``; what a run records about them; one clear line when they cannot be had. No test
touches the network: the caches are built by hand in temporary folders."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.error
from pathlib import Path

import pytest
import torch
from helpers import REPO, TINY_TRAIN, cpu_env, log_lines, make_tiny_dataset
from safetensors.torch import save_file
from torchvision.models import resnet18

from ignite_r3net.cli import main

pytestmark = pytest.mark.timeout(240)

TIMM_REPO = "timm/resnet18.test_in1k"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def make_hf_cache(home: Path, repo: str = TIMM_REPO) -> dict[str, torch.Tensor]:
    """A Hugging Face cache (HF_HOME layout) holding ``repo``'s model.safetensors: a timm ResNet-18
    state_dict (timm's ResNet keys are torchvision's: conv1, bn1, layer1.0.conv1, ..., fc)."""
    torch.manual_seed(7)
    state = {k: v.contiguous() for k, v in resnet18().state_dict().items()}
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    save_file(state, str(snapshot / "model.safetensors"))
    return state


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=6, n_val=3)


@pytest.mark.slow
def test_hf_hub_weights_land_in_the_backbone_offline(tmp_path):
    """In a process of its own, as a run would: HF_HOME and HF_HUB_OFFLINE from the environment."""
    state = make_hf_cache(tmp_path / "hf")
    script = textwrap.dedent(f"""
        import torch
        from safetensors.torch import load_file
        from ignite_r3net.model.backbone_weights import load_backbone_weights, resolve_weights
        from ignite_r3net.model.r3net import R3Net

        weights = resolve_weights("hf-hub:{TIMM_REPO}", "resnet18")
        model = R3Net("resnet18")
        load_backbone_weights(model.backbone, weights.file)
        want = load_file(weights.file)
        got = model.backbone.state_dict()
        assert torch.equal(got["layer0.conv1.weight"], want["conv1.weight"])
        assert all(torch.equal(got[k], v) for k, v in want.items() if k.startswith("layer"))
        print(weights.file, weights.sha256)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=cpu_env(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    file, sha = proc.stdout.split()
    assert file.startswith(str(tmp_path / "hf" / "hub")) and len(sha) == 64
    assert len(state) > 100


def test_a_run_records_its_weights_in_config_and_log(data, tmp_path, monkeypatch):
    import huggingface_hub.constants

    make_hf_cache(tmp_path / "hf")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))  # as HF_HOME does
    train, _ = data
    out = tmp_path / "run"
    args = ["--data", str(train), "--output-dir", str(out), "--iters", "1", "--checkpoint-every", "1"]
    assert main([*args, *TINY_TRAIN, "--pretrained", f"hf-hub:{TIMM_REPO}"]) == 0
    weights = json.loads((out / "config.json").read_text())["resolved"]["weights"]
    assert weights["source"] == f"hf-hub:{TIMM_REPO}"
    assert weights["file"].endswith("model.safetensors") and len(weights["sha256"]) == 64
    log = (out / "train.log").read_text()
    assert f"initial weights: backbone from hf-hub:{TIMM_REPO}" in log and weights["sha256"] in log


def test_torchvision_weights_come_from_torchs_cache(tmp_path, monkeypatch):
    torch.manual_seed(3)
    reference = resnet18()
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(reference.state_dict(), cache / "resnet18-f37072fd.pth")  # torchvision's file name
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "torch" / "hub"))
    from ignite_r3net.model.backbone_weights import load_backbone_weights, resolve_weights
    from ignite_r3net.model.r3net import R3Net

    for name in ("imagenet", "IMAGENET1K_V1", "DEFAULT"):
        weights = resolve_weights(name, "resnet18")
        assert Path(weights.file) == cache / "resnet18-f37072fd.pth"
    model = R3Net("resnet18")
    load_backbone_weights(model.backbone, weights.file)
    assert torch.equal(model.backbone.layer4[1].conv2.weight, reference.layer4[1].conv2.weight)


@pytest.mark.parametrize(
    "source, backbone, expected",
    [
        # the paper's backbone: its default is timm's ImageNet-1k ResNeXt on the Hugging Face hub
        (
            "imagenet",
            "resnext101_32x4d",
            "--pretrained imagenet (the ImageNet-1k weights of resnext101_32x4d, "
            "hf-hub:timm/resnext101_32x4d.gluon_in1k): model.safetensors is not in the Hugging Face cache",
        ),
        (f"hf-hub:{TIMM_REPO}", "resnet18", f"--pretrained hf-hub:{TIMM_REPO}: model.safetensors is not in"),
        ("IMAGENET9K", "resnet18", "--pretrained IMAGENET9K: not a torchvision weights name of resnet18"),
    ],
)
def test_weights_that_cannot_be_had_are_one_line_before_anything_is_written(
    data, tmp_path, capsys, monkeypatch, source, backbone, expected
):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    out = tmp_path / "out"
    code = main(["--data", str(data[0]), "--output-dir", str(out), "--backbone", backbone, "--pretrained", source])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert expected in err, err
    if "hf-hub" in expected or "imagenet" in expected:
        assert str(tmp_path / "empty-cache") in err  # where it looked
    assert "--pretrained none" in err or "nor a file" in err  # the ways out
    assert not out.exists()


def test_a_torchvision_backbone_offline_is_one_line_naming_torchs_cache(data, tmp_path, capsys, monkeypatch):
    """The README: without a network, ``--pretrained imagenet`` stops at once with one line naming the
    cache it looked in. Here the download fails as it does offline, without touching the network."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    calls = []

    def offline(url: str, *args, **kwargs) -> None:
        calls.append(url)
        raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    out = tmp_path / "out"
    code = main(
        ["--data", str(data[0]), "--output-dir", str(out), "--backbone", "resnet18", "--pretrained", "imagenet"]
    )
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and err.startswith("error: --pretrained imagenet (the ImageNet-1k weights of resnet18")
        and len(err.splitlines()) == 1
    ), err
    cache = tmp_path / "torch-home" / "hub" / "checkpoints"
    assert calls == ["https://download.pytorch.org/models/resnet18-f37072fd.pth"]
    assert f"into torch's cache {cache} " in err and "Temporary failure in name resolution" in err
    assert "--pretrained none" in err and "--pretrained FILE" in err  # the ways out
    assert not out.exists() and not (cache / "resnet18-f37072fd.pth").exists()


def test_without_a_network_a_hub_source_stops_after_one_request(tmp_path, monkeypatch, capfd):
    """No HF_HUB_OFFLINE and no network: a Hub that does not answer (here a local port that closes
    every connection it accepts) is asked once, not six times with pauses between."""
    import huggingface_hub.constants

    from ignite_r3net.errors import OptionError
    from ignite_r3net.model.backbone_weights import resolve_weights

    attempts = []
    with socket.create_server(("127.0.0.1", 0)) as server:

        def close_each_connection():
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:  # the server closed: the test is over
                    return
                attempts.append(connection)
                connection.close()

        threading.Thread(target=close_each_connection, daemon=True).start()
        endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
        with pytest.raises(OptionError) as refused:
            resolve_weights("imagenet", "resnext101_32x4d")  # hf-hub:timm/resnext101_32x4d.gluon_in1k
    message = str(refused.value)
    assert len(attempts) == 1
    assert message.startswith("--pretrained imagenet (the ImageNet-1k weights of resnext101_32x4d, hf-hub:")
    assert f"is not in the Hugging Face cache {tmp_path / 'empty-cache'}" in message
    assert f"({endpoint} does not answer: " in message and "--pretrained none" in message
    assert len(message.splitlines()) == 1 and "Retrying" not in capfd.readouterr().err


def test_weights_of_another_backbone_are_one_short_line_naming_the_fix(data, tmp_path, capsys, spread_checkpoint):
    """A torchvision ResNet-34 file given to a resnet18 run, and a whole trained R3Net given as
    backbone weights: counts and a few key names, and the option that fits the file."""
    from torchvision.models import resnet34

    other = tmp_path / "resnet34.pth"
    torch.save(resnet34().state_dict(), other)
    common = ["--data", str(data[0]), "--backbone", "resnet18", *TINY_TRAIN[4:]]
    whole = f"it holds a whole trained R3Net (resnet18): start from it with --init-from {spread_checkpoint}"
    for file, fix in ((other, "it holds resnet34 weights: add --backbone resnet34"), (spread_checkpoint, whole)):
        assert main([*common, "--output-dir", str(tmp_path / "out"), "--pretrained", str(file)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --pretrained {file}: backbone weights {file} does not match the model: ")
        assert err.endswith(fix) and len(err.splitlines()) == 1, err
        assert err.count("weight") + err.count("running_") <= 12, "a few key names, not hundreds"
    assert not (tmp_path / "out").exists()
    # the other way round: backbone weights where a whole trained R3Net goes
    assert main([*common, "--output-dir", str(tmp_path / "out"), "--init-from", str(other)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --init-from {other} holds backbone weights (resnet34), not a whole trained R3Net: start from "
        f"them with --pretrained {other} --backbone resnet34"
    )


def test_init_from_starts_a_new_run_from_a_finished_runs_weights(reference_run, tmp_path, capsys):
    """Fine-tuning from the reference run's last checkpoint (2 processes, 12 iterations): a new run
    in a folder of its own, from iteration 1 with a fresh optimiser and schedule."""
    finished = reference_run.out / "checkpoint_12.pt"
    common = ["--data", str(reference_run.train), "--val-data", str(reference_run.val), *TINY_TRAIN]
    second = tmp_path / "second"
    assert main([*common, "--output-dir", str(second), "--iters", "2", "--init-from", str(finished)]) == 0
    first_log, second_log = log_lines(reference_run.out / "train.log"), log_lines(second / "train.log")
    # validation before training scores the weights the run starts from: those of the first run's end
    final = next(line for line in first_log if line.startswith("[val iter 12]"))
    start = next(line for line in second_log if line.startswith("[val iter 0]"))
    assert start.split("]", 1)[1] == final.split("]", 1)[1]
    assert any(line.startswith("[iter 1]") for line in second_log)
    assert any("initial weights: whole model" in line and "checkpoint_12.pt" in line for line in second_log)
    record = json.loads((second / "config.json").read_text())
    assert record["init_from"] == str(finished) and record["resolved"]["weights"]["source"] == "init-from"

    # a backbone that does not match the weights, and two sources of weights, are refused
    init = ["--output-dir", str(tmp_path / "x"), "--init-from", str(finished)]
    capsys.readouterr()
    assert main([*common, *init, "--backbone", "resnet34"]) == 2
    assert "holds an R3Net with backbone resnet18, not resnet34" in capsys.readouterr().err
    assert main([*common, *init, "--pretrained", "IMAGENET1K_V1"]) == 2
    assert "--init-from and --pretrained both give" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
