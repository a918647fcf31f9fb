"""How far long work has come, on the console: a bar with rate, elapsed time and ETA on a terminal, a
plain line every ``PLAIN_STEP`` percent where stderr is a file (a SLURM log), nothing with ``--no-progress``."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")

PLAIN_STEP = 10  # percent of the work between two plain lines when stderr is not a terminal

_TQDM_IN_USE: list[bool] = []  # set once this process drew a bar (and gave tqdm a thread lock)


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (``M:SS`` under an hour), as tqdm and ``time`` print durations."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Clock:
    """Rate and time left, averaged since the start so that recurring pauses (validation) count."""

    def __init__(self, done: int = 0) -> None:
        self.start, self.done_at_start = time.monotonic(), done

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def rate(self, done: int) -> float | None:
        """Units per second, or None before the first unit."""
        elapsed, finished = self.elapsed(), done - self.done_at_start
        return finished / elapsed if finished > 0 and elapsed > 0 else None

    def eta(self, done: int, total: int) -> float | None:
        """Seconds to ``total`` at the rate so far, or None before the first unit."""
        rate = self.rate(done)
        return None if rate is None else max(total - done, 0) / rate


class Progress:
    """A bar over ``total`` units from ``initial``, its rate in ``rate_unit`` (``per_unit`` per unit); a
    ``transient`` bar is erased when done and never written to a file."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "it",
        initial: int = 0,
        rate_unit: str | None = None,
        per_unit: float = 1.0,
        enabled: bool = True,
        transient: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        self.total, self.desc, self.unit, self.n = max(int(total), 0), desc, unit, int(initial)
        self.rate_unit, self.per_unit = rate_unit or unit, per_unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock = Clock(self.n)
        try:
            terminal = self.stream.isatty()
        except (AttributeError, ValueError):  # a closed or replaced stream
            terminal = False
        self._bar = _tqdm_bar(self, transient) if enabled and terminal and self.total else None
        # plain lines: the next percentage to report (beyond 100: never)
        self._next_percent = 101 if not enabled or terminal or transient else self._after(self.n)

    def _after(self, n: int) -> int:
        percent = 100 * n / self.total if self.total else 100
        return min(100, (math.floor(percent / PLAIN_STEP) + 1) * PLAIN_STEP)

    def status(self) -> str:
        """``12.3 images/s, elapsed 0:41, eta 1:02:03`` (rate and ETA once a unit is done)."""
        parts = []
        rate = self.clock.rate(self.n)
        if rate is not None:
            rate *= self.per_unit
            parts.append(f"{rate:.3g} {self.rate_unit}s/s" if rate < 100 else f"{rate:.0f} {self.rate_unit}s/s")
        parts.append(f"elapsed {format_duration(self.clock.elapsed())}")
        eta = self.clock.eta(self.n, self.total)
        if eta is not None:
            parts.append(f"eta {format_duration(eta)}")
        return ", ".join(parts)

    def update(self, n: int = 1) -> None:
        """``n`` more units done (never beyond ``total``: a rank's count times the ranks may overshoot)."""
        n = min(n, self.total - self.n) if self.total else n
        self.n += n
        if self._bar is not None:
            self._bar.set_postfix_str(self.status(), refresh=False)
            self._bar.update(n)
        elif self.total and 100 * self.n >= self._next_percent * self.total:
            self._next_percent = self._after(self.n) if self.n < self.total else 101
            done = min(self.n, self.total)
            line = f"{self.desc}: {done}/{self.total} {self.unit}s ({100 * done // self.total}%), {self.status()}"
            print(line, file=self.stream, flush=True)

    def complete(self) -> None:
        """All done (this rank's share is, and the others' are about to be)."""
        if self.n < self.total:
            self.update(self.total - self.n)

    def counted(self, items: Iterable[T], step: int = 1) -> Iterator[T]:
        for item in items:
            yield item
            self.update(step)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self.status(), refresh=False)
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def console_print(line: str, file: IO[str] | None = None) -> None:
    """Print ``line`` above any bar on the screen (a plain ``print`` would cut through it)."""
    file = file if file is not None else sys.stdout
    if _TQDM_IN_USE:
        from tqdm import tqdm

        tqdm.write(line, file=file)
        file.flush()
    else:
        print(line, file=file, flush=True)


def _tqdm_bar(progress: Progress, transient: bool) -> Any:
    from tqdm import tqdm

    if not _TQDM_IN_USE:
        # tqdm's default lock is a multiprocessing semaphore, which a worker's fast exit would leak
        tqdm.set_lock(threading.RLock())
        # no monitor thread: a SIGTERM the kernel handed to it would wait for the main thread to
        # leave its C call (a collective) before Python ran the handler (see threads_leave_signals_to_main)
        tqdm.monitor_interval = 0
        _TQDM_IN_USE.append(True)
    return tqdm(
        total=progress.total,
        initial=progress.n,
        desc=progress.desc,
        unit=progress.unit,
        file=progress.stream,
        leave=not transient,
        dynamic_ncols=True,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}s{postfix}",  # tqdm puts ", " first
        postfix=progress.status(),
    )
