"""One run per output folder: ``OUTPUT_DIR/.run.lock``, created with ``O_CREAT | O_EXCL`` (local
filesystems and NFSv3+ honour it) by the job's leading process and touched every ``HEARTBEAT_S``.
Another run takes it over, saying so, only from the same job (a torchrun restart, another node), from a
process gone from this host (a SIGKILL), or from a holder silent for ``STALE_S`` (dead on another host)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

from .atomic_files import check_writable_folder, read_json_object, remove_stale_temporaries
from .distributed.signals import threads_leave_signals_to_main
from .distributed.topology import started_by_torchrun
from .errors import OptionError, UserError, note

LOCK_NAME = ".run.lock"
HEARTBEAT_S = 30.0
STALE_S = 300.0  # a remote holder silent for this long is gone (10 heartbeats missed)


def job_id() -> str:
    """This job across its processes, nodes and restarts: SLURM's job and step, torchrun's run, else this process."""
    env = os.environ
    if "SLURM_JOB_ID" in env:
        return f"slurm:{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    if started_by_torchrun():
        run_id = env["TORCHELASTIC_RUN_ID"]
        if run_id != "none":
            # --rdzv-id: the same over torchrun's restarts, whose new rendezvous rounds (an elastic one after a
            # lost node) may meet at another address and port
            return f"torchrun:{run_id}"
        # torchrun's default run id outside --standalone is "none": the rendezvous address tells jobs apart
        return f"torchrun:{run_id}@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    return f"process:{socket.gethostname()}:{os.getpid()}"


class RunLock:
    """The lock on one output folder, held by this process for its job (``with``, or ``acquire``/``release``)."""

    def __init__(self, folder: str | Path, job: str | None = None, option: str = "--output-dir") -> None:
        self.path = Path(folder) / LOCK_NAME
        self.option = option  # the flag that named the folder, for the message when it is in use
        self.record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "job": job or job_id(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lock, taking over a stale one; ``OptionError`` naming the holder if it is held."""
        while not self._create():
            holder = read_json_object(self.path)
            if holder is None:  # being written by its creator, or empty after a crash mid-write
                if self._age() > 5:
                    self._take_over(None, "an unreadable lock file")
                else:
                    time.sleep(0.05)
                continue
            reason = self._stale_reason(holder)
            if reason is None:
                raise OptionError(
                    f"{self.option} {self.path.parent} is in use by another run (host {holder.get('host')}, "
                    f"pid {holder.get('pid')}, since {holder.get('started')}; lock file {self.path}): wait "
                    f"for it to end, or choose another {self.option}"
                )
            self._take_over(holder, reason)
        self._heartbeat = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
        with threads_leave_signals_to_main():  # a Ctrl-C must reach the main thread, not this one
            self._heartbeat.start()

    def release(self) -> None:
        """Give the lock up (only if it is still ours: a takeover may have replaced it)."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if read_json_object(self.path) == self.record:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.record, f)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _age(self) -> float:
        try:
            return time.time() - self.path.stat().st_mtime
        except OSError:
            return 0.0

    def _stale_reason(self, holder: dict[str, Any]) -> str | None:
        if holder.get("job") == self.record["job"]:
            return f"an earlier process of this job ({holder.get('host')}, pid {holder.get('pid')})"
        if holder.get("host") == self.record["host"]:
            alive = _process_exists(holder.get("pid"))
            return None if alive else f"run {holder.get('host')}:{holder.get('pid')}, which no longer exists"
        age = self._age()
        if age > STALE_S:
            return f"run {holder.get('host')}:{holder.get('pid')}, silent for {age:.0f} s"
        return None

    def _take_over(self, holder: dict[str, Any] | None, reason: str) -> None:
        # moved aside so that ``_create`` races fairly: of several runs taking over at once, one
        # renames it and creates the new lock, the others find that one
        aside = self.path.with_name(f"{LOCK_NAME}.stale-{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return  # another run moved it first
        if holder is not None and read_json_object(aside) != holder:
            # between our read and the rename, another run took it over: put its fresh lock back
            os.replace(aside, self.path)
            return
        aside.unlink(missing_ok=True)
        note(f"{self.path}: taking over the lock of {reason}")

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with suppress(OSError):  # the folder went away: nothing left to hold
                os.utime(self.path)


def _process_exists(pid: object) -> bool:
    # a zombie, killed but not yet reaped, counts as gone
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # no /proc: trust kill()
    return "\nState:\tZ" not in status


@contextmanager
def claimed_folder(out: Path, option: str, leader: bool) -> Iterator[None]:
    """The output folder ``out`` of a train or predict job, created, proven writable and (by its ``leader``)
    locked while the block runs; a job refused inside the block leaves no empty folder behind."""
    created = not out.exists()
    check_writable_folder(out, option)  # the words every command uses for a wrong path
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a private probe: under torchrun every local process runs this at the same time
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OptionError(f"{option} {out} is not writable: {e.strerror or e}") from None
    try:
        with RunLock(out, option=option) if leader else nullcontext():
            if leader:
                remove_stale_temporaries(out)  # only now: a running job could be writing them
            yield
    except UserError:
        if created:
            with suppress(OSError):
                for leftover in (".synthetic.lock", LOCK_NAME):
                    (out / leftover).unlink(missing_ok=True)
                out.rmdir()  # only if empty: e.g. a generated synthetic set stays for the next attempt
        raise
