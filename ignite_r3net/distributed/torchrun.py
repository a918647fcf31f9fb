"""What this program knows of torchrun, from the environment only."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import warn


def started_by_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """Whether torchrun's agent started this process (it sets TORCHELASTIC_RUN_ID for its workers)."""
    return "TORCHELASTIC_RUN_ID" in (os.environ if env is None else env)


def warn_if_restarts_share_a_store() -> None:
    """Warn when torchrun restarts workers (``--max-restarts``) with its shared rendezvous store: the restarted
    group reads its peers' addresses there without a per-attempt prefix, can find a dead peer's and fails with
    "Gloo connectFullMesh failed". TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives each attempt its own store."""
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        if env.get("RANK") == "0" and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            warn(
                "torchrun --max-restarts with its shared rendezvous store: a restarted group can read the dead "
                "attempt's addresses and fail to connect; run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
                "(examples/torchrun_elastic.sh does)"
            )
