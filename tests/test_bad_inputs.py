"""Every error a user can cause with options, paths or data is one clear line, before any process
is spawned, naming the option or the file."""

from __future__ import annotations

import time

import pytest
import torch
from helpers import make_tiny_dataset

from ignite_r3net.cli import main


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """These run ``main`` in this process: hide any GPU of the host, as the subprocess tests do."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    train, _ = make_tiny_dataset(tmp_path_factory.mktemp("data"), n=4)
    return train


def _broken_sets(tmp):
    """Folders with one problem each."""
    empty = tmp / "empty"
    empty.mkdir()
    no_mask = tmp / "no_mask"
    no_mask.mkdir()
    from PIL import Image

    Image.new("RGB", (80, 80), "red").save(no_mask / "lonely.jpg")
    Image.new("RGB", (80, 80), "red").save(no_mask / "paired.jpg")
    Image.new("L", (80, 80)).save(no_mask / "paired.png")
    mismatch = tmp / "mismatch"
    mismatch.mkdir()
    Image.new("RGB", (80, 80), "red").save(mismatch / "a.jpg")
    Image.new("L", (81, 80)).save(mismatch / "a.png")
    return empty, no_mask, mismatch


def _cases(data, tmp):
    empty, no_mask, mismatch = _broken_sets(tmp)
    a_file = tmp / "a_file"
    a_file.write_text("x")
    with_ckpt = tmp / "with_ckpt"
    with_ckpt.mkdir()
    torch.save({"x": torch.zeros(1)}, with_ckpt / "checkpoint_4.pt")
    with_best = tmp / "with_best"
    with_best.mkdir()
    torch.save({"model": {"x": torch.zeros(1)}}, with_best / "best_model_4_maxF=0.5000.pt")
    two_ckpts = tmp / "two_ckpts"
    two_ckpts.mkdir()
    for it in (4, 8):
        torch.save({"x": torch.zeros(1)}, two_ckpts / f"checkpoint_{it}.pt")
    corrupt = tmp / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    wrong_weights = tmp / "vgg.pth"
    torch.save({"features.0.weight": torch.zeros(64, 3, 3, 3)}, wrong_weights)
    d = ["--data", str(data)]
    return [
        (["--iters", "0", *d], "--iters must be a positive integer"),
        (["--iters", "-3", *d], "--iters must be a positive integer"),
        (["--batch-size", "0", *d], "--batch-size must be a positive integer"),
        (["--batch-size", "1", *d], "--batch-size must be at least 2"),
        (["--batch-size", "3", "--nproc", "2", *d], "holds 4 pairs: too few for --batch-size 3 on 2 process(es)"),
        (["--lr", "0", *d], "--lr must be positive"),
        (["--lr", "-0.1", *d], "--lr must be positive"),
        (["--lr-power", "0", *d], "--lr-power must be positive"),
        (["--momentum", "1.5", *d], "--momentum must be in [0, 1)"),
        (["--weight-decay", "-0.1", *d], "--weight-decay must not be negative"),
        (["--dist-timeout", "0", *d], "--dist-timeout must be at least 1 second"),
        (["--master-port", "70000", *d], "--master-port must be a TCP port"),
        (["--crop", "0", *d], "--crop must be a positive integer"),
        (["--crop", "5000", *d], "crop 5000 is larger than every image"),
        (["--checkpoint-every", "0", *d], "--checkpoint-every must be a positive integer"),
        (["--keep", "0", *d], "--keep must be a positive integer"),
        (["--log-every", "0", *d], "--log-every must be a positive integer"),
        (["--rotate", "-5", *d], "--rotate must be between 0 and 180"),
        (["--workers", "-1", *d], "--workers"),
        (["--nproc", "0", *d], "--nproc must be a positive integer"),
        (["--nproc", "2", "--backend", "nccl", *d], "--backend nccl needs CUDA GPUs"),
        (["--nnodes", "2", "--node-rank", "2", *d], "--node-rank must be in [0, 1]"),
        (["--backbone", "vgg16", *d], "--backbone 'vgg16' is unknown; choose one of"),
        (["--pretrained", str(tmp / "none.pth"), *d], f"--pretrained {tmp / 'none.pth'}"),
        (["--pretrained", str(wrong_weights), *d], f"--pretrained {wrong_weights}: "),
        (["--pretrained", "IMAGENET_TYPO", *d], "--pretrained IMAGENET_TYPO: "),
        (["--resume", str(tmp / "missing.pt"), *d], f"--resume file {tmp / 'missing.pt'} does not exist"),
        (["--resume", str(corrupt), *d], f"cannot load checkpoint {corrupt}"),
        (["--output-dir", str(a_file / "out"), *d], f"--output-dir {a_file / 'out'}: {a_file} is not a folder"),
        (["--output-dir", str(with_ckpt), *d], "already holds checkpoints of a run"),
        (["--output-dir", str(with_best), *d], "already holds checkpoints of a run"),
        (
            ["--output-dir", str(two_ckpts), "--resume", str(two_ckpts / "checkpoint_4.pt"), *d],
            "also holds newer checkpoints (checkpoint_8.pt)",
        ),
        (
            ["--resume", str(with_best / "best_model_4_maxF=0.5000.pt"), *d],
            "is not a training checkpoint for this run: it lacks trainer, optimizer, lr_scheduler, loss_meter"
            " (best_model_* files hold weights only",
        ),
        (["--data", str(tmp / "nowhere")], str(tmp / "nowhere")),
        (["--data", str(empty)], "empty"),
        (["--data", str(no_mask)], "lonely.jpg"),
        (["--data", str(mismatch)], "a.png"),
        (["--val-data", str(tmp / "no_val"), *d], f"--val-data: data folder {tmp / 'no_val'} does not exist"),
    ]


def test_each_bad_input_is_one_clear_line_before_any_work(data, tmp_path, capsys):
    cases = _cases(data, tmp_path)
    for args, expected in cases:
        out = tmp_path / f"out{time.monotonic_ns()}"
        own_output_dir = "--output-dir" not in args
        for flag, value in (
            ("--output-dir", str(out)),
            ("--backbone", "resnet18"),
            ("--crop", "64"),
            ("--pretrained", "none"),
        ):
            if flag not in args:
                args = [*args, flag, value]
        code = main(args)
        err = capsys.readouterr().err.strip()
        assert code == 2, (args, err)
        assert err.startswith("error: ") and expected in err, (args, err)
        assert len(err.splitlines()) == 1 or "\n  " in err, (args, err)  # one line, or one line per file
        assert "Traceback" not in err
        assert not list(out.glob("**/checkpoint_*")) and not (out / "train.log").exists()
        if own_output_dir:
            assert not out.exists(), "a refused run leaves no empty output directory"
    print(f"{len(cases)} bad inputs tried")
    assert len(cases) >= 30


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--amp", "fp32"], "invalid choice"),
        (["--iters", "many"], "invalid int value"),
        (["--no-such-option"], "unrecognized arguments"),
        (["evalute", "--checkpoint", "x.pt"], "invalid choice: 'evalute'"),  # a typo is not a train option
        (["--checkpoint", "x.pt"], "unrecognized arguments: --checkpoint"),  # no prefix of --checkpoint-every
        # an option of another command: the help named is that of the command given
        (["evaluate", "--maps", "m", "--gt", "g", "--metrics", "maxF"], "(python run.py evaluate --help lists"),
    ],
)
def test_malformed_options_are_rejected_by_the_parser(args, expected, capsys):
    """One ``error:`` line naming the option and where the help is, as every other refusal; no usage block."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.startswith("error: ") and len(err.splitlines()) == 1, err


