"""The recipe of the reference DDP script, piece by piece, against numbers written from its formulas:
the poly LR through ignite's Engine (before and after a resume), the SGD parameter groups, the 7
side-output BCE losses, the loss meter across ranks and the sampler position after a resume.
No process is started: these run in the fast tier and catch an off-by-one that only a multi-process
run would otherwise show."""

from __future__ import annotations

import io
import math

import pytest
import torch
from helpers import ThreadWorld
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ignite_r3net.config import TrainConfig
from ignite_r3net.data.sampler import ResumableDistributedSampler
from ignite_r3net.data.step_stream import StepStream
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.training.engine import attach_poly_lr
from ignite_r3net.training.meters import LossMeter
from ignite_r3net.training.optim import build_optimizer, build_poly_lr
from ignite_r3net.training.step import side_output_losses

RECIPE = TrainConfig()  # iters 8000, lr 1e-3, power 0.9, momentum 0.9, weight decay 5e-4
RESUME_AT = 4123  # a checkpoint in the middle of an epoch of 100 iterations


def _through_a_checkpoint(state: dict) -> dict:
    """``state`` as a resumed run reads it: saved and loaded as the checkpoint files are."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=True)


def _poly_trainer(config: TrainConfig) -> tuple[Engine, dict, dict[int, tuple[float, float]]]:
    """An Engine with the run's optimiser and poly LR attached as ``create_trainer`` does; records
    the (bias, weight) learning rates each iteration trains with."""
    model = nn.Conv2d(3, 4, 3)  # one weight, one bias: one parameter in each group
    optimizer = build_optimizer(model, config)
    scheduler = build_poly_lr(optimizer, config)
    lrs: dict[int, tuple[float, float]] = {}

    def step(engine: Engine, batch: int) -> None:
        lrs[engine.state.iteration] = (optimizer.param_groups[0]["lr"], optimizer.param_groups[1]["lr"])

    trainer = Engine(step)
    attach_poly_lr(trainer, scheduler)
    return trainer, {"trainer": trainer, "optimizer": optimizer, "lr_scheduler": scheduler}, lrs


def test_poly_lr_at_the_first_second_and_last_iteration_and_after_a_resume():
    """``lr_i = base * (1 - (i - 1) / iters) ** power`` for 1-based iteration i, biases at twice
    the base, as in the reference DDP script; a resumed run continues the schedule where it was."""
    data = range(100)
    trainer, to_save, lrs = _poly_trainer(RECIPE)
    saved = {}
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=RESUME_AT),
        lambda _: saved.update(_through_a_checkpoint({k: v.state_dict() for k, v in to_save.items()})),
    )
    trainer.run(data, max_iters=RECIPE.iters)

    expected = {
        1: 1e-3,  # 1e-3 * (1 - 0 / 8000) ** 0.9
        2: 1e-3 * (1 - 1 / 8000) ** 0.9,
        3: 1e-3 * (1 - 2 / 8000) ** 0.9,
        8000: 1e-3 * (1 - 7999 / 8000) ** 0.9,  # the last iteration still trains (lr > 0)
        RESUME_AT + 1: 1e-3 * (1 - 4123 / 8000) ** 0.9,
    }
    assert sorted(lrs) == list(range(1, 8001))
    for iteration, lr in expected.items():
        assert lrs[iteration] == (pytest.approx(2 * lr, rel=1e-12), pytest.approx(lr, rel=1e-12)), iteration

    resumed, to_load, resumed_lrs = _poly_trainer(RECIPE)
    Checkpoint.load_objects(to_load=to_load, checkpoint=saved)
    resumed.run(data)
    assert sorted(resumed_lrs) == list(range(RESUME_AT + 1, 8001))
    for iteration in (RESUME_AT + 1, RESUME_AT + 2, 8000):
        lr = 1e-3 * (1 - (iteration - 1) / 8000) ** 0.9
        assert resumed_lrs[iteration] == (pytest.approx(2 * lr, rel=1e-12), pytest.approx(lr, rel=1e-12))


def test_biases_train_at_twice_the_lr_without_weight_decay():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1, bias=False), nn.Linear(2, 3))
    biases = [model[0].bias, model[1].bias, model[3].bias]
    weights = [model[0].weight, model[1].weight, model[2].weight, model[3].weight]
    optimizer = build_optimizer(model, RECIPE)
    bias_group, weight_group = optimizer.param_groups
    assert [id(p) for p in bias_group["params"]] == [id(p) for p in biases]
    assert [id(p) for p in weight_group["params"]] == [id(p) for p in weights]
    assert (bias_group["lr"], bias_group["weight_decay"], bias_group["momentum"]) == (2e-3, 0.0, 0.9)
    assert (weight_group["lr"], weight_group["weight_decay"], weight_group["momentum"]) == (1e-3, 5e-4, 0.9)

    # what the groups do: with zero gradients, a step shrinks the weights by lr * weight decay and
    # leaves the biases where they are
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    after = dict(zip(map(id, model.parameters()), before))
    for b in biases:
        assert torch.equal(b.detach(), after[id(b)])
    for w in weights:
        torch.testing.assert_close(w.detach().double(), after[id(w)].double() * (1 - 1e-3 * 5e-4), rtol=1.5e-7, atol=0)


def test_every_r3net_parameter_is_in_one_group_biases_in_the_first():
    model = R3Net("resnet18")
    optimizer = build_optimizer(model, RECIPE)
    bias_ids = {id(m.bias) for m in model.modules() if getattr(m, "bias", None) is not None}
    groups = [{id(p) for p in g["params"]} for g in optimizer.param_groups]
    assert groups[0] == bias_ids and len(bias_ids) > 20
    assert groups[0] | groups[1] == {id(p) for p in model.parameters()} and not groups[0] & groups[1]


def _bce_with_logits(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of ``sigmoid(logits)`` against ``target``, in float64."""
    p = 1 / (1 + torch.exp(-logits.double()))
    t = target.double()
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_side_output_losses_are_seven_bce_against_the_mask(dtype):
    g = torch.Generator().manual_seed(0)
    masks = torch.rand(2, 1, 9, 11, generator=g)
    masks[0] = (masks[0] > 0.5).float()  # a binary mask and a soft one (rotation blends the edges)
    outputs = tuple((torch.randn(2, 1, 9, 11, generator=g) * (i + 1)).to(dtype) for i in range(7))
    losses = side_output_losses(outputs, masks)
    expected = torch.stack([_bce_with_logits(o, masks) for o in outputs])
    assert losses.shape == (7,) and losses.dtype == torch.float32
    torch.testing.assert_close(losses.double(), expected, rtol=2e-6, atol=0)


