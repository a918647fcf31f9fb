"""Progress: one bar over the whole run from a resumed iteration; plain lines every 10% in files;
nothing with --no-progress; ETA from the rate so far."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest
from ignite.engine import Engine

from ignite_r3net.progress import Clock, Progress, format_duration
from ignite_r3net.training.engine import RunClock, attach_progress_bar


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr is in an interactive shell."""

    def isatty(self) -> bool:
        return True


def _resumed_run(iteration: int, iters: int, stream: io.StringIO, progress: bool = True) -> None:
    """An Engine restored at ``iteration`` (as ``--resume`` restores it) run to ``iters`` with the
    run's progress attached, writing to ``stream``."""
    trainer = Engine(lambda engine, batch: None)
    trainer.load_state_dict({"iteration": iteration, "epoch_length": 3, "max_iters": iters})
    config = SimpleNamespace(iters=iters, progress=progress)
    real = Progress.__init__

    def to_stream(self, *args, **kwargs):  # the bar's stream is stderr; here the test's
        real(self, *args, **kwargs, stream=stream)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Progress, "__init__", to_stream)
        attach_progress_bar(trainer, RunClock(images_per_iteration=8), config)
        trainer.run(range(3))


def test_plain_lines_every_ten_percent_from_the_resumed_iteration() -> None:
    out = io.StringIO()
    _resumed_run(iteration=35, iters=100, stream=out)
    lines = out.getvalue().splitlines()
    done = [int(line.split()[1].split("/")[0]) for line in lines]
    assert done == [40, 50, 60, 70, 80, 90, 100], lines
    assert all(line.startswith(f"train: {n}/100 iterations ({n}%), ") for n, line in zip(done, lines))
    assert "images/s" in lines[-1] and "elapsed" in lines[-1] and "eta 0:00" in lines[-1]
    assert "\r" not in out.getvalue()


def test_terminal_bar_starts_at_the_resumed_iteration() -> None:
    out = Terminal()
    _resumed_run(iteration=35, iters=100, stream=out)
    screen = out.getvalue()
    assert "\r" in screen  # a bar redrawn in place
    first = screen.split("\r")[1]
    assert first.startswith("train:  35%|") and "35/100 iterations" in first, first
    assert "100/100 iterations" in screen.split("\r")[-1] and "images/s" in screen.split("\r")[-1]


def test_no_progress_writes_nothing() -> None:
    for stream in (io.StringIO(), Terminal()):
        _resumed_run(iteration=0, iters=20, stream=stream, progress=False)
        assert stream.getvalue() == ""


def test_transient_bar_is_not_written_to_files() -> None:
    out = io.StringIO()
    with Progress(10, "validate 400", "image", transient=True, stream=out) as bar:
        bar.update(10)
    assert out.getvalue() == ""


def test_eta_from_the_rate_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = Clock(done=200)  # resumed at 200
    assert clock.rate(200) is None and clock.eta(200, 1000) is None
    now[0] += 50.0
    assert clock.rate(300) == pytest.approx(2.0)  # 100 units in 50 s
    assert clock.eta(300, 1000) == pytest.approx(350.0)  # 700 units left at 2/s
    assert [format_duration(s) for s in (0, 59.6, 61, 3599, 3600 + 62)] == ["0:00", "1:00", "1:01", "59:59", "1:01:02"]


def test_a_rank_counting_for_all_ranks_never_passes_the_total() -> None:
    out = io.StringIO()
    with Progress(11, "predict", "image", stream=out) as bar:
        bar.update(8)  # 4 images of rank 0, times 2 ranks
        bar.update(8)
        assert bar.n == 11
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("predict: 11/11 images (100%), ")
    out = io.StringIO()
    with Progress(10, "evaluate", "image", stream=out) as bar:
        bar.update(4)
        bar.complete()  # this rank's share is done
    assert out.getvalue().splitlines()[-1].startswith("evaluate: 10/10 images (100%)")
