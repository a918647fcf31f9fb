"""``profile``: what a model costs, one row per size, batch and mode (docs/profile.md), in inference (PyTorch or
an exported ONNX file), in a training step, or as the largest training batch a GPU holds. A mode that cannot
run is a row saying why; the others still run."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Iterator
from dataclasses import MISSING, asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic_files import check_writable_file, write_json
from ..batch_layout import MIN_BATCH
from ..config import TrainConfig
from ..console import echo
from ..distributed.process_setup import use_device
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, error_line
from ..inference.engine import AMP_DTYPES
from ..inference.model import ONNXRUNTIME_MISSING, OnnxModel, load_exported
from ..model.backbones import model_name
from ..model.r3net import R3Net
from ..model.trained_model import build_model, read_trained_weights
from ..options import ProfileOptions
from ..options.fields import flag_of, option_fields
from . import measure
from .report import MACS_NOTE, CostRow, console_header, console_line, row_label

TRAIN_NEEDS_TWO = (
    "a training step needs a batch of 2 or more (the ASPP's image-level BatchNorm sees one value per image)"
)
MAX_BATCH_NEEDS_CUDA = "--find-max-batch needs a GPU (on the CPU a batch too large swaps instead of failing)"


@dataclass(frozen=True)
class Subject:
    """The model being profiled, on its device, and how rows name it."""

    model: nn.Module
    name: str
    backbone: str
    device: torch.device
    device_name: str


@dataclass(frozen=True)
class Combination:
    """One row to measure."""

    mode: str
    height: int
    width: int
    batch_size: int
    amp: str = "off"
    channels_last: bool = False
    compile: bool = False


def profile(options: ProfileOptions) -> list[dict[str, Any]]:
    """Measure every combination of ``options``, printing each row and writing ``--json`` as it comes; returns
    the rows as JSON objects. One ``OptionError`` line for a wrong option, file or device."""
    options.validate()
    device = torch.device("cuda:0" if use_device(LaunchSpec(device=options.device)) == "cuda" else "cpu")
    check_writable_file(options.json_path, "--json")
    if options.onnx is not None and not Path(options.onnx).is_file():
        raise OptionError(f"--onnx {options.onnx} does not exist")
    subject = load_subject(options.checkpoint, options.backbone, device, options.head_width)
    header = make_header(subject, command_line(options))
    echo(f"profile: {header['model']} on {header['device']} ({header['device_name']})")
    echo(
        f"torch {header['torch']}, {header['threads']} threads, load average {header['load_average']}, {header['date']}"
    )
    plan = list(combinations(options))
    profiler = Profiler(subject, options)
    rows: list[dict[str, Any]] = []
    echo(console_header())
    for done, combination in enumerate(plan):
        echo(f"profile: row {done + 1}/{len(plan)}: {row_label(asdict(combination))} ...", sys.stderr)
        rows.append(asdict(profiler.row(combination)))
        echo(console_line(rows[-1]))
        if options.json_path:
            write_json({"header": header, "rows": rows}, options.json_path)
    echo(f"{MACS_NOTE}; latency per batch over {options.repeats} timed runs after {options.warmup} untimed.")
    for memory_measure in sorted({r["memory_measure"] for r in rows if r["memory_measure"]}):
        echo(f"peak MiB: {memory_measure}.")
    if options.json_path:
        echo(f"wrote {options.json_path}")
    return rows


def command_line(options: ProfileOptions) -> str:
    """The ``profile`` command that asks for ``options``: the options given, defaults left out."""
    words = ["python run.py profile"]
    for f, value in option_fields(options):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        if value == default:
            continue
        flag = flag_of(f)
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        else:
            words += [flag, *map(str, value if isinstance(value, list) else [value])]
    return " ".join(words)


def load_subject(
    checkpoint: str | None, backbone: str | None, device: torch.device, head_width: float = 1.0
) -> Subject:
    """The checkpoint's model (``hf-hub:`` too), or R3Net on ``backbone`` with random weights, on ``device``."""
    if checkpoint is not None:
        weights = read_trained_weights(checkpoint, backbone)
        model, name, backbone = build_model(weights, "cpu"), checkpoint, weights.backbone
    else:
        assert backbone is not None  # validate() asks for one of them
        torch.manual_seed(0)
        try:
            model = R3Net(backbone, head_width)
        except ValueError as e:
            raise OptionError(f"--backbone: {e}") from None
        name = model_name(backbone, head_width)
    return Subject(model.to(device).eval(), name, backbone, device, measure.device_name(device))


