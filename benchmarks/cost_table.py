"""What each model costs on the CPU, and what INT8 costs it in quality: the table of docs/profile.md and the
README. For each configuration: parameters, GMACs of one 320x320 image, and the batch-1 latency at 320x320 in
PyTorch FP32, ONNX FP32 (``export --format onnx``) and ONNX INT8 (``export --quantize int8``), all measured in
this one run: every row's three modes are timed once per round, round after round, so that a change of the
machine's load falls on all of them alike (median and 95th percentile over the rounds, ``profile``'s timing
code). Then the INT8 file's max F change against its own float model on held-out images: each configuration is
trained here for ``--iters`` iterations from random weights on a generated set (no network: no ImageNet
weights), calibrated on 32 of its training images and checked on its 40 validation images (what ``export
--quantize int8`` prints); the latencies are those trained models'. The last column is the paper's PyTorch
FP32 latency over the row's INT8 one.

    python benchmarks/cost_table.py --work bench-cost --json cost.json

``--work DIR`` keeps the data, the trained runs and the exported files; a rerun trains and exports only what
is missing there, and measures everything again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from rembg_cost import run_py  # noqa: E402  (the same benchmarks folder)

from ignite_r3net.data.synthetic import make_synthetic_dataset  # noqa: E402
from ignite_r3net.data.transforms import normalize_image  # noqa: E402
from ignite_r3net.inference.model import load_exported  # noqa: E402
from ignite_r3net.model.backbones import model_name  # noqa: E402
from ignite_r3net.model.trained_model import build_model, read_trained_weights  # noqa: E402
from ignite_r3net.profiling import measure  # noqa: E402

# (backbone, head width): the paper's model; the smallest torchvision backbone with the paper's head and a slim
# one; a mobile timm backbone with a slim head; a modern timm backbone with the paper's head
CONFIGS = (
    ("resnext101_32x4d", 1.0),
    ("resnet18", 1.0),
    ("resnet18", 0.25),
    ("timm:mobilenetv3_large_100", 0.25),
    ("timm:convnext_tiny", 1.0),
)
SIZE = 320
MODES = ("pytorch_fp32", "onnx_fp32", "onnx_int8")


def prepare(backbone: str, width: float, work: Path, iters: int) -> dict[str, Any]:
    """Train the configuration (unless ``work`` holds it), export it as ONNX FP32 and INT8; the INT8 check."""
    train, val = make_synthetic_dataset(work / "data", n_train=200, n_val=40, seed=2018)
    calibration = work / "data" / "calibration"
    if not calibration.is_dir():
        calibration.mkdir()
        for image in sorted(train.glob("*.jpg"))[:32]:
            shutil.copy(image, calibration)
    run = work / f"{backbone.replace(':', '-')}-w{width:g}-{iters}it"
    checkpoint = run / f"checkpoint_{iters}.pt"
    if not checkpoint.is_file():
        run_py(
            "--data", str(train), "--val-data", str(val), "--output-dir", str(run), "--backbone", backbone,
            "--head-width", str(width), "--pretrained", "none", "--iters", str(iters), "--checkpoint-every",
            str(iters), "--crop", "64", "--batch-size", "8", "--lr", "0.007", "--workers", "0", "--no-val-at-start",
            "--no-progress",
        )  # fmt: skip
    files = {"onnx_fp32": run / "float.onnx", "onnx_int8": run / "int8.onnx"}
    if not files["onnx_fp32"].is_file():
        run_py("export", "--checkpoint", str(checkpoint), "--format", "onnx", "--output", str(files["onnx_fp32"]))
    if not files["onnx_int8"].is_file():
        run_py(
            "export", "--checkpoint", str(checkpoint), "--format", "onnx", "--output", str(files["onnx_int8"]),
            "--quantize", "int8", "--calibrate", str(calibration), "--check-data", str(val), "--max-drop", "1",
        )  # fmt: skip
    import onnx

    props = {p.key: p.value for p in onnx.load(str(files["onnx_int8"]), load_external_data=False).metadata_props}
    return {"checkpoint": checkpoint, "files": files, "int8_check": json.loads(props["int8_check"])}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="bench-cost", help="folder kept between runs; default: bench-cost")
    parser.add_argument("--iters", type=int, default=200, help="training iterations per model; default: 200")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (after 2 untimed); default: 10")
    parser.add_argument("--json", help="also write the figures as JSON to FILE")
    args = parser.parse_args(argv)
    work = Path(args.work)
    prepared = {config: prepare(*config, work, args.iters) for config in CONFIGS}
    cpu = torch.device("cpu")
    image = torch.randint(0, 256, (1, 3, SIZE, SIZE), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    normalised = normalize_image(image)  # PyTorch as profile runs it; the ONNX files normalise inside
    runs, rows = {}, {}
    for config, ready in prepared.items():
        model = build_model(read_trained_weights(ready["checkpoint"]))
        sessions = {mode: load_exported(ready["files"][mode], threads=torch.get_num_threads()) for mode in MODES[1:]}
        runs[config] = {
            "pytorch_fp32": lambda model=model: model(normalised),
            **{mode: (lambda s=session: s(image)) for mode, session in sessions.items()},
        }
        rows[config] = {
            "configuration": model_name(*config),
            "params_m": measure.count_parameters(model) / 1e6,
            "gmacs": measure.macs_per_image(model, SIZE, SIZE) / 1e9,
            "int8_check": ready["int8_check"],
        }
    load_before, started = measure.load_average(), datetime.datetime.now(datetime.timezone.utc)
    seconds: dict[tuple, list[float]] = {(config, mode): [] for config in CONFIGS for mode in MODES}
    with torch.no_grad():
        for round_ in range(args.rounds + 2):
            for config in CONFIGS:
                for mode in MODES:
                    timing = measure.time_runs(runs[config][mode], cpu, warmup=0, repeats=1)
                    if round_ >= 2:  # the first two rounds are the warm-up
                        seconds[config, mode] += timing.seconds
            print(f"round {round_ + 1} of {args.rounds + 2}", file=sys.stderr, flush=True)
    paper = statistics.median(seconds[CONFIGS[0], "pytorch_fp32"])
    for config, row in rows.items():
        for mode in MODES:
            timing = measure.Timing(seconds[config, mode], None, "")
            row[f"{mode}_ms_median"], row[f"{mode}_ms_p95"] = timing.median * 1e3, timing.p95 * 1e3
        row["paper_pytorch_over_int8"] = paper / statistics.median(seconds[config, "onnx_int8"])
    header = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "cpu": measure.device_name(cpu),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
        "timm": __import__("timm").__version__,
        "load_average": f"{load_before} before the timing, {measure.load_average()} after",
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "rounds": args.rounds,
        "iters": args.iters,
    }
    print(markdown(header, list(rows.values())))
    report = {"header": header, "rows": list(rows.values())}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report


def markdown(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{header['cpu']}, {header['cores']} cores, {header['torch_threads']} threads; torch {header['torch']}, "
        f"onnxruntime {header['onnxruntime']}, timm {header['timm']}; {header['date']}; load average "
        f"{header['load_average']}; {header['rounds']} rounds",
        "",
        "| model | params M | GMACs 320x320 | PyTorch FP32 ms | ONNX FP32 ms | ONNX INT8 ms | max F float, INT8 "
        "(change) | paper's PyTorch / INT8 |",
        "|---|--:|--:|--:|--:|--:|---|--:|",
    ]
    for row in rows:
        check = row["int8_check"]
        change = check["int8_maxF"] - check["float_maxF"]
        latencies = " | ".join(f"{row[f'{mode}_ms_median']:.1f}" for mode in MODES)
        lines.append(
            f"| {row['configuration']} | {row['params_m']:.2f} | {row['gmacs']:.2f} | {latencies} | "
            f"{check['float_maxF']:.4f}, {check['int8_maxF']:.4f} ({change:+.4f}) | "
            f"{row['paper_pytorch_over_int8']:.1f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