def test_check_data_reports_every_problem_by_file(tmp_path, capsys):
    _, no_mask, mismatch = _broken_sets(tmp_path)
    code = main(["check-data", str(no_mask), str(mismatch)])
    out = capsys.readouterr().out
    assert code == 1
    assert "lonely.jpg" in out and ("a.png" in out or "a.jpg" in out)


def test_check_data_on_a_good_set(data, capsys):
    assert main(["check-data", str(data)]) == 0
    assert "4 pairs, no problems" in capsys.readouterr().out


def test_other_commands_refuse_bad_inputs_in_one_line_before_any_work(data, tmp_path, capsys):
    from ignite_r3net.model.r3net import R3Net

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    checkpoint = tmp_path / "model.pt"
    torch.save(R3Net(backbone="resnet18").state_dict(), checkpoint)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(bytes(range(256)) * 8)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for p in data.iterdir():
        (corrupt / p.name).write_bytes(p.read_bytes())
    broken = sorted(corrupt.glob("*.jpg"))[1]
    broken.write_bytes(b"no longer a JPEG")
    ev = ["evaluate", "--checkpoint", str(checkpoint), "--workers", "0"]
    cases = [
        (["make-data", "--out", str(a_file)], f"--out {a_file} exists and is not a folder"),
        (["make-data", "--out", str(tmp_path / "d"), "--train", "0"], "--train must be at least 1"),
        (
            ["evaluate", "--checkpoint", str(garbage), "--data", str(data)],
            f"cannot load checkpoint {garbage}: it is not a readable PyTorch file",
        ),
        ([*ev, "--data", str(corrupt)], broken.name),
        (
            [*ev, "--data", str(data), "--json", str(a_file / "r.json")],
            f"--json {a_file / 'r.json'}: {a_file} is not a folder",
        ),
    ]
    for args, expected in cases:
        code = main(args)
        err = capsys.readouterr().err.strip()
        assert code == 2, (args, err)
        assert err.startswith("error: ") and expected in err and "Traceback" not in err, (args, err)
        assert len(err.splitlines()) == 1 or "\n  " in err, (args, err)
    assert not (tmp_path / "d").exists()
