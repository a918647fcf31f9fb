"""One run per output folder: a second run into a folder in use is refused naming the holder, the
first goes on undisturbed; a lock left by a dead run is taken over with a note."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest
from helpers import TINY_TRAIN, blocked_signals, make_tiny_dataset, start_cli

from ignite_r3net import run_lock
from ignite_r3net.cli import main
from ignite_r3net.errors import OptionError
from ignite_r3net.run_lock import LOCK_NAME, RunLock

pytestmark = pytest.mark.timeout(240)


def _write_lock(folder, **record):
    (folder / LOCK_NAME).write_text(json.dumps({"started": "earlier", **record}))


def test_a_held_folder_is_refused_naming_the_holder_and_freed_on_release(tmp_path):
    first = RunLock(tmp_path, job="job-a")
    first.acquire()
    with pytest.raises(OptionError) as refused:
        RunLock(tmp_path, job="job-b").acquire()
    message = str(refused.value)
    assert f"host {socket.gethostname()}, pid {os.getpid()}" in message and str(tmp_path) in message
    first.release()
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path, job="job-b"):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["job"] == "job-b"


def test_stale_locks_are_taken_over_with_a_note(tmp_path, capsys, monkeypatch):
    here = socket.gethostname()
    dead = subprocess.Popen(["true"])  # a pid that existed on this host and is gone
    dead.wait()
    cases = [
        ({"host": here, "pid": dead.pid, "job": "gone"}, "which no longer exists"),
        ({"host": "node-17", "pid": 1, "job": "remote"}, "silent for"),
        ({"host": "node-17", "pid": 1, "job": "same-job"}, "an earlier process of this job"),
    ]
    for record, said in cases:
        _write_lock(tmp_path, **record)
        if record["job"] == "remote":
            old = time.time() - run_lock.STALE_S - 60
            os.utime(tmp_path / LOCK_NAME, (old, old))
        lock = RunLock(tmp_path, job="same-job")
        lock.acquire()
        assert said in capsys.readouterr().err
        lock.release()
    # a remote holder that still beats is not stale
    _write_lock(tmp_path, host="node-17", pid=1, job="remote")
    with pytest.raises(OptionError, match="host node-17, pid 1"):
        RunLock(tmp_path, job="mine").acquire()


@pytest.mark.slow
@pytest.mark.serial  # the first run must still be training when the second one's checks are done
def test_a_second_training_run_is_refused_while_the_first_goes_on(tmp_path, capsys):
    train, _ = make_tiny_dataset(tmp_path / "data", n=6, n_val=0)
    out = tmp_path / "run"
    # long enough that the first run is still training when the second one's checks are done: 6
    # iterations and 3 checkpoints after checkpoint_2, where the checks take a fraction of a second
    args = ["--data", str(train), "--output-dir", str(out), "--iters", "8", "--checkpoint-every", "2", *TINY_TRAIN]
    first = start_cli(args)
    # the second run's code, imported while the first run starts rather than by the second run itself
    # (seconds, which the first run would have to outlast)
    import ignite_r3net.training.start  # noqa: F401

    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint_2.pt").exists():  # training is under way
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        assert main([*args, "--resume", "auto"]) == 2  # the second run, from this process
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --output-dir") and len(err.splitlines()) == 1, err
        assert f"in use by another run (host {socket.gethostname()}, pid {first.pid}," in err
        assert first.poll() is None, "the first run goes on"
        _, first_err = first.communicate(timeout=180)
    finally:
        first.kill()
    assert first.returncode == 0, first_err[-2000:]
    assert sorted(int(p.stem.split("_")[1]) for p in out.glob("checkpoint_*.pt")) == [4, 6, 8]
    assert "[iter 8]" in (out / "train.log").read_text()
    assert not (out / LOCK_NAME).exists(), "the lock is released when the run ends"


def test_the_heartbeat_thread_leaves_ctrl_c_to_the_main_thread(tmp_path):
    """A launcher waits for its ranks in poll(); a Ctrl-C that the kernel handed to the heartbeat
    thread went unnoticed there until a rank ended, and the run trained on. The thread blocks
    SIGINT and SIGTERM, so they reach the main thread, which still takes them."""
    with RunLock(tmp_path, job="job-a") as lock:
        assert lock._heartbeat is not None
        assert {signal.SIGINT, signal.SIGTERM} <= blocked_signals(lock._heartbeat.native_id)
        assert not {signal.SIGINT, signal.SIGTERM} & blocked_signals(threading.main_thread().native_id)
