#!/usr/bin/env python
"""Run the benchmarks, each beside its baseline measured in the same run, and write one JSON.

    python benchmarks/run.py [--quick] [--data DIR] [--json FILE] [--only NAME ...]

Benchmarks (``--only`` names): pipeline, engine, metrics, scaling, evaluate, inference, figure, gpu, scan,
predict, cutout.
See benchmarks/README.md.
``--data`` is a folder in the MSRA10K layout; by default a synthetic set of ~400x300 images is
generated once into a cache folder (``$IGNITE_R3NET_BENCH_CACHE``, else ``~/.cache/ignite_r3net/bench``).
``--quick`` makes each benchmark short, for a first look; the full run is less noisy (8 minutes
15 s on the 2-core VM of the run README.md's table comes from).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402

NAMES = (
    "pipeline",
    "engine",
    "metrics",
    "scaling",
    "evaluate",
    "inference",
    "figure",
    "gpu",
    "scan",
    "predict",
    "cutout",
)
GOALS: dict[str, float | None] = {
    "pipeline": 3.5,
    "engine": 0.97,
    "metrics": 2.5,
    "scaling": 1.7,
    "evaluate": 1.5,
    "inference": None,
    "figure": None,
    "gpu": None,
    "scan": None,
    "predict": None,
    "cutout": None,  # two goals, in its line: the error ratio at most 0.5, the refinement at most 0.2 s
}

# per benchmark: settings for the full run, --quick and the hidden --tiny (tests)
SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "pipeline": {
        "full": {"samples": 240, "repeats": 5},
        "quick": {"samples": 96, "repeats": 3},
        "tiny": {"samples": 8, "repeats": 1, "batch_size": 4, "crop": 96},
    },
    "engine": {
        "full": {"iters": 60, "warmup": 5, "repeats": 5},
        "quick": {"iters": 20, "warmup": 4, "repeats": 2},
        "tiny": {"iters": 4, "warmup": 1, "repeats": 1, "crop": 32, "batch_size": 2},
    },
    "metrics": {"full": {"n_maps": 100}, "quick": {"n_maps": 40}, "tiny": {"n_maps": 4, "size": (60, 80)}},
    # enough work per iteration that the gloo all-reduce of ~19M gradients is not the whole story
    "scaling": {
        "full": {"iters": 30, "warmup": 5, "repeats": 2, "crop": 128, "batch_size": 8},
        "quick": {"iters": 14, "warmup": 4, "repeats": 1, "crop": 96, "batch_size": 6},
        "tiny": {"iters": 6, "warmup": 2, "crop": 32, "batch_size": 2},
    },
    # the whole command, process start included: enough images that the start is not the whole story
    "evaluate": {
        "full": {"images": 48, "repeats": 3},
        "quick": {"images": 24, "repeats": 1},
        "tiny": {"images": 4, "repeats": 1},
    },
    # the paper's backbone at MSRA10K's image size; --quick and --tiny export the smallest backbone,
    # whose export alone takes ~15 s of CPU (torch.export with dynamic height and width)
    "inference": {
        "full": {"backbone": "resnext101_32x4d", "size": (300, 400), "images": 3, "repeats": 3},
        "quick": {"backbone": "resnet18", "size": (300, 400), "images": 3, "repeats": 2},
        "tiny": {"backbone": "resnet18", "size": (48, 64), "images": 1, "repeats": 1, "threads": (1,)},
    },
    "figure": {
        "full": {"n_maps": 100, "repeats": 3},
        "quick": {"n_maps": 40, "repeats": 2},
        "tiny": {"n_maps": 6, "size": (60, 80), "rows": 2, "repeats": 1},
    },
    # the speed modes of gpu_check.py on one GPU (its other checks: python benchmarks/gpu_check.py)
    "gpu": {"full": {"iters": 50}, "quick": {"iters": 20, "warmup": 5}, "tiny": {"iters": 2, "warmup": 1}},
    # the 10,000 pairs (a relaunch must scan them in at most 1 s)
    "scan": {
        "full": {"pairs": 10_000, "repeats": 2},
        "quick": {"pairs": 2000, "repeats": 1},
        "tiny": {"pairs": 50, "repeats": 1, "warm_runs": 1},
    },
    # the images of --data (by default 48 of 300x400); the paper's backbone in the full run
    "predict": {
        "full": {"backbone": "resnext101_32x4d", "images": 24, "repeats": 2},
        "quick": {"backbone": "resnet18", "images": 24, "repeats": 1},
        "tiny": {"backbone": "resnet18", "images": 4, "repeats": 1},
    },
    # generated composites and the masks of --data, blurred; the refinement of a 1024x1024 photo, and one predict
    "cutout": {
        "full": {"generated": 16, "masks": 16, "repeats": 7, "predict_repeats": 2},
        "quick": {"generated": 6, "masks": 6, "repeats": 3, "predict_repeats": 1},
        "tiny": {"generated": 2, "size": (64, 80), "masks": 2, "side": 128, "repeats": 1, "predict_repeats": 1},
    },
}


def default_data(tiny: bool) -> Path:
    """The synthetic benchmark set (MSRA10K layout), generated once and cached."""
    from ignite_r3net.data.synthetic import make_synthetic_dataset

    cache = Path(os.environ.get("IGNITE_R3NET_BENCH_CACHE", Path.home() / ".cache" / "ignite_r3net" / "bench"))
    if tiny:  # tests: a handful of small images, all of one size: on two threads the first forward of each
        # new input shape costs ~1 s (oneDNN's setup), 4 of the 1-process evaluate's ~12 s of CPU at 4 sizes
        train, _ = make_synthetic_dataset(cache / "tiny", n_train=8, n_val=1, size=(120, 120), seed=2018)
    else:  # about the size of MSRA10K images (400x300), larger than the reference DDP script's crop of 300
        train, _ = make_synthetic_dataset(cache / "msra_like", n_train=48, n_val=1, size=(300, 400), seed=2018)
    return train


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        import ignite
        import torchvision

        info.update(torchvision=torchvision.__version__, ignite=ignite.__version__)
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        info["load_average"] = os.getloadavg()
    except OSError:
        pass
    return info


# --------------------------------------------------------------------------------------- runners


def run_pipeline(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_pipeline import bench_pipeline

    return bench_pipeline(data, **s)


def run_engine(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_engine import bench_engine

    return bench_engine(data, **s)


def run_metrics(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_metrics import bench_metrics

    return bench_metrics(**s)


def run_scaling(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_scaling import bench_scaling

    return bench_scaling(data, **s)


def run_evaluate(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_evaluate import bench_evaluate

    return bench_evaluate(data, **s)


def run_inference(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_inference import bench_inference

    return bench_inference(**s)


def run_figure(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_figure import bench_figure

    return bench_figure(**s)


def run_gpu(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from gpu_check import gpu_speed

    return gpu_speed(**s)


def run_scan(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_scan import bench_scan

    return bench_scan(**s)


def run_predict(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_predict import bench_predict

    return bench_predict(data, **s)


def run_cutout(data: Path, s: dict[str, Any]) -> dict[str, Any]:
    from bench_cutout import bench_cutout

    return bench_cutout(data, **s)


RUNNERS: dict[str, Callable[[Path, dict[str, Any]], dict[str, Any]]] = {
    "pipeline": run_pipeline,
    "engine": run_engine,
    "metrics": run_metrics,
    "scaling": run_scaling,
    "evaluate": run_evaluate,
    "inference": run_inference,
    "figure": run_figure,
    "gpu": run_gpu,
    "scan": run_scan,
    "predict": run_predict,
    "cutout": run_cutout,
}


def _goal(name: str, value: float) -> str:
    goal = GOALS[name]
    if goal is None:
        return ""
    return f" (goal >= {goal}{'' if value >= goal else ', NOT MET'})"


def format_line(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{name}: FAILED {r['error']}"
    if name == "pipeline":
        return (
            f"pipeline: baseline (reference DDP script, PIL) {r['baseline_samples_per_s']:.1f} samples/s, "
            "ours DataLoader-worker "
            f"share (GPU training) {r['ours_worker_samples_per_s']:.1f} samples/s, worker_speedup "
            f"{r['worker_speedup']:.2f}x{_goal(name, r['worker_speedup'])}; ours with rotation and "
            f"normalisation on the CPU too {r['ours_full_cpu_samples_per_s']:.1f} samples/s, "
            f"{r['full_cpu_speedup']:.2f}x"
        )
    if name == "engine":
        return (
            f"engine: bare {r['bare_it_per_s']:.2f} it/s, ignite {r['ignite_it_per_s']:.2f} it/s, "
            f"ratio {r['ratio']:.3f}{_goal(name, r['ratio'])}; Engine and handlers "
            f"{r['framework_ms_per_iter']:.2f} ms/iteration ({100 * r['framework_share']:.2f}% of the ignite run)"
        )
    if name == "metrics":
        return (
            f"metrics: pysodmetrics {r['pysodmetrics_images_per_s']:.1f} images/s, ours "
            f"{r['ours_images_per_s']:.1f} images/s, speedup {r['speedup']:.2f}x{_goal(name, r['speedup'])}; "
            f"one map per update {r['speedup_per_map']:.2f}x"
        )
    if name == "scaling":
        return (
            f"scaling: 1 process {r['one_proc_images_per_s']:.1f} images/s, 2 processes "
            f"{r['two_proc_images_per_s']:.1f} images/s, ratio {r['ratio']:.2f}{_goal(name, r['ratio'])}"
        )
    if name == "evaluate":
        from bench_evaluate import format_evaluate

        return format_evaluate(r, _goal(name, r["ratio"]))
    if name == "scan":
        return (
            f"scan: {r['settings']['pairs']} pairs, cold (no scan cache) {r['cold_s']:.2f} s, warm (a relaunch) "
            f"{r['warm_s']:.3f} s, ratio {r['ratio']:.1f}x"
        )
    if name == "predict":
        return (
            f"predict: {r['settings']['backbone']}, {r['settings']['images']} images; 1 process "
            f"{r['one_proc_images_per_s']:.2f} images/s, 2 processes {r['two_proc_images_per_s']:.2f} images/s, "
            f"ratio {r['ratio']:.2f}"
        )
    if name == "cutout":
        from bench_cutout import format_cutout

        return format_cutout(r)
    if name == "inference":
        from bench_inference import format_inference

        return format_inference(r)
    if name == "figure":
        from bench_figure import format_figure

        return format_figure(r)
    from gpu_check import format_speed

    return format_speed(r)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs for a first look (the full run is less noisy)")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # tests: seconds, not figures
    parser.add_argument("--data", type=Path, help="training folder in MSRA10K layout (default: cached synthetic set)")
    parser.add_argument("--json", type=Path, help="write every figure, the machine and the command line here")
    parser.add_argument(
        "--only", nargs="+", choices=NAMES, metavar="NAME", help=f"run only these benchmarks ({', '.join(NAMES)})"
    )
    args = parser.parse_args(argv)
    level = "tiny" if args.tiny else "quick" if args.quick else "full"
    names = [n for n in NAMES if not args.only or n in args.only]

    data = args.data or default_data(args.tiny)
    words = sys.argv if argv is None else [str(HERE / "run.py"), *argv]  # main(argv) inside another script (tests)
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *words]),
        "level": level,
        "data": str(data),
        "machine": machine(),
    }
    print(
        f"machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, torch "
        f"{report['machine']['torch']}; data {data}; {level}",
        flush=True,
    )
    failed = False
    for name in names:
        start = time.perf_counter()
        try:
            result = RUNNERS[name](data, dict(SETTINGS[name][level]))
        except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others
            failed = True
            result = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        result["seconds"] = time.perf_counter() - start
        report[name] = result
        print(format_line(name, result), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"written {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
