"""The images of one optimiser step: processes x images per process x accumulated micro-batches (the global
batch), and the layout derived from a global batch for a number of processes. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

# R3Net's BatchNorm after the global-pooling branch needs two images per process and micro-batch
MIN_BATCH = 2


@dataclass(frozen=True)
class BatchLayout:
    """``processes`` x ``batch`` images per process and micro-batch x ``accumulate`` micro-batches per step."""

    processes: int
    batch: int
    accumulate: int = 1

    @property
    def per_process(self) -> int:
        """The images one process takes in an optimiser step (its micro-batches together)."""
        return self.batch * self.accumulate

    @property
    def global_batch(self) -> int:
        return self.processes * self.per_process

    def recorded(self) -> dict[str, int]:
        """The layout as ``config.json`` (under ``resolved``) and a checkpoint's recipe record it."""
        return {
            "world_size": self.processes,
            "batch_size": self.batch,
            "accumulate": self.accumulate,
            "global_batch": self.global_batch,
        }

    def describe(self, short: bool = False) -> str:
        """``2 processes x 6``, ``1 process x 4 x 2 accumulated``; ``short``: ``4 x 3`` (no word for processes)."""
        processes = str(self.processes)
        if not short:
            processes += " process" if self.processes == 1 else " processes"
        accumulated = f" x {self.accumulate} accumulated" if self.accumulate > 1 else ""
        return f"{processes} x {self.batch}{accumulated}"


def fit(
    global_batch: int,
    processes: int,
    batch: int | None = None,
    accumulate: int | None = None,
    max_batch: int | None = None,
) -> BatchLayout | None:
    """The layout of ``global_batch`` on ``processes`` with the ``batch`` and ``accumulate`` given (None: free);
    a free batch is the largest that divides the process's share, at most ``max_batch``. None: there is none."""
    share, rest = divmod(global_batch, processes)
    if rest or (batch is not None and max_batch is not None and batch > max_batch):
        return None
    if batch is not None and accumulate is not None:
        return BatchLayout(processes, batch, accumulate) if batch * accumulate == share else None
    if accumulate is not None:
        batch, rest = divmod(share, accumulate)
        fits = not rest and MIN_BATCH <= batch <= (max_batch or batch)
        return BatchLayout(processes, batch, accumulate) if fits else None
    if batch is not None:
        accumulate, rest = divmod(share, batch)
        return BatchLayout(processes, batch, accumulate) if not rest and accumulate >= 1 else None
    largest = share if max_batch is None else min(share, max_batch)
    for candidate in range(largest, MIN_BATCH - 1, -1):
        if share % candidate == 0:
            return BatchLayout(processes, candidate, share // candidate)
    return None


def possible_processes(
    global_batch: int, batch: int | None = None, accumulate: int | None = None, max_batch: int | None = None
) -> list[int]:
    """The numbers of processes ``fit`` finds a layout for."""
    return [n for n in range(1, global_batch + 1) if fit(global_batch, n, batch, accumulate, max_batch) is not None]