def make_header(subject: Subject, command: str) -> dict[str, Any]:
    """What the rows were measured on: the device's name, torch's version, the threads and the load average."""
    return {
        "command": command,
        "model": subject.name,
        "device": str(subject.device),
        "device_name": subject.device_name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": measure.load_average(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "macs": "multiply-accumulates = torch.utils.flop_counter FLOPs / 2",
    }


def combinations(options: ProfileOptions) -> Iterator[Combination]:
    """The rows of ``options`` in order: per size, per batch (none to search for the largest), each --amp mode,
    then the ONNX file."""
    mode = "max-batch" if options.find_max_batch else "train" if options.train else "inference"
    for height, width in options.shapes:
        for batch in [0] if options.find_max_batch else options.batch_sizes:
            for amp in options.amp:
                yield Combination(mode, height, width, batch, amp, options.channels_last, options.compile)
            if options.onnx is not None:
                yield Combination("onnx", height, width, batch)


class Profiler:
    """Measures the rows of one model: its parameters, its MACs per size (counted once), the model as run
    (channels-last, compiled) and the ONNX file, shared by every row."""

    def __init__(self, subject: Subject, options: ProfileOptions) -> None:
        self.subject, self.options = subject, options
        self.parameters = measure.count_parameters(subject.model)
        self.macs: dict[tuple[int, int], int] = {}
        if options.channels_last:
            subject.model.to(memory_format=torch.channels_last)
        self.run_model: Callable[..., Any] = torch.compile(subject.model) if options.compile else subject.model
        self.onnx = _onnx_model(options.onnx, subject.device) if options.onnx is not None else None

    def row(self, c: Combination) -> CostRow:
        """``c``'s row, measured, or with the reason it cannot run."""
        subject, options = self.subject, self.options
        row = CostRow(
            model=subject.name, backbone=subject.backbone, device=str(subject.device), device_name=subject.device_name,
            mode=c.mode, amp=c.amp, channels_last=options.channels_last and c.mode != "onnx",
            compile=options.compile and c.mode != "onnx", height=c.height, width=c.width, batch_size=c.batch_size,
            parameters=self.parameters, params_m=self.parameters / 1e6, warmup=options.warmup, repeats=options.repeats,
        )  # fmt: skip
        if (c.height, c.width) not in self.macs:
            self.macs[(c.height, c.width)] = measure.macs_per_image(subject.model, c.height, c.width, subject.device)
        row.gmacs_per_image = self.macs[(c.height, c.width)] / 1e9
        reason = _unavailable(c, subject.device, self.onnx)
        if reason is not None:
            row.status, row.reason = "unavailable", reason
            return row
        try:
            self._measure(row, c)
        except Exception as e:  # noqa: BLE001 - one mode failing (compile, memory) must not stop the others
            row.status = "failed"
            row.reason = f"out of memory: {error_line(e)}" if measure.is_out_of_memory(e) else error_line(e)
        finally:
            measure.free_cached_memory(subject.device)
        return row

    def _measure(self, row: CostRow, c: Combination) -> None:
        device, channels_last = self.subject.device, self.options.channels_last
        if c.mode == "max-batch":
            self._max_batch(row, c)
            return
        run: Callable[[], object]
        if c.mode == "train":
            step = training_step(self.subject.model, self.run_model, device, c.amp, channels_last)
            # one step, no accumulation
            run = partial(step, None, [synthetic_batch(c.batch_size, c.height, c.width, device)])
        elif c.mode == "onnx":
            assert isinstance(self.onnx, OnnxModel)
            shape = (c.batch_size, 3, c.height, c.width)
            run = partial(self.onnx, torch.randint(0, 256, shape, dtype=torch.uint8, device=device))
        else:
            run = inference_run(self.run_model, device, c, channels_last)
        timing = measure.time_runs(run, device, self.options.warmup, self.options.repeats)
        row.latency_ms_median, row.latency_ms_p95 = 1000 * timing.median, 1000 * timing.p95
        row.images_per_s = c.batch_size / timing.median
        row.peak_memory_mib = None if timing.peak_memory is None else timing.peak_memory / 2**20
        row.memory_measure = timing.memory_measure

    def _max_batch(self, row: CostRow, c: Combination) -> None:
        """The largest training batch that fits at ``c``'s size and autocast, and the peak memory of its step."""
        device = self.subject.device
        step = training_step(self.subject.model, self.run_model, device, c.amp, self.options.channels_last)

        def step_at(batch: int) -> None:
            step(None, [synthetic_batch(batch, c.height, c.width, device)])
            measure.synchronize(device)  # an asynchronous failure belongs to this try

        largest = measure.find_max_batch(step_at, device, start=2)
        row.max_batch, row.batch_size = largest, largest
        if largest == 0:
            row.status, row.reason = "failed", "a training step of batch 2 does not fit"
            return
        memory = measure.PeakMemory(device)
        memory.reset()
        step_at(largest)
        peak = memory.peak()
        row.peak_memory_mib = None if peak is None else peak / 2**20
        row.memory_measure = memory.measure


