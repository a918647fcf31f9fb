"""Stop a training run many times in a row on a loaded machine; count the hangs.

Each run is one case of ``tests/test_reliability.py::test_an_interrupt_ends_the_whole_job_at_once_without_tracebacks``,
started as that test starts it (``helpers.start_long_run``: ``python run.py --workers 2 --iters 500``
in its own process group). Once ``train.log`` shows iteration 1 the signal goes out, and every
process of the group must be gone within ``--deadline`` seconds. Meanwhile ``--load`` busy-loop
processes keep the cores busy; each ends by itself once the runs are done.

A run still alive at the deadline is a hang: the thread names and signal masks (``/proc``) and the
stacks (``py-spy dump``) of every process of its group go to ``--dumps`` before the group is killed.

    python tests/stress/stress_interrupt.py --runs 10 --load 4                  # Ctrl-C, 2 ranks
    python tests/stress/stress_interrupt.py --runs 10 --load 4 --way term-launcher

Figures: benchmarks/README.md, "Stopping a run under load".
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from helpers import group_pids, make_tiny_dataset, start_long_run, wait_for_iterations  # noqa: E402


class Way(NamedTuple):
    """A way to stop a run: the signal, who gets it, the ranks, and the exit code and last line."""

    sig: signal.Signals
    target: str
    nproc: int
    code: int
    said: str


WAYS = {
    "ctrl-c": Way(signal.SIGINT, "process group", 2, 130, "interrupted"),
    "int-launcher": Way(signal.SIGINT, "launcher", 2, 130, "interrupted"),
    "term-launcher": Way(signal.SIGTERM, "launcher", 2, 143, "terminated"),
    # torchrun, SLURM and systemd: SIGTERM to a rank that is its own process, and to its workers
    "term-rank": Way(signal.SIGTERM, "process group", 1, 143, "terminated"),
}


@dataclass
class Outcome:
    """One stopped run: its exit code (None: it hung), seconds from the signal until its whole
    group was gone, the last line it printed, and where its stacks went if it hung."""

    code: int | None
    seconds: float
    last_line: str
    dumps: Path | None = None

    @property
    def hung(self) -> bool:
        return self.code is None


@contextmanager
def busy_loops(count: int, seconds: float) -> Iterator[None]:
    """``count`` processes that spin a core each for at most ``seconds`` (they end by themselves)."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def dump_stacks(pgid: int, path: Path) -> None:
    """Every thread of every process of the group: name and signal masks, then py-spy's stacks."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with path.open("w") as out:
        for pid in group_pids(pgid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
                masks = [_signal_masks(pid, task.name) for task in sorted(Path(f"/proc/{pid}/task").iterdir())]
            except OSError:
                continue  # gone meanwhile
            out.write(f"===== pid {pid}: {cmdline}\n" + "".join(f"  thread {m}\n" for m in masks))
            out.flush()
            try:
                dump = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
                out.write(dump.stdout + dump.stderr + "\n")
            except (OSError, subprocess.TimeoutExpired) as e:
                out.write(f"py-spy failed: {e}\n")


def _signal_masks(pid: int, tid: str) -> str:
    """A thread's id, name and signal masks (blocked, pending, caught, ignored), from /proc."""
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
    fields = dict(line.split(":\t", 1) for line in status if ":\t" in line)
    keys = ("Name", "SigBlk", "SigPnd", "ShdPnd", "SigCgt", "SigIgn")
    return tid + " " + " ".join(f"{k}={fields.get(k, '?').strip()}" for k in keys)


