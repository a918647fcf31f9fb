"""``profile``'s options: what a model costs per size, batch and mode."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from ..model.backbones import BACKBONE_NAMES
from .common import AMP_MODES, CHECKPOINT_HELP, DEVICES, HEAD_WIDTH
from .fields import NOT_NEGATIVE, POSITIVE_COUNT, Rule, check_fields, option

POSITIVE_COUNT_EACH = Rule(lambda v: all(n >= 1 for n in v), "must be positive integers")


@dataclass(kw_only=True)
class ProfileOptions:
    """What ``profile`` measures: which model, at which sizes and batches, on which device, in which modes."""

    checkpoint: str | None = option(
        None, CHECKPOINT_HELP + "; default: none (then --backbone alone: the bare architecture)", metavar="CKPT"
    )
    backbone: str | None = option(
        None,
        f"the architecture to profile (random weights: the cost does not depend on them), one of: "
        f"{BACKBONE_NAMES}; or with --checkpoint the checkpoint's backbone; default: with --checkpoint the "
        "one config.json beside it names, else inferred from its weights",
        metavar="NAME",
    )
    head_width: float = option(
        1.0,
        "with --backbone: the head width of the architecture (train --head-width); a checkpoint's is its own; "
        "default: 1",
        rule=HEAD_WIDTH,
        metavar="F",
    )
    sizes: list[int] = option(
        default_factory=lambda: [300, 300, 400, 300],
        help="input sizes in pixels, height then width, one pair or several (--size 300 300 400 300, or --size "
        "given again); default: 300 300 (the recipe's training crop) and 400 300 (a typical test image)",
        flag="--size",
        nargs="+",
        action="extend",
        metavar="H W",
        rule=POSITIVE_COUNT_EACH,
    )
    batch_sizes: list[int] = option(
        default_factory=lambda: [1],
        help="images per batch, one or several (--batch-size 1 8); one row per size and batch",
        flag="--batch-size",
        nargs="+",
        metavar="N",
        rule=POSITIVE_COUNT_EACH,
    )
    device: str = option(
        "auto",
        "where the model runs: cuda (GPU 0), cpu, or auto = cuda when a GPU is visible, else cpu",
        choices=DEVICES,
    )
    amp: list[str] = option(
        default_factory=lambda: ["off"],
        help="precision modes, one row each: off = float32, bf16 / fp16 = autocast to bfloat16 / float16 "
        "(a mode this device or torch does not run is a row saying why)",
        nargs="+",
        choices=AMP_MODES,
    )
    channels_last: bool = option(False, "run the model and its input in channels-last memory format")
    compile: bool = option(
        False, "run the model through torch.compile (compiled during the warm-up; a failure is a row saying why)"
    )
    onnx: str | None = option(
        None,
        "also time this file written by 'export --format onnx' with onnxruntime on the same inputs (one row per "
        "size and batch; its parameters and GMACs are the PyTorch model's); default: none",
        metavar="FILE",
    )
    train: bool = option(
        False,
        "time one training step instead of inference: the training augmentation on the device, forward, the 7 "
        "side-output losses, backward and the SGD step (the recipe's optimizer); needs a batch of 2 or more",
    )
    find_max_batch: bool = option(
        False,
        "with --train, on a GPU: find the largest batch per GPU whose training step fits in its memory, at each "
        "--size and --amp (a doubling search, then halving the gap; each try is one real step), and print it",
    )
    warmup: int = option(2, "untimed runs before each row's timed ones", rule=NOT_NEGATIVE)
    repeats: int = option(10, "timed runs per row (median and 95th percentile of their latencies)", rule=POSITIVE_COUNT)
    json_path: str | None = option(
        None,
        "also write the header and every row as JSON, rewritten whole as each row comes; default: none (printed only)",
        flag="--json",
        aliases=("--output",),
        metavar="FILE",
    )

    def validate(self) -> None:
        check_fields(self)
        if self.checkpoint is None and self.backbone is None:
            raise OptionError("give --checkpoint CKPT or --backbone NAME (the model to profile)")
        if len(self.sizes) % 2:
            given = " ".join(map(str, self.sizes))
            raise OptionError(f"--size takes pairs of height and width, got {len(self.sizes)} numbers: {given}")
        if self.find_max_batch and not self.train:
            raise OptionError("--find-max-batch goes with --train (it searches the batch of a training step)")
        if self.onnx is not None and self.train:
            raise OptionError("--onnx times inference; it does not go with --train")

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The ``--size`` pairs as (height, width)."""
        return [(self.sizes[i], self.sizes[i + 1]) for i in range(0, len(self.sizes), 2)]
