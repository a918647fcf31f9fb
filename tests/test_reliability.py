"""Promises about failures: atomic checkpoints, safe loading, resume that skips corrupt files, a
failing rank or a non-finite loss ending the whole job quickly and clearly, a full disk."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from helpers import (
    REPO,
    TINY_TRAIN,
    cpu_env,
    free_port,
    group_pids,
    log_iterations,
    log_lines,
    make_tiny_dataset,
    read_scalars,
    start_long_run,
    wait_for_iterations,
)
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from stress.stress_interrupt import stress

from ignite_r3net.atomic_files import remove_stale_temporaries
from ignite_r3net.checkpoint_io import (
    SafeDiskSaver,
    find_resume_checkpoint,
    load_checkpoint,
)
from ignite_r3net.cli import main
from ignite_r3net.config import TrainConfig
from ignite_r3net.data.loader import stop_workers
from ignite_r3net.distributed.launch import launch
from ignite_r3net.distributed.topology import LaunchSpec
from ignite_r3net.errors import CheckpointError, DataError, Terminated, WorkerFailed, error_line
from ignite_r3net.training.engine import attach_checkpointing, attach_stop_on_sigterm

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    train, _ = make_tiny_dataset(tmp_path_factory.mktemp("data"), n=10)
    return train


# ---------------------------------------------------------------- checkpoints on disk


def _engine_at(iteration: int) -> Engine:
    engine = Engine(lambda e, b: None)
    engine.state.iteration = iteration
    return engine


def test_old_checkpoint_is_removed_only_after_the_new_one_is_complete(tmp_path, monkeypatch):
    weights = {"w": torch.arange(10.0)}
    holder = {"model": _StateHolder(weights)}
    ckpt = Checkpoint(holder, SafeDiskSaver(tmp_path), n_saved=1, global_step_transform=lambda e, _: e.state.iteration)
    ckpt(_engine_at(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_1.pt"]

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="model_2.pt.*No space left on device"):
        ckpt(_engine_at(2))
    # the failed write left no partial file, and the previous checkpoint is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_1.pt"]
    assert torch.equal(load_checkpoint(tmp_path / "model_1.pt")["w"], weights["w"])

    monkeypatch.undo()
    ckpt(_engine_at(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_3.pt"]


def test_a_resume_with_a_smaller_keep_trims_the_oldest_checkpoints(tmp_path):
    for it in (4, 8, 12, 16):
        torch.save({"w": torch.zeros(1)}, tmp_path / f"checkpoint_{it}.pt")
    trainer = _engine_at(16)
    attach_checkpointing(
        trainer,
        {"model": _StateHolder({"w": torch.ones(1)}), "trainer": trainer},
        TrainConfig(output_dir=str(tmp_path), keep=2, checkpoint_every=4),
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_12.pt", "checkpoint_16.pt"]
    trainer.state.iteration = 20
    trainer.fire_event(Events.ITERATION_COMPLETED)  # the next save rotates within --keep 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_16.pt", "checkpoint_20.pt"]


class _StateHolder:
    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


@pytest.mark.slow
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_intact(tmp_path):
    good = {"w": torch.arange(1000.0)}
    torch.save(good, tmp_path / "checkpoint_1.pt")
    script = textwrap.dedent(f"""
        import torch
        from ignite_r3net.checkpoint_io import SafeDiskSaver
        saver = SafeDiskSaver({str(tmp_path)!r})
        saver({{"w": torch.zeros(150_000_000)}}, "checkpoint_2.pt")  # 600 MB: slow enough to kill
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=cpu_env())
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert list(tmp_path.glob(".tmp-*")), "the save never started"
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "checkpoint_2.pt").exists(), "a partial file under a checkpoint name"
    assert torch.equal(load_checkpoint(tmp_path / "checkpoint_1.pt")["w"], good["w"])
    found = find_resume_checkpoint(tmp_path)
    assert found is not None and found[0].name == "checkpoint_1.pt"
    remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1.pt"]


