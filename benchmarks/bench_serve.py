#!/usr/bin/env python
"""``serve`` under load on the loopback: latency, throughput and memory, with batching on and off side by side.

    python benchmarks/bench_serve.py [--requests 200] [--concurrency 8] [--size 64x48] [--backbone resnet18]

Each side is a real ``python run.py serve`` process (``CUDA_VISIBLE_DEVICES=""``, R3Net with seeded random
weights: the work does not depend on them) sent ``--requests`` POST /predict requests of generated photos from
``--concurrency`` client threads (httpx); ``--max-batch 8`` is batching on, ``--max-batch 1`` off. Printed per
side: the p50 and p95 latency, requests/s, errors, and the server's resident memory (VmRSS) after the first 20
requests and after the last; then the ratio of the requests/s, on over off. ``tests/test_serve_load.py`` is its
short form (one side)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from serve_helpers import write_photo  # noqa: E402

WARMUP = 20  # requests before the first memory reading


def resident_mb(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), in MB (10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextlib.contextmanager
def server_process(checkpoint: Path, port: int, *extra: str, env: dict[str, str] | None = None) -> Iterator[Any]:
    """``python run.py serve`` on ``port`` until it answers /healthz; SIGTERM and waited for on leaving."""
    args = [sys.executable, str(REPO / "run.py"), "serve", "--checkpoint", str(checkpoint), "--port", str(port)]
    proc = subprocess.Popen([*args, *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not answer within 120 s")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def send(url: str, photos: list[bytes], requests: int, concurrency: int) -> dict[str, Any]:
    """``requests`` POST /predict of ``photos`` in turn from ``concurrency`` threads: latencies, errors, time."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=url, timeout=120, limits=limits) as client:

        def one(i: int) -> tuple[float, str | None]:
            start = time.perf_counter()
            try:
                response = client.post("/predict", files={"image": (f"{i}.png", photos[i % len(photos)])})
                problem = None if response.status_code == 200 else f"{response.status_code} {response.text}"
            except httpx.HTTPError as e:
                problem = f"{type(e).__name__}: {e}"
            return time.perf_counter() - start, problem

        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(one, range(requests)))
        seconds = time.perf_counter() - start
    latencies = sorted(latency for latency, _ in results)
    return {
        "requests": requests,
        "seconds": seconds,
        "latencies": latencies,
        "errors": [problem for _, problem in results if problem],
    }


def summary(result: dict[str, Any]) -> dict[str, float]:
    """p50 and p95 latency in ms, requests/s."""
    latencies = result["latencies"]
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": p95 * 1000,
        "requests_per_s": result["requests"] / result["seconds"],
    }


def photo_bytes(width: int, height: int, count: int = 4) -> list[bytes]:
    """``count`` generated photos of one size, as PNG files' bytes."""
    photos = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(count):
            photos.append(write_photo(Path(folder) / f"{seed}.png", width, height, seed=seed).read_bytes())
    return photos


def under_load(
    checkpoint: Path,
    port: int,
    photos: list[bytes],
    requests: int,
    concurrency: int,
    *extra: str,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One side: a server, ``WARMUP`` requests, its memory, the rest of the requests, its memory again."""
    url = f"http://127.0.0.1:{port}"
    with server_process(checkpoint, port, *extra, env=env) as proc:
        first = send(url, photos, WARMUP, concurrency)
        memory_first = resident_mb(proc.pid)
        rest = send(url, photos, requests - WARMUP, concurrency)
        memory_last = resident_mb(proc.pid)
        health = httpx.get(f"{url}/healthz", timeout=10).json()
    result = {
        "requests": requests,
        "seconds": first["seconds"] + rest["seconds"],
        "latencies": sorted(first["latencies"] + rest["latencies"]),
        "errors": first["errors"] + rest["errors"],
    }
    return {
        **summary(result),
        "errors": result["errors"],
        "memory_after_warmup_mb": memory_first,
        "memory_after_run_mb": memory_last,
        "forward_passes": health["forward_passes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--size", default="64x48", help="photo WIDTHxHEIGHT")
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    import os

    import torch

    from ignite_r3net.model.r3net import R3Net

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import cpu_env, free_port

    width, height = (int(v) for v in args.size.split("x"))
    photos = photo_bytes(width, height)
    env = cpu_env()
    env.pop("OMP_NUM_THREADS")  # the server's torch uses every core, as it would in use
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        checkpoint = Path(folder) / "r3net.pt"
        torch.save(R3Net(args.backbone).state_dict(), checkpoint)
        for name, batch in (("batching on", "8"), ("batching off", "1")):
            results[name] = under_load(
                checkpoint, free_port(), photos, args.requests, args.concurrency, "--max-batch", batch, env=env
            )
            figures = results[name]
            print(
                f"{name} (--max-batch {batch}): p50 {figures['p50_ms']:.0f} ms, p95 {figures['p95_ms']:.0f} ms, "
                f"{figures['requests_per_s']:.1f} requests/s, {len(figures['errors'])} errors, "
                f"{figures['forward_passes']} forward passes, memory {figures['memory_after_warmup_mb']:.0f} MB "
                f"after {WARMUP} requests, {figures['memory_after_run_mb']:.0f} MB after {args.requests}",
                flush=True,
            )
    ratio = results["batching on"]["requests_per_s"] / results["batching off"]["requests_per_s"]
    print(f"batching on / off: {ratio:.2f}x the requests/s ({args.size}, {args.backbone}, {os.cpu_count()} cores)")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ratio": ratio}, indent=1) + "\n")


if __name__ == "__main__":
    main()
