"""The training data as the Engine takes it: one item per optimiser step (the ``accumulate`` micro-batches this
rank trains in it), endless across epochs, and where it stands in them (``state_dict``, checkpointed as
``sampler``), so that a run resumed on another batch layout continues at the next global batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from .sampler import ResumableDistributedSampler


class StepStream:
    """Step ``s`` of epoch ``e`` holds the global positions ``[s * G, (s + 1) * G)`` of that epoch's shared
    permutation (``G``: the global batch), whatever the processes, batch and accumulation that share them:
    micro-batch ``m`` of rank ``r`` takes the sampler's batch ``s * accumulate + m`` of that rank. An epoch has
    as many steps as every rank has ``accumulate`` full micro-batches; the rest of an epoch is left out."""

    def __init__(
        self, loader: DataLoader[Any], sampler: ResumableDistributedSampler, accumulate: int, global_batch: int
    ) -> None:
        self.loader, self.sampler, self.accumulate, self.global_batch = loader, sampler, accumulate, global_batch
        self.steps_per_epoch = sampler.num_batches // accumulate
        if self.steps_per_epoch < 1:
            raise ValueError(
                f"{sampler.num_batches} micro-batches per epoch on this rank: fewer than --accumulate {accumulate}"
            )
        self.epoch = self.step = 0  # the next step to train

    def __len__(self) -> int:
        return self.steps_per_epoch

    def start_at(self, iteration: int) -> None:
        """Continue after ``iteration`` steps trained on this layout (a checkpoint that records no position)."""
        self.epoch, self.step = divmod(iteration, self.steps_per_epoch)

    def state_dict(self) -> dict[str, int]:
        """The next step to train: its epoch, its step in the epoch and its first global position."""
        return {
            "epoch": self.epoch,
            "step": self.step,
            "position": self.step * self.global_batch,
            "global_batch": self.global_batch,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue where ``state`` stood; past the end of this layout's epoch (another padding): the next epoch."""
        if int(state["global_batch"]) != self.global_batch:
            raise ValueError(f"the checkpoint's global batch {state['global_batch']} is not {self.global_batch}")
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        if self.step >= self.steps_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0

    def __iter__(self) -> Iterator[list[Any]]:
        epoch, step = self.epoch, self.step
        while True:
            # before the loader's iterator is created: the sampler reads the epoch and skip then
            self.sampler.set_epoch(epoch, skip_batches=step * self.accumulate)
            group: list[Any] = []
            for batch in self.loader:
                group.append(batch)
                if len(group) < self.accumulate:
                    continue
                step += 1
                # what a checkpoint after this step records: the step after it
                self.epoch, self.step = (epoch, step) if step < self.steps_per_epoch else (epoch + 1, 0)
                yield group
                group = []
                if step == self.steps_per_epoch:
                    break
            epoch, step = epoch + 1, 0
