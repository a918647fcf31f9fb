#!/usr/bin/env python
"""Check this package on one GPU in one command, and measure its training speed.

    python benchmarks/gpu_check.py [--device cuda|cpu] [--json gpu_check.json] [--max-seconds 480]

On a GPU (the default when CUDA is visible; R3Net with resnext101_32x4d, crop 300, batch 12), in
this order, each result printed as one line and written to ``--json`` as soon as it is known (the
file is rewritten whole each time, so a run stopped at a time limit keeps what it measured):

* ``machine``: GPU, driver, CPU, and the versions of Python, torch, CUDA, cuDNN, ignite, ...
* ``unwrapped``: the model a ``--nproc 1`` training worker builds is R3Net itself, not
  DataParallel or DDP (one process uses one GPU);
* ``no_host_sync``: the trainer ``training()`` builds (real DataLoader with pinned memory, the
  training step, loss meters, damaged-image counter, poly LR, log, TensorBoard) with
  ``--log-every 5``: after the first logged iteration, every one between two logged ones runs under
  ``torch.cuda.set_sync_debug_mode("error")``, so any host sync there stops it with its traceback;
* ``speed_<mode>`` for fp32, tf32, bf16, fp16 (GradScaler), channels_last (bf16) and, last of
  all, compile (bf16): images/s of the training step (``create_train_step``), the batch over the
  median of ``--iters`` steps timed after ``--warmup`` ones, and the peak GPU memory of the timed
  steps, measured by ``profile``'s code (``ignite_r3net/profiling/measure.py``: the GPU
  synchronised around each timed step, the CUDA allocator's peak);
* ``deterministic_resume``: ``train --deterministic`` for 6 iterations, and the same run stopped
  at iteration 3 and resumed with ``--resume auto``: every tensor of both final checkpoints equal;
  both validate (metrics and TensorBoard's curves and images made on the GPU);
* ``evaluate`` and ``predict``: the maps of that GPU-trained checkpoint made on the GPU and on the
  CPU (``CUDA_VISIBLE_DEVICES=""``), with ``--tf32 off`` (must be within one gray level) and, on
  the GPU, with ``--tf32 on`` too (reported);
* ``export_onnx``: ``export --format onnx`` of that checkpoint (needs the onnx extra).

``--device cpu`` runs the same checks on the CPU at small sizes (resnet18, crop 32, batch 2, no
compile; meant to take under 2 minutes), so that machines without a GPU keep the script working;
there the CPU's maps stand for the GPU's, the sync check runs without the debug mode, and where no
GPU is visible at all, ``evaluate``, ``predict`` and ``export`` run in the script's own process (a
process with the GPUs hidden would see the same; the two training runs keep a process each).
Checks that would start after ``--max-seconds`` are recorded as skipped. Exit code 1 when any
check failed. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import itertools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ignite_r3net.atomic_files import write_json  # noqa: E402
from ignite_r3net.checkpoint_io import load_checkpoint  # noqa: E402
from ignite_r3net.config import TrainConfig  # noqa: E402
from ignite_r3net.data.loader import build_train_stream  # noqa: E402
from ignite_r3net.data.synthetic import make_synthetic_dataset  # noqa: E402
from ignite_r3net.model.r3net import R3Net  # noqa: E402
from ignite_r3net.numerics import configure_training  # noqa: E402
from ignite_r3net.profiling.measure import Timing, device_name, time_runs  # noqa: E402
from ignite_r3net.training.optim import build_optimizer, build_poly_lr  # noqa: E402
from ignite_r3net.training.step import create_train_step  # noqa: E402

# amp, TF32, channels_last, torch.compile of each speed mode
MODES: dict[str, dict[str, Any]] = {
    "fp32": {"amp": "off", "tf32": False, "channels_last": False, "compile": False},
    "tf32": {"amp": "off", "tf32": True, "channels_last": False, "compile": False},
    "bf16": {"amp": "bf16", "tf32": True, "channels_last": False, "compile": False},
    "fp16": {"amp": "fp16", "tf32": True, "channels_last": False, "compile": False},
    "channels_last": {"amp": "bf16", "tf32": True, "channels_last": True, "compile": False},
    "compile": {"amp": "bf16", "tf32": True, "channels_last": False, "compile": True},
}


@dataclasses.dataclass
class Sizes:
    """The work of each check: the reference DDP script's setting on a GPU, small on the CPU."""

    backbone: str
    crop: int
    batch_size: int
    warmup: int  # untimed iterations of each speed mode (cuDNN autotuning, compilation)
    iters: int  # timed iterations of each speed mode
    modes: tuple[str, ...]
    sync_iters: int  # iterations of the host-sync check
    log_every: int  # of the host-sync check: the first logged iteration ends its warm-up
    images: int  # evaluate/predict images
    image_size: tuple[int, int]  # (min, max) side of the generated images
    workers: int  # DataLoader workers


