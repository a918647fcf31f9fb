"""Test-wide settings: no test may reach the network for weights (the CI machine has none). Session
fixtures for what several test files need and is slow to make: one 2-process training run as a
user starts it (``reference_run``), one exported model per format (an ONNX export takes ~15 s)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest

# weights come from local files or --pretrained none; a test that forgets fails at once instead of
# waiting on a download (child processes inherit these)
os.environ["HF_HUB_OFFLINE"] = "1"
# CPU and gloo only, also for the commands the tests run in this process with ``cli.main``
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TORCH_HOME", str(Path(__file__).resolve().parent / ".no-torch-cache"))
# the data scan cache (data/checks.py) of the tests' data sets: not the user's ~/.cache
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ignite_r3net-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)


# what makes a test slow besides starting processes of its own (marked where they are written)
SLOW_FIXTURES = {"reference_run", "exported_onnx"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs the reference run (~20 s) or the ONNX export (~15 s) is slow."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


class Run(NamedTuple):
    """A finished ``python run.py`` training run: its output folder and what it printed."""

    out: Path
    train: Path
    val: Path
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def reference_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """12 training pairs and one validation pair (see ``helpers.reference_args``)."""
    from helpers import make_tiny_dataset

    return make_tiny_dataset(tmp_path_factory.mktemp("reference-data"), n=12, n_val=1)


@pytest.fixture(scope="session")
def reference_run(reference_data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``python run.py --nproc 2 ...`` in a real process, exactly as a user starts training; the
    training, resume, fine-tuning and launcher tests compare against it."""
    from helpers import reference_args, run_cli

    train, val = reference_data
    out = tmp_path_factory.mktemp("reference-run")
    return Run(out, train, val, run_cli(reference_args(train, val, out), timeout=240))


@pytest.fixture(scope="session")
def spread_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A resnet18 ``best_model_*`` file whose maps span 0..1 (see ``helpers.save_spread_r3net``)."""
    from helpers import save_spread_r3net

    return save_spread_r3net(tmp_path_factory.mktemp("spread") / "best_model_1_maxF=0.5000.pt")


def _export(checkpoint: Path, fmt: str, output: Path) -> Path:
    from ignite_r3net import cli

    assert cli.main(["export", "--checkpoint", str(checkpoint), "--format", fmt, "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="session")
def exported_onnx(spread_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``spread_checkpoint`` exported by the CLI as ONNX."""
    return _export(spread_checkpoint, "onnx", tmp_path_factory.mktemp("onnx") / "r3net.onnx")


@pytest.fixture(scope="session")
def exported_torchscript(spread_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``spread_checkpoint`` exported by the CLI as TorchScript."""
    return _export(spread_checkpoint, "torchscript", tmp_path_factory.mktemp("torchscript") / "r3net.pt")
