"""The accumulation tests' model, batches and training (tests/test_clusters.py), and the body of the ranks that
``test_two_processes_x_2_x_accumulate_2_equal_one_process_x_4_x_accumulate_2`` spawns: in a module of their own, as
light as they need, because each spawned rank imports the module of the function it runs (the test module imports
the whole command line, the Engine, torchvision: 0.7 s of CPU more for each rank)."""

from __future__ import annotations

import ignite.distributed as idist
import torch
from torch import nn

from ignite_r3net.training.step import create_train_step


class NoBatchNorm(nn.Module):
    """Seven side outputs from one convolution: a model whose gradient does not depend on how a batch is split."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 7, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv(x)
        return tuple(y[:, i : i + 1] for i in range(7))


def images(count: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "image": torch.randint(0, 256, (count, 3, 8, 8), generator=g, dtype=torch.uint8),
        "mask": torch.randint(0, 256, (count, 1, 8, 8), generator=g, dtype=torch.uint8),
        "angle": torch.zeros(count),
    }


def part(batch: dict[str, torch.Tensor], positions: list[int]) -> dict[str, torch.Tensor]:
    return {k: v[positions] for k, v in batch.items()}


def train(micro_batches_per_step: list[list[dict]], scaler: bool = False, model: nn.Module | None = None) -> dict:
    torch.manual_seed(0)
    net = NoBatchNorm()
    trained = model(net) if model is not None else net
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    grad_scaler = torch.amp.GradScaler("cpu") if scaler else None
    no_sync = getattr(trained, "no_sync", None)
    step = create_train_step(trained, optimizer, torch.device("cpu"), scaler=grad_scaler, no_sync=no_sync)
    engine = type("E", (), {})()
    for micro_batches in micro_batches_per_step:
        step(engine, micro_batches)  # type: ignore[arg-type]
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def ddp_worker(local_rank: int, out: str) -> None:
    """2 processes x 2 images x 2 accumulated, under DDP (whose no_sync the step uses): rank r's micro-batch m
    of each 8-image step holds the step's positions m * 4 + r + 2 * j, as ``StepStream`` lays them out. DDP's
    all-reduces are counted by a communication hook that all-reduces as DDP does by default."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    rank, world = idist.get_rank(), idist.get_world_size()
    steps = [images(8, seed) for seed in range(2)]
    mine = [[part(b, [m * 4 + rank + world * j for j in range(2)]) for m in range(2)] for b in steps]
    allreduces: list[int] = []

    def counted(net: nn.Module) -> nn.Module:
        ddp = nn.parallel.DistributedDataParallel(net)
        ddp.register_comm_hook(
            None, lambda group, bucket: allreduces.append(bucket.index()) or allreduce_hook(group, bucket)
        )
        return ddp

    weights = train(mine, model=counted)
    if rank == 0:
        torch.save({"weights": weights, "allreduces": allreduces}, out)
