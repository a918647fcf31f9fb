"""``--deterministic``, ``--tf32`` and where cuDNN autotunes: the settings a worker applies, R3Net
training under deterministic algorithms (whose CUDA backward of bilinear upsampling and adaptive
pooling would raise), and autotuning only for the fixed-size training crops, not for validation
or ``evaluate`` at native resolution. CPU only: what torch reports about CUDA is faked where needed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import TINY_TRAIN, make_tiny_dataset

from ignite_r3net import cli, numerics
from ignite_r3net.model.r3net import R3Net, resize_by_matmul

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def restored_flags(monkeypatch: pytest.MonkeyPatch):
    """Each test may change the process-wide flags (in-process runs set them): put them back."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    before = (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32)
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32 = before
    torch.use_deterministic_algorithms(deterministic)


def test_a_gpu_worker_autotunes_unless_deterministic():
    numerics.configure_training(torch.device("cuda", 0), deterministic=False, tf32=True)
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ

    numerics.configure_training(torch.device("cuda", 0), deterministic=True, tf32=False)
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_a_deterministic_cublas_setting_of_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    numerics.set_deterministic_environment()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")  # not deterministic
    numerics.set_deterministic_environment()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_inference_runs_without_autotuning_and_restores_the_settings():
    torch.backends.cudnn.benchmark = True
    numerics.set_tf32(True)
    with numerics.inference_numerics(tf32=False):
        assert not torch.backends.cudnn.benchmark
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.benchmark and torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32


def _refuse_atomic_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """What CUDA does under torch.use_deterministic_algorithms: these ops raise when differentiated."""
    for name in ("interpolate", "adaptive_avg_pool2d"):
        original = getattr(F, name)

        def refusing(x, *args, _original=original, _name=name, **kwargs):
            if x.requires_grad and torch.is_grad_enabled():
                raise RuntimeError(f"{_name} backward does not have a deterministic implementation")
            return _original(x, *args, **kwargs)

        monkeypatch.setattr(F, name, refusing)


def test_r3net_trains_under_deterministic_algorithms_with_the_same_gradients(monkeypatch):
    torch.manual_seed(0)
    model = R3Net("resnet18").train()
    x, target = torch.randn(2, 3, 64, 64), (torch.rand(2, 1, 64, 64) > 0.5).float()

    def gradients() -> list[torch.Tensor]:
        model.zero_grad()
        sum(F.binary_cross_entropy_with_logits(o, target) for o in model(x)).backward()
        return [p.grad.clone() for p in model.parameters()]

    usual = gradients()
    _refuse_atomic_backward(monkeypatch)
    with pytest.raises(RuntimeError, match="deterministic"):
        gradients()  # the stand-in works: the usual path would fail on a GPU
    torch.use_deterministic_algorithms(True)
    deterministic = gradients()
    for a, b in zip(usual, deterministic):
        torch.testing.assert_close(b, a, rtol=1e-2, atol=1e-4)  # float rounding of another order of sums


@pytest.mark.parametrize("size, to", [((10, 13), (75, 75)), ((1, 1), (19, 19)), ((38, 38), (75, 75)), ((7, 5), (7, 5))])
def test_resize_by_matmul_is_bilinear_with_aligned_corners(size, to):
    x = torch.randn(2, 3, *size, requires_grad=True)
    expected = F.interpolate(x, to, mode="bilinear", align_corners=True)
    got = resize_by_matmul(x, to)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    g = torch.randn_like(expected)
    torch.testing.assert_close(
        torch.autograd.grad(got, x, g)[0], torch.autograd.grad(expected, x, g)[0], atol=1e-4, rtol=0
    )


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_training_autotunes_and_its_validation_and_evaluate_do_not(tmp_path, monkeypatch):
    """A run with validation, then ``evaluate`` of its checkpoint, in this process; the worker's
    settings are those of a GPU (autotuning on), recorded at each forward pass of R3Net."""
    seen: list[tuple[bool, bool]] = []  # (training, autotuning) per forward
    forward = R3Net.forward

    def recording(self, x):
        seen.append((self.training, torch.backends.cudnn.benchmark))
        return forward(self, x)

    monkeypatch.setattr(R3Net, "forward", recording)
    as_on_gpu = numerics.configure_training

    def gpu_settings(device, deterministic, tf32):
        as_on_gpu(torch.device("cuda", 0), deterministic, tf32)

    monkeypatch.setattr("ignite_r3net.training.worker.configure_training", gpu_settings)
    train, val = make_tiny_dataset(tmp_path / "data", n=4, n_val=1)
    out = tmp_path / "run"
    args = ["--data", str(train), "--val-data", str(val), "--iters", "2", "--output-dir", str(out), *TINY_TRAIN]
    assert cli.main(args) == 0
    assert {autotuning for training, autotuning in seen if training} == {True}
    assert {autotuning for training, autotuning in seen if not training} == {False}  # validations
    assert torch.backends.cudnn.benchmark  # the run's setting, as a GPU worker keeps it

    seen.clear()
    evaluate = ["evaluate", "--checkpoint", str(out / "checkpoint_2.pt"), "--data", str(val), "--workers", "0"]
    assert cli.main([*evaluate, "--no-progress"]) == 0
    assert seen and {autotuning for _, autotuning in seen} == {False}


def test_deterministic_and_tf32_are_recorded_in_config_json(tmp_path: Path):
    train, _ = make_tiny_dataset(tmp_path / "data", n=4, n_val=0)
    out = tmp_path / "run"
    args = ["--data", str(train), "--iters", "1", "--output-dir", str(out), *TINY_TRAIN]
    assert cli.main([*args, "--deterministic", "--tf32", "off"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["deterministic"] is True and saved["tf32"] == "off"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # set before any worker started
