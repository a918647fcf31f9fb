"""How ``profile`` (and ``benchmarks/gpu_check.py``) measure a model: parameters, multiply-accumulates from
``torch.utils.flop_counter``, latencies with the device synchronised around each timed run, peak memory (the
CUDA allocator's peak on a GPU, the growth of the process's peak resident memory on the CPU), and the largest
training batch a GPU holds (``find_max_batch``)."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

CUDA_MEMORY = "CUDA allocator peak (torch.cuda.max_memory_allocated) over the timed runs, weights included"
CPU_MEMORY = (
    "process peak resident memory (Linux VmHWM, reset after the warm-up) over the timed runs, minus the resident "
    "memory before the row's first run: what the runs add to the loaded model, as the OS sees it"
)
CPU_MEMORY_FALLBACK = (
    "growth of the process's lifetime peak resident memory (ru_maxrss) during the row: a lower bound, 0 when an "
    "earlier row peaked higher"
)


def count_parameters(model: nn.Module) -> int:
    """The number of parameters of ``model`` (every one, trainable or not; buffers are not parameters)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def macs_per_image(model: nn.Module, height: int, width: int, device: torch.device | str = "cpu") -> int:
    """Multiply-accumulates of one forward pass of one ``height`` x ``width`` image in eval mode, counted by
    ``torch.utils.flop_counter`` (its convolutions and matrix products; normalisation, activations, pooling and
    resizing count nothing, as in the saliency papers' counters): MACs = FLOPs / 2."""
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            model(torch.zeros(1, 3, height, width, device=device))
    finally:
        model.train(was_training)
    return counter.get_total_flops() // 2


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously; the CPU's work is done on return)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Timing:
    """The latencies (seconds) of the timed runs and the peak memory (bytes; None when not measurable)."""

    seconds: list[float]
    peak_memory: int | None
    memory_measure: str

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        """The 95th percentile (linear interpolation between the two nearest runs; one run: itself)."""
        if len(self.seconds) < 2:
            return self.seconds[0]
        return statistics.quantiles(self.seconds, n=20, method="inclusive")[-1]


def time_runs(run: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> Timing:
    """Run ``run`` ``warmup`` times untimed, then ``repeats`` times, each timed between two synchronisations of
    ``device`` (so that a GPU's queued work is inside its own run and no other), with the peak memory."""
    memory = PeakMemory(device)
    for _ in range(warmup):
        run()
    synchronize(device)
    memory.reset()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return Timing(seconds, memory.peak(), memory.measure)


class PeakMemory:
    """Peak memory from ``reset`` on: CUDA's allocator on a GPU; on the CPU, the process's peak resident memory
    above its resident memory when this object was made (before the row's first run)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.resettable = not self.cuda and _reset_peak_rss()
        self.measure = CUDA_MEMORY if self.cuda else CPU_MEMORY if self.resettable else CPU_MEMORY_FALLBACK
        self.before = 0 if self.cuda else _status_bytes("VmRSS") if self.resettable else _max_rss()

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.resettable:
            _reset_peak_rss()

    def peak(self) -> int | None:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated(self.device))
        now = _status_bytes("VmHWM") if self.resettable else _max_rss()
        return None if now is None or self.before is None else max(now - self.before, 0)


def _status_bytes(key: str) -> int | None:
    """``key``'s figure in /proc/self/status (VmRSS: resident memory now; VmHWM: its peak), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the process's peak resident memory to its current one (Linux 4.0+: ``clear_refs`` 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_bytes("VmHWM") is not None


def _max_rss() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def is_out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is the device running out of memory (CUDA's error, or an allocator's message)."""
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def free_cached_memory(device: torch.device) -> None:
    """Give the CUDA allocator's cached blocks back after a row (or a failed try), so the next starts clean."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name (``lscpu``'s "Model name", from /proc/cpuinfo)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or ``n/a`` where the system has none."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


LIMIT = 4096  # no search beyond this batch: a model that small needs no search


def fits(step: Callable[[int], object], batch: int, device: torch.device) -> bool:
    """Whether ``step(batch)`` runs without the device running out of memory (other errors propagate)."""
    try:
        step(batch)
    except Exception as e:  # torch.cuda.OutOfMemoryError, or a RuntimeError from another allocator
        if not is_out_of_memory(e):
            raise
        return False
    finally:
        free_cached_memory(device)
    return True


def find_max_batch(step: Callable[[int], object], device: torch.device, start: int = 1, limit: int = LIMIT) -> int:
    """``profile --train --find-max-batch``: the largest batch from ``start`` (a training step needs 2) to ``limit``
    for which ``step`` fits, 0 when ``start`` does not, found by trying real steps: doubling until one runs out of
    memory, then halving the gap between the largest batch that fitted and the smallest that did not. Assumes
    that a batch fits when a larger one does (memory grows with the batch)."""
    if not fits(step, start, device):
        return 0
    low, high = start, None  # the largest batch known to fit; the smallest known not to
    batch = 2 * start
    while batch <= limit:
        if not fits(step, batch, device):
            high = batch
            break
        low, batch = batch, batch * 2
    if high is None:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        if fits(step, middle, device):
            low = middle
        else:
            high = middle
    return low