def _meter_after(updates: list[torch.Tensor], start: dict | None = None) -> LossMeter:
    meter = LossMeter()
    if start is not None:
        meter.load_state_dict(start)
    first = 1 if start is None else 3
    for iteration, losses in enumerate(updates, first):
        meter.update(losses, batch_size=2, iteration=iteration)
    return meter


def _saved_after(updates: list[torch.Tensor]) -> dict:
    """What a checkpoint holds of the meter after ``updates``: saved after its last iteration's sync."""
    meter = _meter_after(updates)
    meter.sync(iteration=len(updates))
    return meter.state_dict()


def test_the_meter_is_saved_without_a_collective_only_where_it_synced(monkeypatch):
    """A checkpoint holds the sums the iteration's sync read: saving needs no peer (rank 0 may save alone), and
    an iteration no sync read is refused instead of saving one rank's sums as the global ones."""
    world = ThreadWorld(monkeypatch)
    rank0, rank1 = [_losses(1, 2, 3, 4, 5, 6, 7)], [_losses(3, 3, 3, 3, 3, 3, 3)]
    meters = world.run(lambda: _meter_after(rank0), lambda: _meter_after(rank1))
    world.run(lambda: meters[0].sync(iteration=1), lambda: meters[1].sync(iteration=1))
    import ignite_r3net.training.meters as meters_module

    monkeypatch.setattr(meters_module, "all_reduce_tensor", lambda *a, **k: pytest.fail("a collective in state_dict"))
    saved = meters[0].state_dict()  # rank 0 alone
    assert saved["count"].item() == 4 and saved["sums"][1].item() == 2 * (1 + 3)
    meters[0].update(_losses(0, 0, 0, 0, 0, 0, 0), batch_size=2, iteration=2)
    with pytest.raises(RuntimeError, match="iteration 2, which no sync read"):
        meters[0].state_dict()


def _losses(*values: float) -> torch.Tensor:
    """total, loss0..loss6 of one iteration: ``values`` and the total their sum."""
    return torch.tensor([sum(values), *values])


