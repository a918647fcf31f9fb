"""The training Engine that ``create_trainer`` builds from a ``TrainConfig``, run in this process on
generated data: ``--amp`` and ``--channels-last`` reach the step's convolutions, and a few
iterations make the loss fall."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import make_tiny_dataset, plan_of, training_conv_outputs
from ignite.engine import Engine, Events

from ignite_r3net.config import TrainConfig
from ignite_r3net.data.loader import build_train_stream
from ignite_r3net.data.step_stream import StepStream
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.training.engine import create_trainer
from ignite_r3net.training.optim import build_optimizer, build_poly_lr
from ignite_r3net.training.train_log import TrainLog
from ignite_r3net.training.worker import train_data

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("data"), n=16, n_val=0)[0]


def build_trainer(config: TrainConfig) -> tuple[Engine, StepStream]:
    """The Engine ``training()`` runs on one process (no validation), and its stream of steps."""
    plan = plan_of(config)
    stream = build_train_stream(train_data(plan), plan.layout)
    torch.manual_seed(config.seed)
    # left in its default layout: training() converts it for --channels-last, the step its input
    model = R3Net(config.backbone)
    optimizer = build_optimizer(model, config)
    log = TrainLog(Path(config.output_dir) / "train.log", console=False)
    parts = create_trainer(model, optimizer, build_poly_lr(optimizer, config), stream, log, plan, torch.device("cpu"))
    return parts.trainer, stream


def run_trainer(config: TrainConfig, iters: int) -> list[float]:
    """Train ``iters`` iterations (no checkpoints, no validation); the total loss of each iteration."""
    trainer, stream = build_trainer(config)
    losses: list[float] = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: losses.append(float(e.state.output[0])))
    trainer.run(stream, max_iters=iters, epoch_length=len(stream))
    return losses


def _config(train_dir: Path, out: Path, **options) -> TrainConfig:
    out.mkdir()
    return TrainConfig(data=str(train_dir), output_dir=str(out), backbone="resnet18", crop=32, workers=0, **options)


@pytest.mark.parametrize("amp, channels_last", [("off", False), ("bf16", False), ("off", True), ("bf16", True)])
def test_amp_and_channels_last_reach_the_training_step(train_dir, tmp_path, amp, channels_last):
    config = _config(train_dir, tmp_path / "out", batch_size=2, iters=1, amp=amp, channels_last=channels_last)
    with training_conv_outputs() as outputs:
        run_trainer(config, iters=1)
    assert len(outputs) > 20
    assert {o.dtype for o in outputs} == {torch.bfloat16 if amp == "bf16" else torch.float32}
    # the stem's output has the layout of the step's input (the other layers' depends on the
    # model's, which test_speed_options.py checks through the command line)
    stem = outputs[0]
    assert stem.shape[1:] == (64, 16, 16)
    assert stem.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert stem.is_contiguous() != channels_last


# about 2.5 s, kept in the fast tier on purpose: the one check there that the recipe learns at all
def test_a_few_iterations_make_the_loss_fall(train_dir, tmp_path):
    """16 iterations of 8 generated images from random weights: the mean total loss (7 BCE terms,
    about 7 x ln 2 = 4.85 untrained) of the last 4 iterations is well below that of the first 4.
    Deterministic for a given CPU; the ratio is 0.61 here and was 0.53-0.69 with other seeds of the
    model and the data."""
    config = _config(train_dir, tmp_path / "out", batch_size=8, iters=16, lr=0.002, rotate=0.0)
    losses = run_trainer(config, iters=16)
    assert len(losses) == 16 and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert 4 < first < 6, first  # an untrained model's loss: the check below starts from it
    assert last < 0.8 * first, (first, last, losses)


def test_the_design_cards_handlers_come_first_in_its_order(train_dir, tmp_path):
    """After each iteration: the poly LR (so a checkpoint holds the next rate), the loss meters, the
    log line that reads them, then the checkpoint; the rest (validation, loggers, ...) after them."""
    from ignite.handlers import Checkpoint, LRScheduler

    trainer, _ = build_trainer(_config(train_dir, tmp_path / "out", batch_size=2, iters=1))
    handlers = [h for h, *_ in trainer._event_handlers[Events.ITERATION_COMPLETED]]
    assert isinstance(handlers[0], LRScheduler)
    assert [getattr(h, "__name__", None) for h in handlers[1:4]] == ["update_meter", "sync_meter", "write_log_line"]
    assert isinstance(getattr(handlers[4], "__wrapped__", handlers[4]), Checkpoint)


@pytest.mark.slow
def test_every_rank_makes_the_same_collectives_at_the_same_iterations(train_dir, tmp_path, monkeypatch):
    """The handlers that run collectives (the loss meters, the damaged-image counter) are attached on every rank
    by construction: rank 1, whose rank-0-only work (log file, TensorBoard, progress) is skipped, makes the very
    collectives rank 0 makes, at the same iterations. A rank-0-only attachment of such a handler would leave
    rank 0 waiting for its peers: this sequence would then differ."""
    import ignite.distributed as idist
    import ignite.distributed.utils as idist_utils

    made: dict[int, list[str]] = {}

    def counting(real, name: str, calls: list[str]):
        return lambda *args, **kwargs: calls.append(name) or real(*args, **kwargs)

    for rank in (0, 1):
        calls: list[str] = made.setdefault(rank, [])
        monkeypatch.setattr(idist_utils, "get_rank", lambda rank=rank: rank)
        for name in ("all_reduce", "all_gather", "broadcast", "barrier"):
            monkeypatch.setattr(idist, name, counting(getattr(idist_utils, name), name, calls))
        config = _config(train_dir, tmp_path / f"rank{rank}", batch_size=2, iters=4, log_every=2, checkpoint_every=3)
        trainer, stream = build_trainer(config)
        trainer.add_event_handler(
            Events.ITERATION_STARTED, lambda e, calls=calls: calls.append(f"it {e.state.iteration}")
        )
        trainer.run(stream, max_iters=config.iters, epoch_length=len(stream))
    assert made[0] == made[1]
    synced = [made[0][i - 1] for i, call in enumerate(made[0]) if call == "all_reduce" and i > 0]
    assert "it 2" in synced and "it 3" in synced and "it 1" not in synced  # logged at 2 and 4, saved at 3
    assert (tmp_path / "rank0" / "checkpoint_3.pt").is_file() and not (tmp_path / "rank1" / "checkpoint_3.pt").exists()