def stop_one_run(data: Path, work: Path, way: Way, deadline: float, dumps: Path | None) -> Outcome:
    """Start a long run, signal it after iteration 1, and wait for its whole group to end."""
    out, err_path = work / "out", work / "stderr.txt"
    with err_path.open("w") as err:  # a file: a pipe nobody reads could block the run
        proc = start_long_run(data, out, workers=2, nproc=way.nproc, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_iterations(proc, out, 1, timeout=300)
        if way.target == "launcher":
            os.kill(proc.pid, way.sig)
        else:
            os.killpg(proc.pid, way.sig)
        signalled = time.monotonic()
        while group_pids(proc.pid) and time.monotonic() < signalled + deadline:
            time.sleep(0.02)
        seconds = time.monotonic() - signalled
        lines = err_path.read_text(errors="replace").strip().splitlines()
        last = lines[-1] if lines else ""
        if not group_pids(proc.pid):
            return Outcome(proc.wait(), seconds, last)
        if dumps is None:
            return Outcome(None, seconds, last)
        dumps.mkdir(parents=True, exist_ok=True)
        path = dumps / f"hang-{time.strftime('%Y%m%d-%H%M%S')}-{proc.pid}.txt"
        dump_stacks(proc.pid, path)
        with path.open("a") as f:
            f.write("===== stderr of the run\n" + err_path.read_text(errors="replace")[-6000:])
        return Outcome(None, seconds, last, path)
    finally:
        if group_pids(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stress(
    runs: int,
    load: int,
    deadline: float,
    way: Way = WAYS["ctrl-c"],
    dumps: Path | None = None,
    max_dumps: int = 2,
    verbose: bool = True,
) -> list[Outcome]:
    """``runs`` stopped runs while ``load`` busy loops spin; the stacks of the first ``max_dumps``
    hangs go to ``dumps``. The busy loops outlast the runs (at most a minute each to iteration 1
    on a loaded 2-core machine, plus the deadline) and end by themselves."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="stress-interrupt-") as tmp:
        data, _ = make_tiny_dataset(Path(tmp) / "data", n=10)
        with busy_loops(load, seconds=runs * (90 + deadline)):
            for i in range(runs):
                work = Path(tmp) / f"run{i}"
                work.mkdir()
                hangs = sum(o.hung for o in outcomes)
                outcome = stop_one_run(data, work, way, deadline, dumps if hangs < max_dumps else None)
                outcomes.append(outcome)
                if verbose:
                    print(f"run {i + 1}/{runs}: {_describe(outcome)}", flush=True)
                shutil.rmtree(work, ignore_errors=True)
    return outcomes


def _describe(outcome: Outcome) -> str:
    said = "HANG" if outcome.hung else f"exit {outcome.code}"
    where = f", stacks in {outcome.dumps}" if outcome.dumps else ""
    return f"{said} after {outcome.seconds:.1f} s, last line {outcome.last_line!r}{where}"


def summary(outcomes: list[Outcome]) -> str:
    """Runs, hangs, runs that took over 5 s, exit codes and the slowest ending."""
    codes = collections.Counter("hang" if o.hung else o.code for o in outcomes)
    ended = [o.seconds for o in outcomes if not o.hung]
    slowest = f"{max(ended):.1f} s" if ended else "-"
    over = sum(1 for o in outcomes if o.hung or o.seconds > 5)
    hangs = codes.pop("hang", 0)
    return f"{len(outcomes)} runs, {hangs} hangs, {over} over 5 s, exit codes {dict(codes)}, slowest {slowest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=2 * (os.cpu_count() or 1), help="busy-loop processes")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds the whole group may take to end")
    parser.add_argument("--way", choices=sorted(WAYS), default="ctrl-c")
    parser.add_argument("--dumps", type=Path, default=Path("stress-dumps"), help="folder for the stacks of hangs")
    args = parser.parse_args()
    sigint = signal.getsignal(signal.SIGINT)
    print(f"SIGINT here: {'ignored' if sigint == signal.SIG_IGN else 'handled'}; {args.load} busy loops", flush=True)
    outcomes = stress(args.runs, args.load, args.deadline, WAYS[args.way], args.dumps.resolve())
    print(summary(outcomes))
    return 1 if any(o.hung for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