def test_a_checkpoint_carrying_a_pickled_callable_is_refused_not_run(tmp_path, capsys):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, evil)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(evil)
    from ignite_r3net.cli import main

    assert main(["--resume", str(evil), "--output-dir", str(tmp_path / "out"), "--backbone", "resnet18"]) == 2
    assert "refused" in capsys.readouterr().err
    from PIL import Image

    Image.new("RGB", (40, 30)).save(tmp_path / "input.jpg")
    assert (
        main(
            [
                "predict",
                "--checkpoint",
                str(evil),
                "--input",
                str(tmp_path / "input.jpg"),
                "--output",
                str(tmp_path / "maps"),
                "--backbone",
                "resnet18",
            ]
        )
        == 2
    )
    assert "refused" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_resume_auto_skips_a_truncated_newest_checkpoint(data, tmp_path, capsys):
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "4", "--checkpoint-every", "2", *TINY_TRAIN]
    assert main(args) == 0
    newest = tmp_path / "checkpoint_4.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    capsys.readouterr()
    assert main([*args, "--resume", "auto"]) == 0
    assert f"warning: cannot load checkpoint {newest}: " in capsys.readouterr().err
    resumed = f"resumed from {tmp_path / 'checkpoint_2.pt'} at iteration 2 (passed over checkpoint_4.pt, which could"
    assert resumed in (tmp_path / "train.log").read_text()  # the log says why the run went back
    assert load_checkpoint(newest)["trainer"]["iteration"] == 4  # rewritten whole


