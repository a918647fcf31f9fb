"""What every rank of a training job must be started with alike, compared right after the group
forms (``distributed.agreement.refuse_unless_ranks_agree``).

That is the recipe ``--resume`` refuses to change (``RESUME_FIXED``), the options that schedule
collectives (a rank that syncs its loss meters, or validates, at other iterations than its peers
hangs them), and the pairs ``--data`` and ``--val-data`` list. Options that may differ between
nodes are left out: ``--workers``, ``--output-dir`` (each node's path to a shared folder), the
node's own ``--node-rank``, the rendezvous and speed options, ``--keep`` (rank 0 alone writes).
The starting weights are left out too: DDP copies rank 0's to every rank as it wraps the model.
"""

from __future__ import annotations

from ..config import TrainConfig
from ..options.fields import flag_named, values_by_flag
from .resume import RESUME_FIXED

COLLECTIVE_SCHEDULE = ("log_every", "checkpoint_every", "val_every")


def options_every_rank_shares(config: TrainConfig) -> dict[str, str]:
    """``{"--lr": "0.001", ..., "--data": "12 pairs (sha256 ...)"}``: the options a rank of this
    run must share with every other, by flag."""
    listings = {flag_named(TrainConfig, name): listing for name, listing in (config.listings or {}).items()}
    return values_by_flag(config, RESUME_FIXED + COLLECTIVE_SCHEDULE) | listings
