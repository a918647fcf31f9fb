"""Which rank does what: rank-0-only work goes through ``rank_zero_only``; the typed collectives;
and ``refuse_unless_ranks_agree``: DDP compares nothing but tensor shapes, so a node started with another ``--lr``
(or other software) would train on, its replica drifting apart."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

import ignite
import ignite.distributed as idist
import torch

from .. import __version__
from ..content_key import ContentKey
from ..errors import RanksDisagree

# the wrapped function runs on rank 0 only (files, TensorBoard, the console); it must hold no collective
rank_zero_only = idist.one_rank_only(rank=0)


# ignite types each collective for tensors, numbers and strings at once; these say which
def all_reduce_tensor(tensor: torch.Tensor, op: str = "SUM") -> torch.Tensor:
    return cast(torch.Tensor, idist.all_reduce(tensor, op=op))


def broadcast_tensor(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    return cast(torch.Tensor, idist.broadcast(tensor, src=src))


def all_gather_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (all of one shape), concatenated along the first dimension in rank order."""
    return cast(torch.Tensor, idist.all_gather(tensor))


def all_gather_strings(text: str) -> list[str]:
    return cast(list[str], idist.all_gather(text))


def all_gather_items(items: list[Any]) -> list[Any]:
    """Every rank's ``items`` (JSON values: tuples come back as lists), one list in rank order."""
    return [item for text in all_gather_strings(json.dumps(items)) for item in json.loads(text)]


def is_rank_zero() -> bool:
    """For work every rank does but only rank 0 shows (a progress bar); rank-0-only work uses ``rank_zero_only``."""
    return idist.get_rank() == 0


@cache
def installed_software() -> dict[str, str]:
    """This package (version and sources' digest: a checkout's version stays), torch and ignite."""
    package = Path(__file__).resolve().parents[1]
    sources = ContentKey("sources", 1).add_sources(sorted(package.rglob("*.py")), root=package)
    return {
        "ignite_r3net": f"{__version__} (sources {sources.hexdigest(12)})",
        "torch": torch.__version__,
        "ignite": ignite.__version__,
    }


def refuse_unless_ranks_agree(options: Mapping[str, str]) -> None:
    """Raise ``RanksDisagree`` on every rank unless all have the same ``options`` and software; a collective."""
    mine = {"options": dict(options), "software": installed_software(), "node": idist.get_node_rank()}
    # ASCII: ignite sizes the gathered string by its length in characters, not in UTF-8 bytes
    gathered = [json.loads(text) for text in all_gather_strings(json.dumps(mine, sort_keys=True, ensure_ascii=True))]
    first = gathered[0]
    for rank, other in enumerate(gathered[1:], start=1):
        line = disagreement(
            "ranks",
            ("rank 0", first["options"], first["software"]),
            (f"rank {rank} (node {other['node']})", other["options"], other["software"]),
        )
        if line:
            raise RanksDisagree(line)


Side = tuple[str, Mapping[str, str], Mapping[str, str]]  # who ("rank 1 (node 1)"), their options, their software


def disagreement(what: str, first: Side, other: Side) -> str | None:
    """The one line naming each option and package that differs, with both values (``the ranks were started with
    different options: --lr 0.001 on rank 0, 0.01 on rank 1 (node 1); ...``), or None; the rendezvous's too."""
    options = _differing(first[0], first[1], other[0], other[1])
    software = _differing(first[0], first[2], other[0], other[2])
    parts = [f"were started with different options: {options}"] if options else []
    parts += [f"run different software: {software}"] if software else []
    if not parts:
        return None
    advice = "start every node with the same command" + (" and the same installation" if software else "")
    return f"the {what} {'; and '.join(parts)}; {advice}"


def _differing(first: str, mine: Mapping[str, str], other: str, theirs: Mapping[str, str]) -> str:
    names = list(mine) + [name for name in theirs if name not in mine]
    return "; ".join(
        f"{name} {mine.get(name, 'unset')} on {first}, {theirs.get(name, 'unset')} on {other}"
        for name in names
        if mine.get(name) != theirs.get(name)
    )
