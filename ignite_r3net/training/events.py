"""When the training handlers run: the one definition of the iterations that log and of those that
synchronise the ranks, and the event the validation fires once its metrics are in."""

from __future__ import annotations

from collections.abc import Callable

from ignite.engine import Engine, EventEnum, Events
from ignite.engine.events import CallableEventWithFilter

from ..config import TrainConfig


class ValidationEvents(EventEnum):
    """Fired on the evaluator once a validation's metrics are in its ``state.metrics`` (for the trackers)."""

    SCORED = "validation_scored"


def every_or_last(every: int, last: int, *extra_every: int) -> Callable[[Engine, int], bool]:
    """Event filter: iterations divisible by ``every`` or any of ``extra_every``, and ``last``."""
    periods = [p for p in (every, *extra_every) if p > 0]

    def event_filter(_: Engine, iteration: int) -> bool:
        return iteration == last or any(iteration % p == 0 for p in periods)

    return event_filter


def log_iterations(config: TrainConfig) -> CallableEventWithFilter:
    """Every ``--log-every`` iteration and the last: log line, TensorBoard and the trackers."""
    return Events.ITERATION_COMPLETED(event_filter=every_or_last(config.log_every, config.iters))


def sync_iterations(config: TrainConfig) -> CallableEventWithFilter:
    """The log iterations and every checkpoint: the only ones with a collective or a host sync."""
    return Events.ITERATION_COMPLETED(
        event_filter=every_or_last(config.log_every, config.iters, config.checkpoint_every)
    )
