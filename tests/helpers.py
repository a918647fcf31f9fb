"""Shared test utilities: tiny data sets, running the CLI in real processes, reading outputs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]

# small, fast settings every training test shares; 32 is the smallest crop the backbone takes (its
# deepest stage is 1x1) and a training step there costs a quarter of one at 64
TINY_TRAIN = [
    "--pretrained",
    "none",
    "--backbone",
    "resnet18",
    "--crop",
    "32",
    "--batch-size",
    "2",
    "--workers",
    "0",
    "--rotate",
    "10",
]


# the shared 2-process reference run (conftest.py ``reference_run``): 12 training pairs are 3
# iterations per epoch for 2 ranks x 2 images, so the checkpoints at 5 and 10 fall mid-epoch
REFERENCE_ITERS, REFERENCE_EVERY = 12, 5


def reference_args(train: Path, val: Path, out: Path) -> list[str]:
    """The reference run's options: 2 processes, DataLoader workers and rotation on, validation
    on one image (fewer images than ranks: rank 1's shard is empty)."""
    return [
        "--nproc",
        "2",
        "--data",
        str(train),
        "--val-data",
        str(val),
        "--output-dir",
        str(out),
        "--iters",
        str(REFERENCE_ITERS),
        "--checkpoint-every",
        str(REFERENCE_EVERY),
        "--keep",
        "5",
        "--master-port",
        str(free_port()),
        *TINY_TRAIN[: TINY_TRAIN.index("--workers")],
        "--workers",
        "2",
        *TINY_TRAIN[TINY_TRAIN.index("--workers") + 2 :],
    ]


SLURM_VARS = tuple(
    f"SLURM_{name}" for name in ("JOB_ID", "PROCID", "LOCALID", "NTASKS", "JOB_NODELIST", "JOB_NUM_NODES", "STEP_ID")
)


def cpu_env(**extra: str) -> dict[str, str]:
    """Environment for a CPU-only child process (gloo), one thread per process."""
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", *SLURM_VARS):
        env.pop(k, None)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(
    args: list[str], timeout: float = 240, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` in a fresh process; fails the test with its output on error."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO,
        env=env or cpu_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"run.py {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )
    return proc


def start_cli(args: list[str], stderr_to_stdout: bool = False) -> subprocess.Popen:
    """``python run.py ARGS`` started in a fresh process, its output in text pipes (one pipe for
    both with ``stderr_to_stdout``, as ``2>&1 |`` does)."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO,
        env=cpu_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
        text=True,
    )


def start_long_run(
    data: Path, out: Path, workers: int, nproc: int = 2, stdout: int | None = subprocess.PIPE, stderr=subprocess.PIPE
) -> subprocess.Popen:
    """``python run.py --nproc NPROC --iters 500 ...``: a training run far longer than any test
    waits, started as a terminal's shell starts a job, for tests that stop it: in its own process
    group, with SIGINT at its default (see ``interrupts_as_in_a_terminal``)."""
    args = [sys.executable, str(REPO / "run.py"), "--nproc", str(nproc), "--data", str(data), "--output-dir", str(out)]
    args += ["--iters", "500", "--checkpoint-every", "1000", "--master-port", str(free_port()), *TINY_TRAIN]
    args += ["--workers", str(workers)]
    return subprocess.Popen(
        args,
        cwd=REPO,
        env=cpu_env(),
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=True,
        preexec_fn=interrupts_as_in_a_terminal,
    )


def interrupts_as_in_a_terminal() -> None:
    """Give the process about to start SIGINT at its default, as an interactive shell gives its
    jobs. A shell without job control (a script's ``pytest ... &``, some CI runners) starts
    background commands with SIGINT ignored, every child inherits that, and Python then installs
    no KeyboardInterrupt handler: the launcher of a test's run would ignore the test's Ctrl-C, as
    it should there, and the test would wait out its timeout on a run that trains on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_iterations(proc: subprocess.Popen, out: Path, count: int, timeout: float = 120) -> None:
    """Wait until ``out/train.log`` shows ``count`` iterations; fail with the run's output if it
    ended or took longer than ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ((out / "train.log").exists() and len(log_iterations(out / "train.log")) >= count):
        if time.monotonic() > deadline or proc.poll() is not None:
            said = proc.stderr.read()[-2000:] if proc.stderr else ""
            raise AssertionError(f"the run did not reach iteration {count}: {said}")
        time.sleep(0.05)


def group_pids(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run. Zombies do not count: an orphan that has
    exited waits for init to reap it, which this machine's init does only every second or two."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")"
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state != "Z":
            pids.append(int(stat.parent.name))
    return sorted(pids)


def make_tiny_dataset(root: Path, n: int = 10, n_val: int = 3, seed: int = 0) -> tuple[Path, Path]:
    """A few real .jpg/.png pairs (the synthetic generator at small sizes): (train_dir, val_dir)."""
    from ignite_r3net.data.synthetic import make_synthetic_dataset

    return make_synthetic_dataset(root, n_train=n, n_val=n_val, size=(64, 90), seed=seed)


def zero_middle_of(jpeg: Path) -> Path:
    """Damage a JPEG as a bad disk sector does: its compressed data zeroed from the middle on. Its
    header and end marker stay intact, so only a full decode notices."""
    raw = bytearray(jpeg.read_bytes())
    middle, end = len(raw) // 2, len(raw) - 2  # the last two bytes are the end marker, FF D9
    raw[middle:end] = bytes(end - middle)
    jpeg.write_bytes(bytes(raw))
    return jpeg


def cut_and_remark(jpeg: Path) -> Path:
    """Damage a JPEG as an interrupted copy that a tool then "repaired" does: its second half cut
    and an end-of-image marker (FF D9) written after the rest; libjpeg decodes it with a grey half."""
    raw = jpeg.read_bytes()
    jpeg.write_bytes(raw[: len(raw) // 2] + b"\xff\xd9")
    return jpeg


# a training log line (its timestamp removed): the recipe's part (equal in a resumed and an
# uninterrupted run), then this run's images/s and ETA
LOG_LINE = re.compile(
    r"^(\[iter (\d+)\], \[total loss ([0-9.naif]+)\].*\[lr ([0-9.e-]+)\])(, \[images/s [^]]*\])?(, \[eta [^]]*\])?$"
)
# what starts every train.log line: local time with its offset, ISO 8601 to the second
LOG_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d) ")


def without_timing(line: str) -> str:
    """A training log line (without its timestamp) without this run's images/s and ETA."""
    m = LOG_LINE.match(line)
    assert m, line
    return m.group(1)


def log_lines(log_path: Path) -> list[str]:
    """train.log's lines without their timestamps (resumed and uninterrupted runs compare equal)."""
    lines = Path(log_path).read_text(encoding="utf-8").splitlines()
    assert all(LOG_TIMESTAMP.match(line) for line in lines), [line for line in lines if not LOG_TIMESTAMP.match(line)]
    return [LOG_TIMESTAMP.sub("", line, count=1) for line in lines]


def log_iterations(log_path: Path) -> dict[int, str]:
    """Training log lines by iteration, without their timestamps and timing (a later line for the
    same iteration wins, as after a resume)."""
    lines = {}
    for line in log_lines(log_path):
        m = LOG_LINE.match(line)
        if m:
            lines[int(m.group(2))] = m.group(1)
    return lines


def read_scalars(tb_dir: Path) -> dict[str, dict[int, float]]:
    """All scalars in a TensorBoard folder, read with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def raise_on_rank_one(local_rank: int, config) -> None:
    """A worker body for launcher tests: rank 1 fails while rank 0 waits in a collective."""
    import ignite.distributed as idist

    if idist.get_rank() == 1:
        raise OSError("cannot read image /data/broken.jpg")
    idist.all_reduce(1.0)  # would hang forever if the failure were not propagated
    idist.barrier()


def sum_ranks(local_rank: int, arg) -> None:
    """A worker body for launcher tests: one collective that needs every rank."""
    import ignite.distributed as idist

    total = idist.all_reduce(float(idist.get_rank()))
    world = idist.get_world_size()
    assert total == world * (world - 1) / 2, total


def pysod_reference(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """The nine metrics of (pred, gt) uint8 arrays computed by PySODMetrics itself."""
    import py_sod_metrics as sod

    mae, fm, sm, em, wfm = sod.MAE(), sod.Fmeasure(), sod.Smeasure(), sod.Emeasure(), sod.WeightedFmeasure()
    for pred, gt in pairs:
        for m in (mae, fm, sm, em, wfm):
            m.step(pred=pred, gt=gt)
    f, e = fm.get_results()["fm"], em.get_results()["em"]
    return {
        "mae": float(mae.get_results()["mae"]),
        "maxF": float(f["curve"].max()),
        "meanF": float(f["curve"].mean()),
        "adpF": float(f["adp"]),
        "Sm": float(sm.get_results()["sm"]),
        "maxE": float(e["curve"].max()),
        "meanE": float(e["curve"].mean()),
        "adpE": float(e["adp"]),
        "wF": float(wfm.get_results()["wfm"]),
    }


def pysod_curves(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """PySODMetrics' mean precision, recall and F-measure curves, indexed by threshold 0..255 (its
    own arrays run from threshold 255 down)."""
    import py_sod_metrics as sod

    fm = sod.Fmeasure()
    for pred, gt in pairs:
        fm.step(pred=pred, gt=gt)
    results = fm.get_results()
    curves = {"precision": results["pr"]["p"], "recall": results["pr"]["r"], "fmeasure": results["fm"]["curve"]}
    return {name: np.asarray(curve)[::-1] for name, curve in curves.items()}


def blob_mask(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A 0/255 uint8 ellipse at a random place: a ground-truth mask."""
    yy, xx = np.mgrid[:h, :w]
    cy, cx = rng.uniform(0.3, 0.6) * h, rng.uniform(0.3, 0.6) * w
    ry, rx = rng.uniform(0.15, 0.3) * h, rng.uniform(0.15, 0.3) * w
    return ((((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2) <= 1).astype(np.uint8) * 255


def save_spread_r3net(path: Path, seed: int = 1) -> Path:
    """A resnet18 R3Net state_dict (the layout of ``best_model_*`` files) whose maps span most of
    0..1: BatchNorm statistics drawn at random and the first prediction scaled up. An untrained
    R3Net predicts about 0.5 everywhere, which would hide an export that gets the image wrong."""
    import torch
    from torch import nn

    from ignite_r3net.model.r3net import R3Net

    torch.manual_seed(seed)
    model = R3Net("resnet18")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1, generator=generator)
                module.running_var.uniform_(0.5, 1.5, generator=generator)
        model.predict0.weight.mul_(20)
    torch.save(model.state_dict(), path)
    return path


def save_rounding_sensitive_r3net(path: Path, seed: int = 1, offset: float = 2.0**16) -> Path:
    """The spread model (``save_spread_r3net``) made sensitive to float32 rounding by construction, as a
    briefly trained model is by its BatchNorm statistics: ``offset`` added to the first prediction and taken
    off again by the first refinement, so that values of that size pass through the refinement block, where
    float32 keeps only about 3 decimals below them. Any float32 implementation rounds its maps by about a gray
    level at some pixels (``offset`` 2**16: 0.005 at most from the float64 maps at 45x71)."""
    import torch

    save_spread_r3net(path, seed)
    state = torch.load(path, weights_only=True)
    state["predict0.bias"] += offset
    state["predict1.6.bias"] -= offset
    torch.save(state, path)
    return path


class ThreadWorld:
    """Two ranks as two threads of this process, for fast tests of code that calls ignite's
    collectives: ``run(fn0, fn1)`` runs ``fn0`` as rank 0 and ``fn1`` as rank 1 while
    ``idist.get_rank`` / ``get_world_size`` / ``all_reduce`` / ``broadcast`` / ``barrier`` behave as
    in a 2-process group (each collective waits for both ranks and combines their tensors).

    A real gloo group needs a process per rank (seconds of start-up each); this is the same
    contract the code relies on, exchanged through memory. A rank that fails breaks the barrier, so
    the other fails too instead of waiting forever."""

    SIZE = 2

    def __init__(self, monkeypatch, timeout: float = 120) -> None:
        import threading

        import ignite.distributed as idist
        import ignite.distributed.utils as idist_utils

        self._local = threading.local()
        self._barrier = threading.Barrier(self.SIZE, timeout=timeout)
        self._slots: list = [None] * self.SIZE
        for module in (idist, idist_utils):  # ``one_rank_only`` calls the utils module's get_rank
            monkeypatch.setattr(module, "get_rank", self.get_rank)
            monkeypatch.setattr(module, "get_world_size", lambda: self.SIZE)
            monkeypatch.setattr(module, "all_reduce", self.all_reduce)
            monkeypatch.setattr(module, "broadcast", self.broadcast)
            monkeypatch.setattr(module, "barrier", self._barrier.wait)

    def get_rank(self) -> int:
        return self._local.rank

    def _exchange(self, value):
        """Every rank's ``value``, in rank order, once all ranks have given theirs."""
        self._slots[self.get_rank()] = value
        self._barrier.wait()
        values = list(self._slots)
        self._barrier.wait()  # nobody overwrites a slot before every rank has read them
        return values

    def all_reduce(self, tensor, op: str = "SUM", group=None):
        import torch

        values = self._exchange(tensor.clone() if isinstance(tensor, torch.Tensor) else tensor)
        if op.upper() == "SUM":
            return sum(values[1:], values[0])
        combine = {"MIN": torch.minimum, "MAX": torch.maximum}[op.upper()]
        out = values[0]
        for v in values[1:]:
            out = combine(out, v)
        return out

    def broadcast(self, tensor, src: int = 0, safe_mode: bool = False):
        values = self._exchange(tensor.clone())
        return values[src].clone()

    def run(self, *fns):
        """Run ``fns[r]()`` as rank r, each in its own thread; their results, in rank order. The
        first exception of any rank is raised here."""
        import threading

        assert len(fns) == self.SIZE
        results: list = [None] * self.SIZE
        errors: list = []

        def body(rank: int) -> None:
            self._local.rank = rank
            try:
                results[rank] = fns[rank]()
            except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(e)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.SIZE)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            # the failure itself, not the broken barrier it left the other rank with
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
        return results


@contextlib.contextmanager
def training_conv_outputs() -> Iterator[list[torch.Tensor]]:
    """The outputs of every convolution that runs in training mode with gradients (the training
    step, not validation), seen by a global forward hook while the block runs."""
    import torch
    from torch import nn

    seen: list[torch.Tensor] = []

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(module, nn.Conv2d) and module.training and torch.is_grad_enabled():
            seen.append(output.detach())

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def blocked_signals(native_id: int | None) -> set[int]:
    """The signals that thread ``native_id`` of this process blocks (SigBlk of its /proc status)."""
    assert native_id is not None
    with open(f"/proc/self/task/{native_id}/status") as f:
        mask = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


# the layouts standard data sets ship in, one per set of a generated data root (make_data_root):
# folder name (an alias), images folder, masks folder ("" = flat), image extension
STANDARD_LAYOUTS = {
    "ECSSD": ("ecssd", "", "", ".jpg"),
    "HKU-IS": ("hkuis", "imgs", "gt", ".png"),
    "PASCAL-S": ("PASCAL-S", "Image", "Mask", ".jpg"),
    "SOD": ("SOD", "images", "segmentations", ".jpg"),
    "DUT-OMRON": ("DUT-O", "DUT-OMRON-image", "pixelwiseGT-new-PNG", ".jpg"),
    "DUTS-TE": ("DUTS-TE", "DUTS-TE-Image", "DUTS-TE-Mask", ".jpg"),
    "MSRA10K": ("MSRA10K_Imgs_GT/Imgs", "", "", ".jpg"),  # the zip's folders
}


def make_data_root(root: Path, n: int = 3, sets: tuple[str, ...] = tuple(STANDARD_LAYOUTS)) -> Path:
    """A folder of tiny standard data sets (``n`` generated pairs each), each under an alias and in
    one of the layouts they ship in (``STANDARD_LAYOUTS``); returns ``root``."""
    from PIL import Image

    from ignite_r3net.data.synthetic import make_synthetic_dataset

    for i, name in enumerate(sets):
        folder, images, masks, image_ext = STANDARD_LAYOUTS[name]
        train, _ = make_synthetic_dataset(root / ".gen" / name, n_train=n, n_val=0, size=(64, 90), seed=i)
        target = root / folder
        (target / images).mkdir(parents=True, exist_ok=True)
        (target / masks).mkdir(parents=True, exist_ok=True)
        for jpg in sorted(train.glob("*.jpg")):
            Image.open(jpg).save(target / images / (jpg.stem + image_ext))
            (train / (jpg.stem + ".png")).rename(target / masks / (jpg.stem + ".png"))
    shutil.rmtree(root / ".gen")
    return root


def plan_of(config: Any, world: int = 1, **resolved: Any) -> Any:
    """The ``RunPlan`` start-up would make of ``config`` on ``world`` processes, its ``--data`` taken as given and
    ``resolved`` (``resume``, ``weights``, ``tracking``, ``data_sets``) as said: for the tests that build the
    engine, the loader or the trackers in this process."""
    import dataclasses

    from ignite_r3net.training.start import plan_in_process

    plan = plan_in_process(config, world)
    data = dataclasses.replace(plan.data, data_sets=resolved.pop("data_sets", []))
    return dataclasses.replace(plan, data=data, **resolved)