GPU = Sizes("resnext101_32x4d", 300, 12, 10, 30, tuple(MODES), 20, 5, 4, (300, 400), 4)
# no compile on the CPU: it compiles C++ for minutes
CPU = Sizes("resnet18", 32, 2, 1, 1, tuple(m for m in MODES if m != "compile"), 5, 2, 2, (40, 56), 0)


CHECKS = (
    "unwrapped",
    "no_host_sync",
    *(f"speed_{m}" for m in MODES),
    "deterministic_resume",
    "evaluate",
    "predict",
    "export_onnx",
)


class Report:
    """The results so far, printed one line each and written whole to ``path`` after each."""

    def __init__(self, path: Path, command: str) -> None:
        self.path = path
        self.values: dict[str, Any] = {"command": command}
        self.failed = False

    def add(self, name: str, value: dict[str, Any]) -> None:
        self.values[name] = value
        self.failed |= "error" in value
        print(f"{name}: {_summary(value)}", flush=True)
        write_json(self.values, self.path)


def _summary(value: dict[str, Any]) -> str:
    if "error" in value:
        return f"FAILED {value['error']}"
    if "skipped" in value:
        return f"skipped ({value['skipped']})"
    return ", ".join(f"{k} {_short(v)}" for k, v in value.items() if not isinstance(v, (dict, list)))


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# ------------------------------------------------------------------------------------------ checks


def machine(device: torch.device) -> dict[str, Any]:
    """Where the figures come from: the GPU, the host and every version that matters."""
    info: dict[str, Any] = {
        "device": str(device),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": device_name(torch.device("cpu")),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    for module in ("ignite", "torchvision", "numpy", "PIL", "onnx", "onnxruntime", "ignite_r3net"):
        try:
            info[module] = getattr(__import__(module), "__version__", "?")
        except ImportError:
            info[module] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), gpus=torch.cuda.device_count())
        info["driver"] = _nvidia_smi("driver_version")
    return info


