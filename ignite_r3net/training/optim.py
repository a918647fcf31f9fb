"""The reference DDP script's optimiser recipe: SGD with biases at 2x LR and no weight decay, poly LR decay."""

from __future__ import annotations

import warnings
from typing import cast

import torch
from ignite.handlers import LRScheduler
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from ..config import TrainConfig

GROUP_NAMES = ("biases", "weights")  # build_optimizer's parameter groups, in order (TensorBoard's lr/<name>)


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.SGD:
    """SGD with two parameter groups: [0] biases (2x lr, no decay), [1] the rest (lr, weight decay)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    biases = [p for n, p in named if n.endswith("bias")]
    others = [p for n, p in named if not n.endswith("bias")]
    return torch.optim.SGD(
        [
            {"params": biases, "lr": 2 * config.lr, "weight_decay": 0.0},
            {"params": others, "lr": config.lr, "weight_decay": config.weight_decay},
        ],
        lr=config.lr,
        momentum=config.momentum,
    )


class PolyFactor:
    """``(1 - step / iters) ** power``: the poly decay factor after ``step`` scheduler steps."""

    def __init__(self, iters: int, power: float) -> None:
        self.iters, self.power = iters, power

    def __call__(self, step: int) -> float:
        return max(0.0, 1 - step / self.iters) ** self.power


def build_poly_lr(optimizer: torch.optim.Optimizer, config: TrainConfig) -> LRScheduler:
    """The reference's ``lr_i = base * (1 - (i - 1) / iters) ** power`` (i from 1): ``LambdaLR``'s closed form
    (a chained ``PolynomialLR`` drifts under ignite), ``use_legacy``: the call after iteration i sets lr_{i+1}."""
    with warnings.catch_warnings():
        # ignite warns that use_legacy needs ITERATION_COMPLETED, where engine.attach_poly_lr puts it
        warnings.filterwarnings("ignore", message="Please make sure to attach scheduler")
        return LRScheduler(LambdaLR(optimizer, lr_lambda=PolyFactor(config.iters, config.lr_power)), use_legacy=True)


def learning_rates(scheduler: LRScheduler, iteration: int) -> dict[str, float]:
    """Each group's rate at ``iteration``, by name, from the closed form (the handler set the next one's)."""
    poly = cast(LambdaLR, scheduler.lr_scheduler)
    return {
        name: float(base) * factor(iteration - 1)
        for name, base, factor in zip(GROUP_NAMES, poly.base_lrs, poly.lr_lambdas)
    }
