"""`benchmarks/run.py` runs end to end and writes every key (figures are machine-dependent: no goals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_run_quick_tiny_pipeline_engine(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", IGNITE_R3NET_BENCH_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "run.py"),
            "--quick",
            "--tiny",
            "--only",
            "pipeline",
            "engine",
            "--json",
            str(out),
        ],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads(out.read_text())
    assert {"command", "machine", "pipeline", "engine"} <= set(report)
    assert report["machine"]["cores"] >= 1 and report["machine"]["torch"] == __import__("torch").__version__
    assert "--only" in report["command"]
    for name, keys in {
        "pipeline": (
            "baseline_samples_per_s",
            "ours_worker_samples_per_s",
            "worker_speedup",
            "ours_full_cpu_samples_per_s",
            "full_cpu_speedup",
        ),
        "engine": ("bare_it_per_s", "ignite_it_per_s", "ratio"),
    }.items():
        for key in keys:
            assert report[name][key] > 0, (name, key, report[name])
    profile = report["pipeline"]["worker_profile_ms_per_sample"]
    assert set(profile) == {"decode_jpeg_png", "crop_flip", "collate", "worker_total"}
    assert all(v > 0 for v in profile.values()), profile
    assert "pipeline: baseline" in proc.stdout and "worker_speedup" in proc.stdout and "engine: bare" in proc.stdout