def _unavailable(c: Combination, device: torch.device, onnx: OnnxModel | str | None) -> str | None:
    """Why combination ``c`` cannot run on ``device``, or None."""
    if c.mode == "onnx":
        return onnx if isinstance(onnx, str) else None
    if c.mode == "max-batch" and device.type != "cuda":
        return MAX_BATCH_NEEDS_CUDA
    if c.mode == "train" and c.batch_size < MIN_BATCH:
        return TRAIN_NEEDS_TWO
    return amp_problem(c.amp, device)


def amp_problem(amp: str, device: torch.device) -> str | None:
    """Why autocast to ``amp`` does not run on ``device`` in this torch, or None: tried on one small convolution,
    whose output must come in the autocast dtype (older torch warned and ran float16 on the CPU as float32)."""
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return None
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return f"this GPU ({measure.device_name(device)}) has no bfloat16"
    conv = nn.Conv2d(3, 4, 1).to(device)
    try:
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
            out = conv(torch.zeros(1, 3, 4, 4, device=device))
    except Exception as e:  # noqa: BLE001 - whatever torch raises, it is the reason
        return f"autocast to {amp} on {device.type} fails in torch {torch.__version__}: {error_line(e)}"
    if out.dtype != dtype:
        return f"autocast on {device.type} does not run {amp} in torch {torch.__version__} (it computes in {out.dtype})"
    return None


def _onnx_model(path: str, device: torch.device) -> OnnxModel | str:
    """The ONNX file in onnxruntime, or why it cannot run (no onnxruntime, not an exported model)."""
    try:
        import onnxruntime  # noqa: F401 - the reason row says what is missing
    except ImportError:
        return ONNXRUNTIME_MISSING.replace("--model FILE.onnx", "--onnx")
    try:
        model = load_exported(path, device)
    except OptionError as e:
        return str(e)
    assert isinstance(model, OnnxModel)  # a .onnx name; validate() lets any name through
    return model


def inference_run(
    run_model: Callable[..., Any], device: torch.device, c: Combination, channels_last: bool
) -> Callable[[], object]:
    """One eval-mode forward pass of a normalised random batch, under ``c.amp``'s autocast, without gradients."""
    images = torch.randn(c.batch_size, 3, c.height, c.width, device=device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    dtype = AMP_DTYPES[c.amp]

    def run() -> object:
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            return run_model(images)

    return run


def training_step(
    model: nn.Module, run_model: Callable[..., Any], device: torch.device, amp: str, channels_last: bool
) -> Callable[[Any, list[dict[str, Any]]], torch.Tensor]:
    """``train``'s step (device augmentation, forward, 7 losses, backward, SGD with the recipe's groups and
    momentum) at learning rate 0: the work of a real step, the weights left as they are."""
    from ..training.optim import build_optimizer
    from ..training.step import create_train_step

    optimizer = build_optimizer(model, TrainConfig(lr=0.0))
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    return create_train_step(run_model, optimizer, device, amp, scaler, channels_last)  # type: ignore[arg-type]


def synthetic_batch(batch: int, height: int, width: int, device: torch.device) -> dict[str, torch.Tensor]:
    """A batch as the DataLoader gives it to the step: uint8 images and masks on the device, angles on the host."""
    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (batch, 3, height, width), dtype=torch.uint8, generator=g)
    mask = (torch.rand(batch, 1, height, width, generator=g) > 0.5).to(torch.uint8) * 255
    angle = torch.rand(batch, generator=g) * 20 - 10
    if device.type == "cuda":
        angle = angle.pin_memory()
    return {"image": image.to(device), "mask": mask.to(device), "angle": angle}
