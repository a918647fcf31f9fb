"""The rendezvous of processes started separately (srun tasks, ranks started with torch's variables, the nodes of
a multi-node launch): they meet at a TCP store in Python, then c10d forms the group among processes all there.
c10d itself waits in C++ retrying on EINTR (only SIGKILL ends it), silently, and for 30 minutes when joining
through ignite's ``Parallel``. Here every wait is a short call in a Python loop: a signal ends it, a line every
``REPORT_EVERY_S`` says what it waits for, and ``--dist-timeout`` ends it with one line naming who is missing.
Participant 0 serves the store, compares what every participant must have alike and hands out the verdict."""

from __future__ import annotations

import datetime
import json
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from ..errors import RanksDisagree, RendezvousFailed, error_line
from .ranks import Side, disagreement
from .topology import Endpoint

REPORT_EVERY_S = 30.0
POLL_S = 0.5
_STORE_OP_TIMEOUT = datetime.timedelta(seconds=30)  # the longest a store call blocks when the other end vanished
VERDICT_READ_S = 10.0  # how long a refusing participant 0 keeps its store for the others to read why
_COUNT, _VERDICT = "ignite_r3net/meeting/count", "ignite_r3net/meeting/verdict"
_VERDICT_READ, _ARRIVED = "ignite_r3net/meeting/verdict_read", "ignite_r3net/meeting/arrived/"


@dataclass(frozen=True)
class Meeting:
    """``count`` participants (ranks, or the nodes' launching processes) meeting; this process is ``index``."""

    kind: str  # "rank" or "node"
    index: int
    count: int
    endpoint: Endpoint
    backend: str
    world_size: int
    timeout: int  # --dist-timeout, seconds
    alike: Mapping[str, str] = field(default_factory=dict)  # what every participant must share
    torchrun_serves: bool = False  # torchrun's agent serves the store and has met the other nodes

    @property
    def who(self) -> str:
        return f"{self.kind} {self.index}"

    @property
    def serves(self) -> bool:
        return self.index == 0 and not self.torchrun_serves

    def announce(self) -> str:
        role = "hosts" if self.serves else "joins"
        return (
            f"rendezvous: {self.who} of {self.count} {role} the {self.backend} group of {self.world_size} "
            f"process(es) at {self.endpoint} ({self.endpoint.source}); waiting up to {self.timeout} s "
            "(--dist-timeout)"
        )

    def causes(self, absent: str) -> str:
        """What usually keeps ``absent`` participants away, in the words of this meeting's settings."""
        return (
            f"{absent} not running, or started with another address or port than this one's "
            f"({self.endpoint.source}), or a firewall blocks the port"
        )


def meet(meeting: Meeting) -> Any:
    """Announce, meet every participant and return the store (keep it while the group lives: participant 0 serves
    it). Raises ``RendezvousFailed`` (``--dist-timeout`` ran out) or ``RanksDisagree`` (``meeting.alike`` differs)."""
    print(meeting.announce(), file=sys.stderr, flush=True)
    wait = _Wait(meeting)
    try:
        store = _serve(meeting) if meeting.serves else _reach(meeting, wait)
        _arrive(store, meeting)
        refusal = _judge(store, meeting, wait) if meeting.serves else _await_verdict(store, meeting, wait)
    except dist.DistError as e:
        other = "a participant" if meeting.serves else f"{meeting.kind} 0"
        raise RendezvousFailed(
            f"{meeting.who} lost the rendezvous at {meeting.endpoint}: {other} stopped or the network failed "
            f"({error_line(e)})"
        ) from None
    if refusal:
        raise RanksDisagree(refusal)
    return store


class _Wait:
    """The clock of a meeting: the deadline, and a line every ``REPORT_EVERY_S`` while waiting."""

    def __init__(self, meeting: Meeting) -> None:
        self.meeting = meeting
        self.start = time.monotonic()
        self.deadline = self.start + meeting.timeout
        self.next_report = self.start + REPORT_EVERY_S

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def until(self, ready: Callable[[], bool], waiting_for: Callable[[], str], timed_out: Callable[[], str]) -> None:
        while not ready():
            now = time.monotonic()
            if now >= self.deadline:
                raise RendezvousFailed(timed_out())
            if now >= self.next_report:
                print(
                    f"rendezvous: {self.meeting.who} waited {now - self.start:.0f} s {waiting_for()}; "
                    f"waiting {self.deadline - now:.0f} s more",
                    file=sys.stderr,
                    flush=True,
                )
                self.next_report += REPORT_EVERY_S
            time.sleep(min(POLL_S, self.remaining()))