def test_resume_auto_refuses_to_start_afresh_over_checkpoints_that_do_not_load(data, tmp_path, capsys):
    """Starting again would write over them; a disk or copy problem is for the user to look at."""
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "4", "--checkpoint-every", "2", *TINY_TRAIN]
    assert main(args) == 0
    for name in ("checkpoint_2.pt", "checkpoint_4.pt"):
        (tmp_path / name).write_bytes(b"cut short")
    capsys.readouterr()
    assert main([*args, "--resume", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: --resume auto: none of the 2 checkpoint(s) in {tmp_path} loads (checkpoint_2.pt, checkpoint_4.pt: "
        "see the warnings above); move them away to start a fresh run there"
    ), err
    assert (tmp_path / "checkpoint_4.pt").read_bytes() == b"cut short"  # nothing written over


# ---------------------------------------------------------------- failures across ranks


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_rank_raising_ends_the_job_naming_rank_and_cause(tmp_path):
    from helpers import raise_on_rank_one

    spec = LaunchSpec(nproc=2, backend="gloo", master_port=free_port(), traceback_dir=str(tmp_path))
    with pytest.raises(WorkerFailed) as failure:  # rather than hanging until the test's timeout
        launch(raise_on_rank_one, None, spec)
    message = str(failure.value)
    assert f"rank 1 failed on {socket.gethostname()}: OSError: cannot read image /data/broken.jpg" in message
    assert "Traceback" not in message and len(message.splitlines()) == 1
    assert "raise OSError" in (tmp_path / "error-rank1.log").read_text()


class _SignalsWhileCollected:
    """Sends SIGTERM to this process from its ``__del__``, where Python cannot raise: the handler's
    ``Terminated`` is printed as an ignored exception and the program goes on."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)


def _train_until_stopped(local_rank, iterations: list[int]) -> None:
    def step(engine, batch):
        if engine.state.iteration == 2:
            _SignalsWhileCollected()  # collected at once

    engine = Engine(step)
    attach_stop_on_sigterm(engine)
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: iterations.append(e.state.iteration))
    engine.run(range(100), max_epochs=1)


@pytest.mark.serial
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the ignored Terminated
def test_a_sigterm_python_could_not_raise_still_stops_training_at_the_next_iteration():
    iterations: list[int] = []
    with pytest.raises(Terminated):
        launch(_train_until_stopped, iterations, LaunchSpec(nproc=1))  # in this process
    assert iterations == [1], "the run stops at the end of the iteration the signal arrived in"


def _lose_a_peer(local_rank, arg) -> None:
    raise RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:7079: "
        "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
        "application. Check the logs of the remote worker before reporting an error. GLHF!"
    )


def _lose_a_peer_quietly(local_rank, arg) -> None:
    raise torch.distributed.DistNetworkError("failed to recv, got 0 bytes")  # any backend's wording


@pytest.mark.parametrize("worker, kind", [(_lose_a_peer, "RuntimeError"), (_lose_a_peer_quietly, "DistNetworkError")])
def test_a_rank_that_lost_a_peer_says_so_in_words(tmp_path, worker, kind):
    """What a torchrun or srun rank reports when another rank died under it without a word (no
    line in the job's store: it was killed): gloo's message for it names a source file and an
    address, and a network error may use other words; the line names what happened."""
    with pytest.raises(WorkerFailed) as failure:
        launch(worker, None, LaunchSpec(nproc=1, traceback_dir=str(tmp_path)))
    assert str(failure.value).startswith(
        f"rank 0 failed on {socket.gethostname()}: {kind}: lost the connection to another rank, which failed or "
        "was stopped"
    )
    assert "pair.cc" not in str(failure.value)
    assert ("pair.cc:545" if kind == "RuntimeError" else "got 0 bytes") in (tmp_path / "error-rank0.log").read_text()


LAUNCH_SCRIPT = """
import atexit, os, sys
sys.path[:0] = [{repo!r}, {tests!r}]
from helpers import sum_ranks
from ignite_r3net.distributed.launch import launch
from ignite_r3net.distributed.topology import LaunchSpec, free_port
if __name__ == "__main__":  # spawned workers import this module
    # one write(2) per line: torchrun's workers share the pipe, and print() may write a line in
    # two calls that interleave with the other worker's
    atexit.register(lambda: os.write(1, b"atexit ran\\n"))
    for nproc in map(int, sys.argv[1:]):
        launch(sum_ranks, None, LaunchSpec(nproc=nproc, backend="gloo", master_port=free_port()))
        os.write(1, f"after launch {{nproc}} {{os.environ.get('RANK', '-')}}\\n".encode())
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["in this process, then spawning", "torchrun"])
def test_launch_returns_normally_and_atexit_handlers_run(tmp_path, how):
    """No os._exit anywhere: the launching process (and every torchrun worker) goes on after
    ``launch()`` and exits through the interpreter's normal shutdown."""
    script = tmp_path / "launch_then_print.py"
    script.write_text(LAUNCH_SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests")))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command, expected = {
        # one process (no process group), then two spawned ranks, from the same launching process
        "in this process, then spawning": ([sys.executable, str(script), "1", "2"], ["1 -", "2 -"]),
        "torchrun": ([*torchrun, str(script), "1"], ["1 0", "1 1"]),
    }[how]
    proc = subprocess.run(command, env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    said = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    assert sorted(line.split(" ", 2)[2] for line in lines if line.startswith("after launch")) == expected, said
    assert lines.count("atexit ran") == (2 if how == "torchrun" else 1), said
    assert "terminate called" not in proc.stderr, said


class _BrokenImages(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        raise DataError(f"cannot read image /data/img{i}.jpg: truncated")


def test_an_error_in_a_dataloader_worker_keeps_its_one_line_message():
    """PyTorch re-raises a worker's error with a 15-line wrapper; the user sees the original line."""
    loader = torch.utils.data.DataLoader(_BrokenImages(), num_workers=1, persistent_workers=True)
    try:
        with pytest.raises(DataError) as raised:
            next(iter(loader))
    finally:
        stop_workers(loader)  # left to the garbage collector, its worker would wait out a 5 s check
    assert str(raised.value).startswith("Caught DataError in DataLoader worker")
    assert error_line(raised.value) == "cannot read image /data/img0.jpg: truncated"


# a DataLoader worker of a process that turns SIGTERM into Terminated; its first ``done_event.is_set()`` gets the
# group's SIGTERM at the worst moment: just after the event's lock was taken, before the ``with`` body began
SIGTERM_IN_IS_SET_SCRIPT = """
import os, signal, sys
sys.path[:0] = [{repo!r}]
import torch
from ignite_r3net.data.loader import init_loader_worker, stop_workers
from ignite_r3net.distributed.signals import raise_on_sigterm


def sigterm_just_after_the_lock(frame, event, arg):
    # c_return of the C acquire in multiprocessing's SemLock.__enter__, under Condition.__enter__, under is_set
    caller = frame.f_back and frame.f_back.f_back
    if event == "c_return" and frame.f_code.co_name == "__enter__" and caller and caller.f_code.co_name == "is_set":
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)  # CPython runs the handler before the next bytecode


def init_worker(worker_id):
    init_loader_worker(worker_id)
    sys.setprofile(sigterm_just_after_the_lock)


raise_on_sigterm()  # as launch() does, before the loader forks its workers
loader = torch.utils.data.DataLoader(
    list(range(8)), num_workers=1, persistent_workers=True, worker_init_fn=init_worker, multiprocessing_context="fork"
)
print("batch", next(iter(loader)).tolist(), flush=True)
stop_workers(loader)  # waited forever in done_event.set() on the lock the worker had left taken
print("stopped", flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_sigterm_just_after_a_worker_took_the_done_event_lock_does_not_hang_the_loader(tmp_path):
    """SIGTERM to the process group (a scheduler's stop) reaches the DataLoader workers too; landing just after a
    worker's ``done_event.is_set()`` took its lock, it made the inherited ``Terminated`` leave the lock taken,
    and the run hung in ``stop_workers``. The worker ignores it: the loader's process stops it."""
    script = tmp_path / "sigterm_in_is_set.py"
    script.write_text(SIGTERM_IN_IS_SET_SCRIPT.format(repo=str(REPO)))
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the loader's process hung (stdout: {out!r}); stderr:\n{err[-2000:]}")
    assert proc.returncode == 0, err[-2000:]
    assert out.splitlines() == ["batch [0]", "stopped"], err[-2000:]


@pytest.mark.serial
@pytest.mark.slow
def test_an_image_broken_during_training_stops_every_rank(data, tmp_path):
    """A file that passed the start-up scan and breaks later (a flaky disk) is met on one rank, in a
    DataLoader worker process (as by default); one unreadable pair of 10 is more than the default
    --max-bad-images 0.01 allows, so every rank stops at the same iteration with one line."""
    work = tmp_path / "data"
    work.mkdir()
    for p in data.iterdir():
        (work / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "out"
    proc = start_long_run(work, out, workers=1)
    try:
        wait_for_iterations(proc, out, 1)
        broken = sorted(work.glob("*.jpg"))[3]
        broken.write_bytes(b"this is no longer a JPEG")
        _, err = proc.communicate(timeout=90)  # ends the test if the job hangs
    finally:
        if group_pids(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: rank ") and f"cannot read image {broken}" in last, err[-3000:]
    assert "TooManyBadImages: 1 of 10 training pairs are unreadable" in last, last
    assert log_lines(out / "train.log")[-1] == last
    deadline = time.monotonic() + 10  # helpers such as multiprocessing's resource tracker exit last
    while group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_pids(proc.pid), "a worker was left running"


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize(
    "target, sig, code, said, nproc",
    [
        # Ctrl-C in a terminal
        ("process group", signal.SIGINT, 130, "interrupted", 2),
        # kill -INT PID
        ("launcher", signal.SIGINT, 130, "interrupted", 2),
        # kill PID (``Terminated`` is a ``KeyboardInterrupt``: the same path)
        ("launcher", signal.SIGTERM, 143, "terminated", 2),
        # how torchrun, SLURM and systemd stop a rank that is its own process: SIGTERM to it and to
        # its DataLoader workers at once (the workers ignore it: the rank stops them)
        ("process group", signal.SIGTERM, 143, "terminated", 1),
    ],
)
def test_an_interrupt_ends_the_whole_job_at_once_without_tracebacks(data, tmp_path, target, sig, code, said, nproc):
    """Ctrl-C reaches the process group; ``kill -INT`` / ``kill`` (an IDE's stop button, a scheduler)
    the launcher only. Every rank and DataLoader worker stops within 5 s, and the job says so in
    one line."""
    out = tmp_path / "out"
    proc = start_long_run(data, out, workers=2, nproc=nproc)
    try:
        wait_for_iterations(proc, out, 1)
        if target == "launcher":
            os.kill(proc.pid, sig)
        else:
            os.killpg(proc.pid, sig)
        signalled = time.monotonic()
        # returns once every process holding the pipes (DataLoader workers too) is gone; a job that
        # ignored the signal would run its 500 iterations, or hang, past it
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - signalled
        # a process that closed its pipes may still be exiting (not yet a zombie) on a loaded machine:
        # what counts is that none is left within the 5 s the job has
        left = group_pids(proc.pid)
        while left and time.monotonic() - signalled < 5:
            time.sleep(0.1)
            left = group_pids(proc.pid)
    finally:
        if group_pids(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err[-2000:]
    assert err.strip().splitlines()[-1] == said
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "Exception ignored" not in err, err[-3000:]
    assert not left, f"a rank or DataLoader worker was left running: {left}"
    assert seconds < 5, f"the job took {seconds:.1f} s to end"
    assert max(log_iterations(out / "train.log")) < 500
    assert log_lines(out / "train.log")[-1] == said, "train.log ends with the console's line"


# over the 30 s budget (32 s idle): two runs interrupted while busy loops hold every core
@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ctrl_c_ends_every_run_on_a_loaded_machine_even_where_the_suite_ignores_it():
    """``tests/stress/stress_interrupt.py`` in short: Ctrl-C to a 2-rank run, twice in a row, while
    busy loops keep every core busy, and with this process ignoring SIGINT as a suite started in
    the background of a script (``pytest ... &``) does. Each run ends within 5 s, with 130."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        outcomes = stress(runs=2, load=os.cpu_count() or 1, deadline=20, verbose=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [(o.code, o.last_line) for o in outcomes] == [(130, "interrupted")] * 2, outcomes
    assert max(o.seconds for o in outcomes) < 5, outcomes


@pytest.mark.slow
def test_non_finite_loss_stops_all_ranks_at_the_same_iteration(data, tmp_path, capsys):
    args = ["--nproc", "2", "--data", str(data), "--output-dir", str(tmp_path), "--iters", "40"]
    args += ["--checkpoint-every", "1", "--keep", "3", "--lr", "1e4", "--master-port", str(free_port()), *TINY_TRAIN]
    assert main(args) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "loss became non-finite at iteration" in last, last
    bad = int(last.split("non-finite at iteration ")[1].split()[0])
    assert "loss" in last.split(f"iteration {bad} in ", 1)[1]
    saved = sorted(int(p.stem.split("_")[1]) for p in tmp_path.glob("checkpoint_*.pt"))
    # --keep 3 rather than keeping all: each tiny-run checkpoint is ~145 MiB and the disk preflight
    # (rightly) refuses a --keep that the output disk cannot hold.
    assert saved == list(range(max(1, bad - 3), bad)), "checkpoints up to the last good iteration, none after"
    state = load_checkpoint(tmp_path / f"checkpoint_{bad - 1}.pt")
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    assert max(log_iterations(tmp_path / "train.log")) == bad - 1
    assert log_lines(tmp_path / "train.log")[-1] == last
    # TensorBoard was flushed and closed on the failure: every good iteration is in it
    assert sorted(read_scalars(tmp_path / "tb")["train/total"]) == list(range(1, bad))


@pytest.mark.slow
def test_a_full_disk_is_a_clear_error_naming_the_file(data, tmp_path, capsys):
    """Simulated with a file-size limit: the first checkpoint cannot be written. In this process (a run of
    its own would spend seconds importing torch): the limit is set for the run and lifted after it; Python
    ignores SIGXFSZ, so an over-long write fails with EFBIG as in a process of its own."""
    limit = 20 * 2**20  # train.log and TensorBoard fit; a 74 MB resnet18 checkpoint does not
    args = ["--data", str(data), "--output-dir", str(tmp_path), "--iters", "2", "--checkpoint-every", "1", *TINY_TRAIN]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        code = main(args)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert f"cannot write checkpoint {tmp_path / 'checkpoint_1.pt'}" in last, err[-2000:]
    assert not list(tmp_path.glob("checkpoint_*")) and not list(tmp_path.glob(".tmp-*"))
