"""``serve`` under load on the loopback, bounded: 200 requests at concurrency 8 against a resnet18 model (64x48
photos) answered without an error, and the server's memory after them within 64 MB of its memory after the first
20 (no leak per request). The figures are printed (``-s``); ``benchmarks/bench_serve.py`` is the long form."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from helpers import REPO, cpu_env, free_port  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_serve import WARMUP, photo_bytes, under_load  # noqa: E402

REQUESTS, CONCURRENCY = 200, 8
MEMORY_MARGIN_MB = 64  # allocator caches settling after the warm-up; a leak of ~0.3 MB per request exceeds it


@pytest.mark.slow
@pytest.mark.serial  # latency figures and the server's memory: not beside another serial test
@pytest.mark.timeout(240)
def test_200_requests_at_concurrency_8_without_errors_or_growing_memory(spread_checkpoint: Path) -> None:
    env = cpu_env()
    env.pop("OMP_NUM_THREADS")  # the server's torch uses the machine's cores, as it would in use
    figures = under_load(spread_checkpoint, free_port(), photo_bytes(64, 48), REQUESTS, CONCURRENCY, env=env)
    print(
        f"\nserve under load: {REQUESTS} requests at concurrency {CONCURRENCY}: p50 {figures['p50_ms']:.0f} ms, "
        f"p95 {figures['p95_ms']:.0f} ms, {figures['requests_per_s']:.1f} requests/s, "
        f"{figures['forward_passes']} forward passes; memory {figures['memory_after_warmup_mb']:.0f} MB after "
        f"{WARMUP} requests, {figures['memory_after_run_mb']:.0f} MB after {REQUESTS}"
    )
    assert figures["errors"] == []
    assert figures["memory_after_run_mb"] <= figures["memory_after_warmup_mb"] + MEMORY_MARGIN_MB
    assert figures["forward_passes"] < REQUESTS  # concurrent requests were batched