def _nvidia_smi(field: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def unwrapped(device: torch.device, sizes: Sizes) -> dict[str, Any]:
    """What a ``--nproc 1`` training worker trains: R3Net itself (no DataParallel over the GPUs)."""
    from ignite_r3net.training.start import plan_in_process
    from ignite_r3net.training.worker import _build_model  # the worker's own model builder

    model = _build_model(plan_in_process(TrainConfig(backbone=sizes.backbone, pretrained="none")), device)
    value = {"model": type(model).__name__, "gpus_visible": torch.cuda.device_count() if device.type == "cuda" else 0}
    if not isinstance(model, R3Net):
        value["error"] = f"--nproc 1 trains a {type(model).__name__}, not R3Net itself"
    return value


def no_host_sync(device: torch.device, sizes: Sizes, data: Path, work: Path) -> dict[str, Any]:
    """The trainer of ``training()`` with ``--log-every`` 5 (2 on the CPU); after the first logged
    iteration (warm-up), the iterations between logged ones run with host syncs made errors (CUDA
    only)."""
    from ignite.engine import Events

    from ignite_r3net.training.engine import create_trainer
    from ignite_r3net.training.events import every_or_last
    from ignite_r3net.training.start import plan_in_process
    from ignite_r3net.training.train_log import TrainLog
    from ignite_r3net.training.worker import train_data

    config = TrainConfig(
        data=[str(data)], output_dir=str(work), backbone=sizes.backbone, pretrained="none", crop=sizes.crop,
        batch_size=sizes.batch_size, iters=sizes.sync_iters, log_every=sizes.log_every, checkpoint_every=10**6,
        workers=sizes.workers, progress=False,
    )  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    configure_training(device, deterministic=False, tf32=True)
    plan = plan_in_process(config)
    stream = build_train_stream(train_data(plan), plan.layout, pin_memory=device.type == "cuda")
    torch.manual_seed(config.seed)
    model = R3Net(config.backbone).to(device)
    optimizer = build_optimizer(model, config)
    log = TrainLog(work / "train.log", console=False)
    trainer = create_trainer(model, optimizer, build_poly_lr(optimizer, config), stream, log, plan, device).trainer
    logged = every_or_last(config.log_every, config.iters)
    checked: list[int] = []
    debug = device.type == "cuda"

    @trainer.on(Events.GET_BATCH_STARTED)
    def arm(engine: Any) -> None:
        coming = engine.state.iteration + 1
        if coming > sizes.log_every and not logged(engine, coming):
            checked.append(coming)
            _sync_debug("error" if debug else "default")

    @trainer.on(Events.ITERATION_COMPLETED)  # after the trainer's own handlers
    def disarm(_: Any) -> None:
        _sync_debug("default")

    try:
        with _stopping_workers(stream.loader):
            trainer.run(stream, max_iters=config.iters, epoch_length=len(stream))
    except RuntimeError as e:
        at = f" at iteration {checked[-1]}" if checked else ""
        return {"error": f"host sync{at}: {_first_line(e)}", "where": _frames(e)}
    finally:
        _sync_debug("default")
    value: dict[str, Any] = {"iterations_checked": len(checked), "log_every": sizes.log_every}
    if not debug:
        value["note"] = "ran without torch.cuda.set_sync_debug_mode (CUDA only)"
    return value


def _sync_debug(mode: str) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(mode)


@contextmanager
def _stopping_workers(loader: Any):
    from ignite_r3net.data.loader import stop_workers

    try:
        yield
    finally:
        stop_workers(loader)


def _frames(e: BaseException) -> list[str]:
    """The innermost frames of the traceback: where the failure (a host sync) was raised."""
    return [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_tb(e.__traceback__)][-6:]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def train_speed(device: torch.device, sizes: Sizes, mode: str) -> dict[str, Any]:
    """images/s of the training step in ``mode``: the batch over the median of ``sizes.iters`` steps
    timed after ``sizes.warmup``, and the peak memory of the timed ones; on pre-loaded batches, the
    images and masks on the device, the angles pinned on the host as the DataLoader gives them."""
    opts = MODES[mode]
    start = time.perf_counter()
    timing = _time_training(device, sizes, opts)
    seconds = time.perf_counter() - start
    value: dict[str, Any] = {
        "images_per_s": sizes.batch_size / timing.median,
        "latency_ms_median": 1000 * timing.median,
        "latency_ms_p95": 1000 * timing.p95,
        "warmup_s": seconds - sum(timing.seconds),
        **opts,
    }
    if device.type == "cuda" and timing.peak_memory is not None:
        value["peak_memory_gib"] = timing.peak_memory / 2**30
        torch.cuda.empty_cache()  # the model and batches of this mode are gone: give their memory back
    return value


def _time_training(device: torch.device, sizes: Sizes, opts: dict[str, Any]) -> Timing:
    """The training step timed by ``profile``'s code (the device synchronised around each step)."""
    configure_training(device, deterministic=False, tf32=opts["tf32"])
    config = TrainConfig(backbone=sizes.backbone, amp=opts["amp"], channels_last=opts["channels_last"])
    torch.manual_seed(0)
    model = R3Net(sizes.backbone).to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(model, config)
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
    trained = torch.compile(model) if opts["compile"] else model
    step = create_train_step(trained, optimizer, device, config.amp, scaler, config.channels_last)
    batches = itertools.cycle(_batches(4, sizes, device))
    return time_runs(lambda: step(None, [next(batches)]), device, sizes.warmup, sizes.iters)  # type: ignore[arg-type]


def _batches(n: int, sizes: Sizes, device: torch.device) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    shape = (sizes.batch_size, sizes.crop, sizes.crop)
    out = []
    for _ in range(n):
        image = torch.randint(0, 256, (shape[0], 3, *shape[1:]), dtype=torch.uint8, generator=g)
        mask = (torch.rand(shape[0], 1, *shape[1:], generator=g) > 0.5).to(torch.uint8) * 255
        angle = torch.rand(shape[0], generator=g) * 20 - 10
        if device.type == "cuda":
            angle = angle.pin_memory()
        out.append({"image": image.to(device), "mask": mask.to(device), "angle": angle})
    return out


def gpu_speed(iters: int | None = None, warmup: int | None = None) -> dict[str, Any]:
    """``benchmarks/run.py --only gpu``: the speed modes alone, at the GPU sizes (skipped without CUDA)."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device visible: the gpu benchmark needs a GPU (run it on a GPU machine)"}
    device = torch.device("cuda", 0)
    sizes = dataclasses.replace(GPU, iters=iters or GPU.iters, warmup=warmup or GPU.warmup)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device), **dataclasses.asdict(sizes)}
    for mode in sizes.modes:
        try:
            result[mode] = train_speed(device, sizes, mode)
        except Exception as e:  # noqa: BLE001 - one failing mode (e.g. compile) must not hide the others
            result[mode] = {"error": _first_line(e)}
    return result


def format_speed(result: dict[str, Any]) -> str:
    """``gpu_speed``'s lines: images/s and peak memory per mode."""
    if "skipped" in result:
        return f"gpu: skipped ({result['skipped']})"
    lines = [f"gpu: {result['device']}, {result['backbone']}, crop {result['crop']}, batch {result['batch_size']}"]
    base = result.get("fp32", {}).get("images_per_s")
    for mode in result["modes"]:
        r = result[mode]
        if "error" in r:
            lines.append(f"  {mode:<14} failed: {r['error']}")
        else:
            ratio = f"  {r['images_per_s'] / base:.2f}x fp32" if base else ""
            lines.append(f"  {mode:<14} {r['images_per_s']:8.1f} images/s  peak {r['peak_memory_gib']:.2f} GiB{ratio}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the commands, as a user runs them


def cli(args: list[str], on_cpu: bool, timeout: float, own_process: bool = True) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` in a process of its own; ``on_cpu`` hides the GPUs from it. Without
    ``own_process``, a command on the CPU runs in this process when no GPU is visible here either (that
    process would see what this one sees): a process less, ~4 s of CPU importing torch, on a CPU machine."""
    if on_cpu and not own_process and not torch.cuda.is_available():
        return _cli_here(args)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if on_cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    code = "import sys; from ignite_r3net.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=max(timeout, 1)
    )


def _cli_here(args: list[str]) -> subprocess.CompletedProcess:
    """``cli`` in this process: ``cli.main``'s exit code and what it printed; an exception is an exit code 1
    and its traceback on stderr, as a process of its own would end."""
    from ignite_r3net import cli as command_line

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = command_line.main(args)
        except SystemExit as e:  # argparse's refusals
            code = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 - reported as the process's last line would be
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["run.py", *args], code, out.getvalue(), err.getvalue())


def _failure(proc: subprocess.CompletedProcess, what: str) -> dict[str, Any] | None:
    if proc.returncode == 0:
        return None
    lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    return {"error": f"{what} exited with {proc.returncode}: {lines[-1] if lines else ''}", "output": lines[-20:]}


def deterministic_resume(
    sizes: Sizes, data: Path, val: Path, work: Path, on_cpu: bool, timeout: float
) -> dict[str, Any]:
    """``train --deterministic`` for 6 iterations, and again stopped at 3 and resumed: every tensor
    of the two ``checkpoint_6.pt`` equal. Both validate on ``val`` (the metrics and TensorBoard's
    curves and images from the GPU). The first run's checkpoint is the GPU-trained model of the
    later checks."""
    args = [
        "--data", str(data), "--val-data", str(val), "--pretrained", "none", "--backbone", sizes.backbone,
        "--crop", str(sizes.crop), "--batch-size", str(sizes.batch_size), "--iters", "6", "--checkpoint-every", "3",
        "--deterministic", "--workers", str(sizes.workers), "--no-progress",
    ]  # fmt: skip
    whole, resumed = work / "whole", work / "resumed"
    start = time.perf_counter()
    failed = _failure(cli([*args, "--output-dir", str(whole)], on_cpu, timeout), "train --deterministic")
    if failed:
        return failed
    seconds = time.perf_counter() - start
    resumed.mkdir(parents=True)
    shutil.copy(whole / "checkpoint_3.pt", resumed)
    proc = cli([*args, "--output-dir", str(resumed), "--resume", "auto"], on_cpu, timeout - seconds)
    failed = _failure(proc, "train --deterministic --resume auto")
    if failed:
        return failed
    a, b = (_tensors(load_checkpoint(d / "checkpoint_6.pt")) for d in (whole, resumed))
    differ = sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or not torch.equal(a[k], b[k]))
    validations = (whole / "train.log").read_text().count("[val iter ")  # lines start with their time
    value: dict[str, Any] = {"tensors": len(a), "differ": len(differ), "validations": validations, "train_s": seconds}
    if differ:
        value["error"] = f"{len(differ)} of {len(a)} tensors differ after the resume, e.g. {differ[:3]}"
    return value


def _tensors(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint by its path of keys."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else ()
    out: dict[str, torch.Tensor] = {}
    for k, v in items:
        out.update(_tensors(v, f"{prefix}/{k}"))
    return out


def maps_match(command: str, checkpoint: Path, val: Path, work: Path, cpu_only: bool, timeout: float) -> dict[str, Any]:
    """``evaluate --save-maps`` or ``predict`` on the GPU and on the CPU: the largest difference of
    their maps in gray levels (``--tf32 off``, must be at most 1; ``--tf32 on`` reported). Without a
    GPU the CPU's maps stand for the GPU's, so that the comparison still runs."""
    if not checkpoint.is_file():
        return {"error": f"no checkpoint {checkpoint}: {command} checks the model deterministic_resume trains"}
    images = sorted(str(p) for p in val.glob("*.jpg"))
    deadline = time.perf_counter() + timeout
    value: dict[str, Any] = {"images": len(images)}
    sides = {"cpu": "off"} if cpu_only else {"cpu": "off", "gpu": "off", "gpu_tf32": "on"}
    folders = {}
    for side, tf32 in sides.items():
        out = work / f"{command}-{side}"
        common = ["--checkpoint", str(checkpoint), "--workers", "0", "--no-progress", "--tf32", tf32]
        if command == "evaluate":
            args = ["evaluate", *common, "--data", str(val), "--save-maps", str(out)]
        else:
            args = ["predict", *common, "--input", *images, "--output", str(out)]
        start = time.perf_counter()
        proc = cli(args, side == "cpu", deadline - time.perf_counter(), own_process=False)
        failed = _failure(proc, f"{command} ({side})")
        if failed:
            return failed
        value[f"{side}_s"] = time.perf_counter() - start
        folders[side] = out
    for side in ("gpu", "gpu_tf32"):
        if side in folders or side == "gpu":
            value[f"max_gray_levels_{side}_vs_cpu"] = _max_difference(folders["cpu"], folders.get(side, folders["cpu"]))
    if value["max_gray_levels_gpu_vs_cpu"] > 1:
        value["error"] = (
            f"{command} on the GPU differs from the CPU by {value['max_gray_levels_gpu_vs_cpu']} gray levels"
        )
    return value


def _max_difference(a: Path, b: Path) -> int:
    maps = sorted(p.relative_to(a) for p in a.rglob("*.png"))
    if not maps or sorted(p.relative_to(b) for p in b.rglob("*.png")) != maps:
        raise RuntimeError(f"the map folders {a} and {b} do not hold the same maps")
    return max(
        int(np.abs(np.asarray(Image.open(a / m), np.int16) - np.asarray(Image.open(b / m), np.int16)).max())
        for m in maps
    )


def export_onnx(checkpoint: Path, work: Path, on_cpu: bool, timeout: float) -> dict[str, Any]:
    if not checkpoint.is_file():
        return {"error": f"no checkpoint {checkpoint}: the export reads the model deterministic_resume trains"}
    out = work / "model.onnx"
    start = time.perf_counter()
    args = ["export", "--checkpoint", str(checkpoint), "--format", "onnx", "--output", str(out)]
    failed = _failure(cli(args, on_cpu, timeout, own_process=False), "export --format onnx")
    if failed:
        return failed
    return {"seconds": time.perf_counter() - start, "megabytes": out.stat().st_size / 2**20}


# --------------------------------------------------------------------------------------------- main


def run_checks(
    device: torch.device, sizes: Sizes, report: Report, work: Path, max_seconds: float, only: list[str] | None = None
) -> None:
    """Every check in order (or those of ``only``), each result reported as soon as it is known."""
    start = time.perf_counter()
    on_cpu = device.type == "cpu"
    n_train = max(4 * sizes.batch_size, 8)
    train, val = make_synthetic_dataset(work / "data", n_train=n_train, n_val=sizes.images, size=sizes.image_size)
    checkpoint = work / "resume" / "whole" / "checkpoint_6.pt"

    def left() -> float:
        return max_seconds - (time.perf_counter() - start)

    checks: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("unwrapped", lambda: unwrapped(device, sizes)),
        ("no_host_sync", lambda: no_host_sync(device, sizes, train, work / "sync")),
        *[(f"speed_{m}", lambda m=m: train_speed(device, sizes, m)) for m in sizes.modes if m != "compile"],
        ("deterministic_resume", lambda: deterministic_resume(sizes, train, val, work / "resume", on_cpu, left())),
        ("evaluate", lambda: maps_match("evaluate", checkpoint, val, work, on_cpu, left())),
        ("predict", lambda: maps_match("predict", checkpoint, val, work, on_cpu, left())),
        ("export_onnx", lambda: export_onnx(checkpoint, work, on_cpu, left())),
        *([("speed_compile", lambda: train_speed(device, sizes, "compile"))] if "compile" in sizes.modes else []),
    ]
    for name, check in checks:
        if only and name not in only:
            continue
        if left() <= 0:
            report.add(name, {"skipped": f"--max-seconds {max_seconds:g} reached"})
            continue
        t0 = time.perf_counter()
        try:
            value = check()
        except Exception as e:  # noqa: BLE001 - one failing check must not hide the others
            value = {"error": _first_line(e), "where": _frames(e)}
        value["check_s"] = time.perf_counter() - t0
        report.add(name, value)
    speeds = {m: report.values.get(f"speed_{m}", {}).get("images_per_s") for m in sizes.modes}
    if speeds.get("fp32"):
        report.add("speedup_vs_fp32", {m: v / speeds["fp32"] for m, v in speeds.items() if v})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py", description=__doc__.splitlines()[0])
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", choices=("cuda", "cpu"), default=default_device, help="default: cuda when visible")
    parser.add_argument("--json", type=Path, default=Path("gpu_check.json"), help="results (default: gpu_check.json)")
    parser.add_argument(
        "--max-seconds", type=float, help="start no check after this (default: 450 on a GPU, 110 on the CPU)"
    )
    parser.add_argument("--iters", type=int, help="timed iterations per speed mode (default: 30 on a GPU)")
    parser.add_argument("--warmup", type=int, help="untimed iterations per speed mode (default: 10 on a GPU)")
    parser.add_argument(
        "--only", nargs="+", choices=CHECKS, metavar="CHECK", help=f"run only these: {', '.join(CHECKS)}"
    )
    parser.add_argument("--work-dir", type=Path, help="keep the data, runs and maps here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible (use --device cpu)")
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    sizes = GPU if device.type == "cuda" else CPU
    sizes = dataclasses.replace(sizes, iters=args.iters or sizes.iters, warmup=args.warmup or sizes.warmup)
    max_seconds = args.max_seconds or (450.0 if device.type == "cuda" else 110.0)
    report = Report(args.json, " ".join([Path(sys.executable).name, *sys.argv]))
    report.add("machine", machine(device) | {"sizes": dataclasses.asdict(sizes)})
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        run_checks(device, sizes, report, work, max_seconds, args.only)
    print(f"written {args.json}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