def _serve(meeting: Meeting) -> Any:
    endpoint = meeting.endpoint
    try:
        return dist.TCPStore(
            endpoint.addr, endpoint.port, is_master=True, wait_for_workers=False, timeout=_STORE_OP_TIMEOUT
        )
    except dist.DistError as e:
        raise RendezvousFailed(
            f"{meeting.who} cannot open the rendezvous port {endpoint.port} ({endpoint.source}): "
            f"{error_line(e)}; another job may use it: choose another port"
        ) from None


def _reach(meeting: Meeting, wait: _Wait) -> Any:
    # a plain socket first: c10d's client then connects at once, never logging a failed attempt
    endpoint = meeting.endpoint
    try:
        socket.getaddrinfo(endpoint.addr, endpoint.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        setting, origin = endpoint.addr_from
        where = f"{setting} from {origin}" if origin else setting
        raise RendezvousFailed(
            f"{meeting.who}: the rendezvous address {endpoint.addr} ({where}) does not resolve: {e.strerror}"
        ) from None
    host = f"{meeting.kind} 0"
    wait.until(
        lambda: _answers(endpoint, min(1.0, wait.remaining())),
        lambda: f"for {host} to open {endpoint}",
        lambda: (
            f"{meeting.who} waited {meeting.timeout} s for the rendezvous at {endpoint} (world size "
            f"{meeting.world_size}): {host} is not running, or the address or port is wrong ({endpoint.source}), "
            "or a firewall blocks the port"
        ),
    )
    return dist.TCPStore(endpoint.addr, endpoint.port, is_master=False, timeout=_STORE_OP_TIMEOUT)


def _answers(endpoint: Endpoint, timeout: float) -> bool:
    try:
        with socket.create_connection((endpoint.addr, endpoint.port), timeout=max(timeout, 0.01)):
            return True
    except OSError:
        return False


def _arrive(store: Any, meeting: Meeting) -> None:
    if store.add(f"ignite_r3net/meeting/claimed/{meeting.index}", 1) > 1:
        raise RendezvousFailed(
            f"{meeting.who} is already at the rendezvous at {meeting.endpoint}: two processes were given the "
            f"same {'--node-rank' if meeting.kind == 'node' else 'rank'}"
        )
    store.set(f"{_ARRIVED}{meeting.index}", json.dumps(dict(meeting.alike)))
    store.add(_COUNT, 1)


def _judge(store: Any, meeting: Meeting, wait: _Wait) -> str | None:
    def absent() -> list[str]:
        return [f"{meeting.kind} {i}" for i in range(1, meeting.count) if not store.check([f"{_ARRIVED}{i}"])]

    def timed_out() -> str:
        missing = absent()
        return (
            f"{meeting.who} waited {meeting.timeout} s at {meeting.endpoint} for {_names(missing)} (world size "
            f"{meeting.world_size}): {meeting.causes('it is' if len(missing) == 1 else 'they are')}"
        )

    wait.until(
        lambda: store.add(_COUNT, 0) >= meeting.count,
        lambda: f"at {meeting.endpoint} for {_names(absent())}",
        timed_out,
    )
    refusal = None
    for index in range(1, meeting.count):
        theirs: Side = (f"{meeting.kind} {index}", json.loads(store.get(f"{_ARRIVED}{index}")), {})
        if refusal := disagreement(f"{meeting.kind}s", (meeting.who, meeting.alike, {}), theirs):
            break
    store.set(_VERDICT, json.dumps({"refusal": refusal}))
    if refusal:  # it ends this process and its store: every participant must stop with this line, not a lost one
        wait_for_readers(store, _VERDICT_READ, meeting.count - 1, VERDICT_READ_S)
    return refusal


def wait_for_readers(store: Any, key: str, readers: int, seconds: float) -> None:
    """Keep this process (it may serve ``store``) until ``readers`` others counted in ``key``, ``seconds`` at most."""
    deadline = time.monotonic() + seconds
    while store.add(key, 0) < readers and time.monotonic() < deadline:
        time.sleep(0.05)


def _names(who: list[str], shown: int = 8) -> str:
    return ", ".join(who[:shown]) + (f" and {len(who) - shown} more" if len(who) > shown else "")


def _await_verdict(store: Any, meeting: Meeting, wait: _Wait) -> str | None:
    def here() -> str:
        return f"{store.add(_COUNT, 0)} of {meeting.count} {meeting.kind}s"

    wait.until(
        lambda: store.check([_VERDICT]),
        lambda: f"at {meeting.endpoint} for the other {meeting.kind}s ({here()} there)",
        lambda: (
            f"{meeting.who} waited {meeting.timeout} s at {meeting.endpoint} for the other {meeting.kind}s "
            f"({here()} there, world size {meeting.world_size}): {meeting.causes('some are')}"
        ),
    )
    refusal = json.loads(store.get(_VERDICT))["refusal"]
    store.add(_VERDICT_READ, 1)
    return refusal
