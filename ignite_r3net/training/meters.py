"""Running averages of the 7 side-output losses and their sum over all ranks, updated on the device and
read by one all-reduce (``sync``); saving the meter needs no collective."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..distributed.ranks import all_reduce_tensor, rank_zero_only
from .step import LOSS_NAMES


@dataclass
class MeterReading:
    """What ``LossMeter.sync`` returns: averages since the last reset, summed over all ranks."""

    averages: dict[str, float]
    images: int
    first_nonfinite_iteration: int | None
    nonfinite_outputs: list[str]


class LossMeter:
    """The reference DDP script's AvgMeters over all ranks: updated on the device, read by one all-reduce
    (``sync``) with the first non-finite iteration, so that every rank stops alike."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        n = len(LOSS_NAMES)
        # float64 so that a sum restored from a checkpoint plus new terms equals the uninterrupted sum
        self._sums = torch.zeros(n, dtype=torch.float64, device=self.device)
        self._count = torch.zeros(1, dtype=torch.float64, device=self.device)
        self._first_bad = torch.full((n,), float("inf"), dtype=torch.float64, device=self.device)
        self._reading: tuple[int, MeterReading] | None = None  # the last sync's iteration and result
        self._global: torch.Tensor | None = None  # the sums and count over all ranks that sync read
        self._updated_at = 0  # the iteration of the last update

    def reset(self) -> None:
        """Start new averages (the reference DDP script resets its meters every epoch)."""
        self._sums.zero_()
        self._count.zero_()

    def update(self, losses: torch.Tensor, batch_size: int, iteration: int) -> None:
        """Add one iteration's losses (a 8-vector: total, loss0..loss6) weighted by the batch size."""
        losses = losses.detach().to(self.device, torch.float64)
        self._sums += losses * batch_size
        self._count += batch_size
        bad = ~torch.isfinite(losses)
        # clamp with a Python number: no host-to-device copy (and so no sync) per iteration
        self._first_bad = torch.where(bad, self._first_bad.clamp(max=float(iteration)), self._first_bad)
        self._updated_at = iteration

    def sync(self, iteration: int) -> MeterReading:
        """The averages over all ranks, read on the host (a collective, once per ``iteration``: a second
        call returns the same reading); only a non-finite sum asks which iteration was first."""
        if self._reading is not None and self._reading[0] == iteration:
            return self._reading[1]
        self._global = all_reduce_tensor(torch.cat([self._sums, self._count])).cpu()
        values = self._global.tolist()
        count = values[-1]
        averages = {name: (v / count if count else math.nan) for name, v in zip(LOSS_NAMES, values)}
        first, nonfinite = None, []
        if not all(math.isfinite(v) for v in values):
            bad = all_reduce_tensor(self._first_bad.clone(), op="MIN").tolist()
            if not math.isinf(min(bad)):
                first = int(min(bad))
                nonfinite = [name for name, it in zip(LOSS_NAMES, bad) if it == first]
        self._reading = (iteration, MeterReading(averages, int(count), first, nonfinite))
        return self._reading[1]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The sums over all ranks that the ``sync`` of the last updated iteration read (no collective, so any
        rank may save alone); restoring them on one rank restores the global average. ``RuntimeError`` when that
        iteration was not synced: ``events.sync_iterations`` holds every checkpoint iteration."""
        if self._updated_at == 0:  # nothing added since the start or a restore, which gave rank 0 the global sums
            return {"sums": self._sums.cpu(), "count": self._count.cpu()}
        if self._reading is None or self._reading[0] != self._updated_at or self._global is None:
            raise RuntimeError(
                f"the loss meter is saved at iteration {self._updated_at}, which no sync read: checkpoint only at "
                "sync_iterations"
            )
        return {"sums": self._global[:-1].clone(), "count": self._global[-1:].clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.reset()
        self._restore_global_sums(state)
        self._updated_at, self._reading, self._global = 0, None, None

    @rank_zero_only
    def _restore_global_sums(self, state: dict[str, torch.Tensor]) -> None:
        # the saved sums are global: rank 0 carries them, the others start from zero
        self._sums.copy_(state["sums"].to(self.device, torch.float64))
        self._count.copy_(state["count"].to(self.device, torch.float64))
