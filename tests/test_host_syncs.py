"""With ``--log-every N`` the iterations between two log lines make no host sync: the augmentation
copies the angles to the device without waiting for it, and the loss meters and the damaged-image
counter read values to the host only at the logged iterations. On the CPU, a host sync is seen as
what causes it on a GPU: a blocking copy to the device, or a tensor read to the host (``item``,
``tolist``, ``bool``, ...). ``benchmarks/gpu_check.py`` checks the same on a GPU with
``torch.cuda.set_sync_debug_mode("error")``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import make_tiny_dataset, plan_of
from ignite.engine import Events
from torch.overrides import TorchFunctionMode

from ignite_r3net.config import TrainConfig
from ignite_r3net.data.loader import build_train_stream
from ignite_r3net.data.transforms import DeviceAugment
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.training import engine as engine_module
from ignite_r3net.training.bad_images import BadImages
from ignite_r3net.training.optim import build_optimizer, build_poly_lr
from ignite_r3net.training.step import prepare_batch
from ignite_r3net.training.train_log import TrainLog
from ignite_r3net.training.worker import train_data

pytestmark = pytest.mark.timeout(120)

HOST_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy"}


class _Recorder(TorchFunctionMode):
    """Calls to ``Tensor.to`` with their arguments, and host reads, each with the tag of the moment."""

    def __init__(self) -> None:
        super().__init__()
        self.tag: Any = None
        self.copies: list[tuple[Any, tuple, dict]] = []
        self.reads: list[tuple[Any, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "to":
            self.copies.append((args[0], args[1:], kwargs))
        elif name in HOST_READS and self.tag is not None:
            self.reads.append((self.tag, name))
        return func(*args, **kwargs)


def _moves_to_a_device(args: tuple, kwargs: dict) -> bool:
    return "device" in kwargs or any(isinstance(a, (torch.device, str)) for a in args)


def _non_blocking(args: tuple, kwargs: dict) -> bool:
    return bool(kwargs.get("non_blocking", any(a is True for a in args)))


def test_the_augmentation_copies_the_batch_to_the_device_without_waiting():
    batch = {
        "image": torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8),
        "mask": torch.randint(0, 256, (2, 1, 16, 16), dtype=torch.uint8),
        "angle": torch.tensor([5.0, -3.0]),
    }
    with _Recorder() as recorder:
        prepare_batch(batch, torch.device("cpu"), DeviceAugment())
    to_device = [(t, a, k) for t, a, k in recorder.copies if _moves_to_a_device(a, k)]
    angles = [(a, k) for t, a, k in to_device if t is batch["angle"]]
    assert angles, "the rotation moves the angles to the device"
    assert all(_non_blocking(a, k) for _, a, k in to_device), to_device


def test_handlers_read_the_device_only_at_logged_iterations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The trainer ``training()`` builds (loss meters, damaged-image counter, poly LR, log, progress,
    TensorBoard), its step replaced by one that returns losses: with ``--log-every 3`` over 7
    iterations, the only host reads and counter syncs are at iterations 3, 6 and 7 (the last)."""
    train, _ = make_tiny_dataset(tmp_path / "data", n=16, n_val=0)
    config = TrainConfig(
        data=[str(train)], output_dir=str(tmp_path / "out"), backbone="resnet18", crop=32, batch_size=2,
        workers=0, iters=7, log_every=3, checkpoint_every=100, progress=False,
    )  # fmt: skip
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(engine_module, "create_train_step", lambda *a, **k: lambda engine, batch: torch.full((8,), 0.5))
    counter_syncs: list[int] = []
    sync = BadImages.sync
    monkeypatch.setattr(BadImages, "sync", lambda self: counter_syncs.append(recorder.tag) or sync(self))

    plan = plan_of(config)
    stream = build_train_stream(train_data(plan), plan.layout)
    model = R3Net(config.backbone)
    optimizer = build_optimizer(model, config)
    log = TrainLog(Path(config.output_dir) / "train.log", console=False)
    parts = engine_module.create_trainer(
        model, optimizer, build_poly_lr(optimizer, config), stream, log, plan, torch.device("cpu")
    )
    recorder = _Recorder()
    trainer = parts.trainer

    # the tag is the iteration from the batch in hand to the next fetch (the DataLoader's own work,
    # done in its worker processes in a real run, is left out)
    @trainer.on(Events.GET_BATCH_STARTED)
    def untag(_):
        recorder.tag = None

    @trainer.on(Events.GET_BATCH_COMPLETED)
    def tag(engine):
        recorder.tag = engine.state.iteration + 1

    with recorder:
        trainer.run(stream, max_iters=config.iters, epoch_length=len(stream))
    assert {it for it, _ in recorder.reads} == {3, 6, 7}, recorder.reads
    assert counter_syncs == [3, 6, 7]
