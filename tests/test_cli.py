"""The command line imports only what the chosen command needs: ``--help`` needs no torch, and the
process that launches training (checks, then spawns) none of the workers' heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO, cpu_env, make_tiny_dataset

# what the workers import and the launching process must not: each costs it a second or more
WORKER_ONLY = ("torchvision", "torch._dynamo", "scipy", "tensorboard", "matplotlib", "onnx")


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter started in the repository (it imports this checkout's package)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=cpu_env(), capture_output=True, text=True, timeout=120
    )


def test_options_and_help_import_no_torch() -> None:
    code = (
        "import sys\n"
        "from ignite_r3net import cli\n"
        "cli.build_parser()\n"
        "print([m for m in ('torch', 'torchvision', 'scipy', 'ignite', 'numpy') if m in sys.modules])\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    for args in (["--help"], ["train", "--help"]):
        proc = subprocess.run(
            [sys.executable, "run.py", *args], cwd=REPO, env=cpu_env(), capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert "usage: python run.py" in proc.stdout


def test_data_commands_import_no_torch(tmp_path) -> None:
    """``make-data`` and ``check-data`` (the quick start's first step) need only PIL and numpy."""
    code = (
        "import sys\n"
        "from ignite_r3net import cli\n"
        "assert cli.main(sys.argv[1:]) == 0 and cli.main(['check-data', sys.argv[3] + '/train']) == 0\n"
        "print([m for m in ('torch', 'torchvision', 'scipy', 'ignite') if m in sys.modules])\n"
    )
    proc = _python(code, "make-data", "--out", str(tmp_path), "--train", "4", "--val", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
    assert len(list((tmp_path / "train").glob("*.png"))) == 4


@pytest.mark.slow
def test_training_launcher_imports_nothing_only_workers_need(tmp_path) -> None:
    """``python run.py --nproc 2 ...`` up to the spawn: the checks run, the worker function and the
    config are pickled as spawning does, and no worker-only package is imported."""
    train, _ = make_tiny_dataset(tmp_path / "data", n=4)
    code = (
        "import json, pickle, sys\n"
        "from ignite_r3net import cli\n"
        "import ignite_r3net.training.start\n"
        "seen = {}\n"
        "def launch(fn, arg, spec):\n"
        "    pickle.dumps((fn, arg))\n"
        f"    seen.update(fn=fn.__qualname__, heavy=[m for m in {WORKER_ONLY!r} if m in sys.modules])\n"
        "sys.modules['ignite_r3net.training.start'].launch = launch\n"
        "code = cli.main(sys.argv[1:])\n"
        "print(json.dumps({'code': code, **seen}))\n"
    )
    args = ["--nproc", "2", "--pretrained", "none", "--backbone", "resnet18", "--crop", "32", "--batch-size", "2"]
    proc = _python(code, *args, "--data", str(train), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"code": 0, "fn": "train_worker", "heavy": []}
