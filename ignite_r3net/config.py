"""The training recipe: one dataclass, saved as ``config.json`` beside every run.

Defaults are the seed script's recipe (SGD, poly LR, 8000 iterations of 12 images per process,
crop 300, flip, rotation 10, checkpoints every 400 iterations). The command line is generated from
the fields below, so ``--help`` and this file cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import OptionError

AMP_MODES = ("off", "bf16", "fp16")
"""``--amp`` choices (the autocast dtype of each: ``inference.AMP_DTYPES``)."""

# options that count something: at least 1
_POSITIVE = ("iters", "batch_size", "crop", "checkpoint_every", "keep", "log_every", "nproc", "nnodes")


def _opt(default: Any, help: str, **argparse_kwargs: Any) -> Any:
    """A dataclass field that carries its ``--help`` text (and argparse extras) as metadata; a list
    default is copied for each config."""
    metadata = {"help": help, **argparse_kwargs}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything that defines a training run."""

    # data
    data: list[str] = _opt(
        ["synthetic"],
        "training data: one or more folders in MSRA10K layout (name.jpg + name.png) or DUTS layout "
        "(images/ + masks/ folders), trained on as one set (--data A B, or --data A --data B; pairs "
        "of the same name in two folders are both kept), or 'synthetic' for the generated set written "
        "to OUTPUT_DIR/synthetic (the default)",
    )
    val_data: str | None = _opt(
        None,
        "validation data folder; default: the synthetic set's held-out split when --data synthetic, none otherwise",
    )
    output_dir: str = _opt("runs/r3net", "folder for train.log, config.json, checkpoints and tb/")
    # recipe
    iters: int = _opt(8000, "total training iterations")
    batch_size: int = _opt(12, "images per process and iteration (global batch = this x world size)")
    lr: float = _opt(1e-3, "base learning rate (bias parameters use 2x)")
    lr_power: float = _opt(0.9, "poly LR power: lr = base * (1 - it / iters) ** power")
    momentum: float = _opt(0.9, "SGD momentum")
    weight_decay: float = _opt(5e-4, "weight decay of non-bias parameters (bias: none)")
    crop: int = _opt(300, "random crop size (images with a smaller side are first resized to crop x crop)")
    rotate: float = _opt(10.0, "random rotation range in degrees: uniform in [-rotate, rotate); 0 disables")
    backbone: str = _opt("resnext101_32x4d", "backbone network")
    pretrained: str = _opt(
        "imagenet",
        "backbone weights to start from: 'imagenet' (the backbone's ImageNet-1k weights, listed in "
        "the README; downloaded once per node into the torch or Hugging Face cache), 'none' "
        "(random), a file (.pth/.pt/.bin/.safetensors: torchvision, timm or the original "
        "resnext_101_32x4d.pth layout), a torchvision weights name (IMAGENET1K_V1, IMAGENET1K_V2, "
        "DEFAULT) or hf-hub:ORG/NAME (e.g. hf-hub:timm/resnext101_32x4d.gluon_in1k); default: imagenet",
    )
    init_from: str | None = _opt(
        None,
        "start a new run (iteration 1, fresh optimiser and schedule) from the weights of a trained "
        "model: any checkpoint_N.pt or best_model_*.pt of ours, or an original R3Net release file; "
        "for fine-tuning on other data or training longer than a finished run. Unlike --resume, "
        "nothing but the weights is taken; --backbone must match them",
    )
    seed: int = _opt(2018, "random seed (model init, sampling, augmentation)")
    # run control
    workers: int = _opt(2, "DataLoader worker processes per training process (0 loads in the main process)")
    checkpoint_every: int = _opt(400, "save a checkpoint every N iterations (and at the end)")
    keep: int = _opt(3, "number of periodic checkpoints kept on disk")
    log_every: int = _opt(1, "write a log line (and sync the loss meters across ranks) every N iterations")
    val_every: int = _opt(0, "validate every N iterations (0: at the checkpoint iterations)")
    val_at_start: bool = _opt(
        True,
        "validate before the first iteration too (the untrained model, the reference of the final "
        "validation line); --no-val-at-start skips it",
    )
    val_max: int = _opt(
        0,
        "score at most N validation pairs, evenly spaced through the sorted listing of --val-data (the "
        "same pairs at every validation); 0: all",
    )
    resume: str | None = _opt(
        None, "checkpoint file to resume from, or 'auto' for the newest valid one in --output-dir"
    )
    # damaged images
    max_bad_images: float = _opt(
        0.01,
        "share of the training pairs that may turn out unreadable during the run (each is reported "
        "once and replaced by the next readable pair); one more stops the run on every rank. 0.01: "
        "1%%, e.g. 10 of 1000 pairs; 0: stop at the first",
    )
    allow_decode_warnings: bool = _opt(
        False,
        "train on JPEGs that decode with libjpeg warnings (corrupt or truncated data: part of the "
        "picture missing or grey) instead of counting them as unreadable",
    )
    # console
    verbose: bool = _opt(False, "print the full configuration and ignite's launcher and DDP messages too")
    # speed
    amp: str = _opt("off", "mixed precision", choices=AMP_MODES)
    channels_last: bool = _opt(False, "use channels_last memory format for the model and inputs")
    compile: bool = _opt(False, "torch.compile the model")
    # distribution
    nproc: int = _opt(
        1,
        "processes to spawn on this node (one per GPU with NCCL, CPU processes with gloo); under srun, "
        "per task (with one task per node); under torchrun, leave it out",
    )
    backend: str | None = _opt(
        None, "distributed backend; default: nccl when CUDA is available, else gloo", choices=("nccl", "gloo")
    )
    nnodes: int = _opt(1, "number of nodes of a multi-node run started by hand (under srun: from SLURM)")
    node_rank: int = _opt(0, "rank of this node in a multi-node run started by hand (under srun: from SLURM)")
    master_addr: str | None = _opt(
        None, "address of node 0; default: the first node of SLURM_JOB_NODELIST under srun, else 127.0.0.1"
    )
    master_port: int | None = _opt(
        None,
        "rendezvous port on node 0; default: 15000 + the last 4 digits of SLURM_JOB_ID under srun, a free port "
        "on a single node, else 29500",
    )
    dist_timeout: int = _opt(600, "seconds a collective may wait for a peer before the job fails")
    # recorded at start-up (not options): the weights the run started from, {source, file, sha256},
    # and each --data folder's pairs, {folder, pairs, listing_sha256} (the sha256 of its pairs' names)
    weights: dict[str, str] | None = field(default=None)
    data_sets: list[dict[str, Any]] | None = field(default=None)

    def __post_init__(self) -> None:
        if isinstance(self.data, str):  # a config.json written when --data took one folder
            self.data = [self.data]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    def validate(self) -> None:
        """Raise ``OptionError`` naming the first option whose value is wrong whatever the data,
        the machine or the files (those are checked at start-up, in ``training.preflight``)."""
        for name in _POSITIVE:
            if getattr(self, name) < 1:
                raise OptionError(f"{_flag(name)} must be a positive integer, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise OptionError(
                "--batch-size must be at least 2: the BatchNorm after R3Net's global-pooling "
                "branch needs two images per process"
            )
        checks = (
            ("lr", self.lr > 0, "must be positive"),
            ("lr_power", self.lr_power > 0, "must be positive"),
            ("momentum", 0 <= self.momentum < 1, "must be in [0, 1)"),
            ("weight_decay", self.weight_decay >= 0, "must not be negative"),
            ("dist_timeout", self.dist_timeout >= 1, "must be at least 1 second"),
            ("master_port", self.master_port is None or 1 <= self.master_port <= 65535, "must be a TCP port (1-65535)"),
            ("rotate", 0 <= self.rotate <= 180, "must be between 0 and 180 degrees"),
            ("workers", self.workers >= 0, "must not be negative"),
            ("val_every", self.val_every >= 0, "must not be negative"),
            ("val_max", self.val_max >= 0, "must not be negative"),
            ("max_bad_images", 0 <= self.max_bad_images <= 1, "must be a share of the pairs, from 0 to 1"),
            ("node_rank", 0 <= self.node_rank < self.nnodes, f"must be in [0, {self.nnodes - 1}]"),
        )
        for name, ok, rule in checks:
            if not ok:
                raise OptionError(f"{_flag(name)} {rule}, got {getattr(self, name)}")

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def _flag(name: str) -> str:
    """The command-line flag of a ``TrainConfig`` field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")
