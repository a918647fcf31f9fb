"""Test-wide settings: no test may reach the network for weights (the CI machine has none); one
exported model per format, shared by the tests that need one (an ONNX export takes ~15 s of CPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# weights come from local files or --pretrained none; a test that forgets fails at once instead of
# waiting on a download (child processes inherit these)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TORCH_HOME", str(Path(__file__).resolve().parent / ".no-torch-cache"))


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
