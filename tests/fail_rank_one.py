"""``python run.py`` whose training fails on rank 1 while rank 0 waits for something that never
comes and that, like NCCL's kernel waiting for a peer on another node, does not notice the dead
peer: a store wait with a long timeout. For the tests of the failure broadcast."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ignite.distributed as idist  # noqa: E402
import torch  # noqa: E402
from torch.distributed import distributed_c10d  # noqa: E402

import ignite_r3net.training.worker as worker  # noqa: E402
from ignite_r3net.cli import main  # noqa: E402
from ignite_r3net.distributed import launch  # noqa: E402


def fail_or_wait(local_rank: int, config: object, resumed_note: str | None = None) -> None:
    if idist.get_rank() == 1:
        raise OSError("cannot read image /data/broken.jpg")
    # a DataLoader worker process runs beside this rank, as in training: it must end with it
    batches = iter(torch.utils.data.DataLoader(range(4), num_workers=1, persistent_workers=True))
    next(batches)
    distributed_c10d._get_default_store().wait(["a key nobody sets"], datetime.timedelta(seconds=600))


# at import, not under __main__: spawned workers import this module and must fail the same way
worker.training = fail_or_wait
# rank 0's main thread never ends by itself here (its store wait outlasts any test), so the grace the
# failure watch gives it before ending the process (10 s by default, for a main thread that is ending) is
# only idle time: the same path, 9 s sooner
launch.GRACE_S = 1.0

if __name__ == "__main__":
    sys.exit(main())