def test_loss_meter_averages_over_every_rank_and_iteration(monkeypatch):
    world = ThreadWorld(monkeypatch)
    rank0 = [_losses(1, 2, 3, 4, 5, 6, 7), _losses(3, 2, 1, 0, 1, 2, 3)]
    rank1 = [_losses(5, 6, 7, 8, 9, 10, 11), _losses(7, 6, 5, 4, 3, 2, 1)]
    readings = world.run(lambda: _meter_after(rank0).sync(iteration=1), lambda: _meter_after(rank1).sync(iteration=1))
    for reading in readings:  # every rank reads the same numbers
        assert reading.images == 8 and reading.first_nonfinite_iteration is None
        assert reading.averages["loss0"] == (1 + 3 + 5 + 7) / 4
        assert reading.averages["loss3"] == (4 + 0 + 8 + 4) / 4
        assert reading.averages["loss6"] == (7 + 3 + 11 + 1) / 4
        assert reading.averages["total"] == (28 + 12 + 56 + 28) / 4

    # resumed after these two iterations (rank 0 carries the saved sums), a third iteration gives
    # the average of all three
    states = world.run(lambda: _saved_after(rank0), lambda: _saved_after(rank1))
    assert torch.equal(states[0]["sums"], states[1]["sums"])
    third = [_losses(0, 0, 0, 0, 0, 0, 0)], [_losses(6, 6, 6, 6, 6, 6, 6)]
    readings = world.run(
        lambda: _meter_after(third[0], start=states[0]).sync(iteration=1),
        lambda: _meter_after(third[1], start=states[1]).sync(iteration=1),
    )
    for reading in readings:
        assert reading.images == 12
        assert reading.averages["loss0"] == (1 + 3 + 5 + 7 + 0 + 6) / 6
        assert reading.averages["total"] == (28 + 12 + 56 + 28 + 0 + 42) / 6


def test_a_non_finite_loss_on_one_rank_stops_every_rank_at_the_same_iteration(monkeypatch):
    """Rank 1's loss4 is NaN at iteration 2, rank 0's loss0 infinite at iteration 3: both ranks
    name iteration 2 and its outputs, so all stop together."""
    world = ThreadWorld(monkeypatch)
    good = _losses(1, 1, 1, 1, 1, 1, 1)
    rank0 = [good, good, _losses(math.inf, 1, 1, 1, 1, 1, 1)]
    rank1 = [good, _losses(1, 1, 1, 1, math.nan, 1, 1), good]
    readings = world.run(lambda: _meter_after(rank0).sync(iteration=1), lambda: _meter_after(rank1).sync(iteration=1))
    for reading in readings:
        assert reading.first_nonfinite_iteration == 2
        assert reading.nonfinite_outputs == ["total", "loss4"]


class _Keys(Dataset):
    """12 samples; each is its own index, to see which samples an iteration trained on."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, key: tuple[int, int]) -> int:
        return key[0]


def _sampler_run(iters: int, state: dict | None = None) -> tuple[dict[int, list[int]], dict]:
    """Rank 0 of 2, batch 2 (3 iterations per epoch): the indices of each iteration, and the
    trainer's state after iteration 4 (in the middle of the second epoch)."""
    sampler = ResumableDistributedSampler(12, num_replicas=2, rank=0, seed=2018, batch_size=2)
    loader = DataLoader(_Keys(), batch_size=2, sampler=sampler, drop_last=True)
    stream = StepStream(loader, sampler, accumulate=1, global_batch=4)
    seen: dict[int, list[int]] = {}
    trainer = Engine(lambda engine, batches: seen.__setitem__(engine.state.iteration, batches[0].tolist()))
    saved: dict = {}
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=4),
        lambda e: saved.update(_through_a_checkpoint({"trainer": e.state_dict(), "sampler": stream.state_dict()})),
    )
    if state is None:
        trainer.run(stream, max_iters=iters, epoch_length=len(stream))
    else:
        Checkpoint.load_objects(to_load={"trainer": trainer, "sampler": stream}, checkpoint=state)
        trainer.run(stream)
    return seen, saved


def test_a_resumed_epoch_continues_at_the_next_batch():
    """Each iteration's samples are those of ``DistributedSampler`` (the reference DDP script's) for
    that epoch and position, also when the run resumes from a checkpoint in the middle of an epoch."""
    reference = DistributedSampler(range(12), num_replicas=2, rank=0, shuffle=True, seed=2018)
    expected = {}
    for epoch in range(3):
        reference.set_epoch(epoch)
        order = list(reference)
        for b in range(3):
            expected[3 * epoch + b + 1] = order[2 * b : 2 * b + 2]
    uninterrupted, state = _sampler_run(8)
    assert uninterrupted == {i: expected[i] for i in range(1, 9)}
    assert state["trainer"]["iteration"] == 4
    assert state["sampler"] == {"epoch": 1, "step": 1, "position": 4, "global_batch": 4}
    resumed, _ = _sampler_run(8, state=state)
    assert resumed == {i: expected[i] for i in range(5, 9)}
