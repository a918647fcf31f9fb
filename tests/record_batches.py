"""``python run.py`` that records, for every iteration each rank trains, the (pair index, sample seed) of every
image of its micro-batches in ``RECORD_DIR/rank-R-pid-P.jsonl``. The patches are made at import as a script, so
the workers that ``--nproc`` spawns (which import this file as ``__mp_main__``) record too; imported as a module
(``PATCHES``), it patches nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ignite.distributed as idist  # noqa: E402

from ignite_r3net.cli import main  # noqa: E402
from ignite_r3net.data import loader  # noqa: E402
from ignite_r3net.training import engine  # noqa: E402

_get_item = loader.SaliencyTrainSet.__getitem__


def _item_with_seed(self: loader.SaliencyTrainSet, key: tuple[int, int]) -> dict[str, Any]:
    return {**_get_item(self, key), "seed": int(key[1])}


_create_train_step = engine.create_train_step


def _recording_step(*args: Any, **kwargs: Any) -> Any:
    step = _create_train_step(*args, **kwargs)
    path = Path(os.environ["RECORD_DIR"]) / f"rank-{idist.get_rank()}-pid-{os.getpid()}.jsonl"

    def recorded(trainer: Any, micro_batches: list[dict[str, Any]]) -> Any:
        keys = [[int(i), int(s)] for b in micro_batches for i, s in zip(b["index"], b["seed"])]
        with path.open("a") as f:
            f.write(json.dumps({"iteration": trainer.state.iteration, "keys": keys}) + "\n")
        return step(trainer, micro_batches)

    return recorded


# what recording replaces: (object, attribute, replacement); a test that trains in its own process sets them
# with monkeypatch, which undoes them at its end
PATCHES: list[tuple[Any, str, Any]] = [
    (loader.SaliencyTrainSet, "__getitem__", _item_with_seed),
    (engine, "create_train_step", _recording_step),
]

if __name__ in ("__main__", "__mp_main__"):  # this script, or a worker it spawned
    for target, name, replacement in PATCHES:
        setattr(target, name, replacement)

if __name__ == "__main__":
    sys.exit(main())
