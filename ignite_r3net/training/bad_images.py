"""Training pairs found unreadable during a run: ``SaliencyTrainSet`` trains on the next readable pair and
names it in the batch's ``bad`` list; ``BadImages`` gathers them from every rank at the sync iterations,
reports each once, stops every rank alike past ``--max-bad-images``, and is checkpointed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

import ignite.distributed as idist
from ignite.engine import Engine, Events
from ignite.engine.events import CallableEventWithFilter

from ..config import TrainConfig
from ..distributed.ranks import all_gather_items
from .train_log import TrainLog


class TooManyBadImages(RuntimeError):
    """More training pairs are unreadable than ``--max-bad-images`` allows; raised on every rank."""


class BadImages:
    """The unreadable training pairs met so far, by image path, with the problem of each."""

    def __init__(self, pairs: int, max_share: float) -> None:
        self.pairs = pairs
        self.max_share = max_share
        self.known: dict[str, str] = {}  # the same on every rank after each ``sync``
        self._pending: dict[str, str] = {}  # met on this rank since the last sync

    @property
    def allowed(self) -> int:
        """``--max-bad-images`` of the training pairs, rounded down."""
        return math.floor(self.max_share * self.pairs + 1e-9)

    def note(self, bad: Iterable[tuple[str, str]]) -> None:
        """Remember what this rank's batch passed over (no communication)."""
        for path, problem in bad:
            if path not in self.known:
                self._pending.setdefault(path, problem)

    def sync(self) -> list[tuple[str, str]]:
        """Share what each rank met since the last sync (a collective); the new pairs, by name."""
        if not int(idist.all_reduce(len(self._pending))):
            return []
        gathered = all_gather_items(sorted(self._pending.items()))
        self._pending.clear()
        new: dict[str, str] = {}
        for path, problem in gathered:
            if path not in self.known:
                new.setdefault(path, problem)
        self.known.update(new)
        return sorted(new.items())

    def state_dict(self) -> dict[str, Any]:
        return {"known": sorted(self.known.items())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.known = dict(state["known"])


def attach_bad_images(
    trainer: Engine, bad: BadImages, log: TrainLog, sync_iterations: CallableEventWithFilter, config: TrainConfig
) -> None:
    """Note each batch's replaced pairs; report new ones at ``sync_iterations``, past the limit stop."""

    @trainer.on(Events.ITERATION_COMPLETED)
    def note_replaced_pairs(engine: Engine) -> None:
        for batch in cast(list[dict[str, Any]], engine.state.batch):  # the step's micro-batches (collate_train's)
            bad.note(batch.get("bad", ()))

    @trainer.on(sync_iterations)
    def report_bad_images(engine: Engine) -> None:
        new = bad.sync()
        stopping = len(bad.known) > bad.allowed
        for _, problem in new:
            if stopping:  # one line on the console (below); train.log names every pair
                log.write(f"unreadable: {problem}", console=False)
            else:
                log.write(
                    f"warning: {problem}; trained on the next readable pair in its place ({len(bad.known)} of "
                    f"{bad.pairs} training pairs unreadable so far, --max-bad-images {config.max_bad_images} "
                    f"allows {bad.allowed})"
                )
        if stopping:
            first = next(iter(bad.known.values()))
            more = f" and {len(bad.known) - 1} more (train.log names them)" if len(bad.known) > 1 else ""
            raise TooManyBadImages(
                f"{len(bad.known)} of {bad.pairs} training pairs are unreadable, more than --max-bad-images "
                f"{config.max_bad_images} allows ({bad.allowed}): {first}{more}; repair or remove them "
                "(check-data --decode DIR lists every one), or raise --max-bad-images"
            )
