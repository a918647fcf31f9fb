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


def _opt(default: Any, help: str, **argparse_kwargs: Any) -> Any:
    """A dataclass field that carries its ``--help`` text (and argparse extras) as metadata."""
    return field(default=default, metadata={"help": help, **argparse_kwargs})


@dataclass
class TrainConfig:
    """Everything that defines a training run."""

    # data
    data: str = _opt(
        "synthetic",
        "training data: a folder in MSRA10K layout (name.jpg + name.png) or "
        "DUTS layout (images/ + masks/ folders), or 'synthetic' for the generated set "
        "written to OUTPUT_DIR/synthetic",
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
    pretrained: str | None = _opt(
        None,
        "backbone weights: a state_dict file (torchvision or the original "
        "resnext_101_32x4d.pth layout) or torchvision weights by name, e.g. DEFAULT",
    )
    seed: int = _opt(2018, "random seed (model init, sampling, augmentation)")
    # run control
    workers: int = _opt(2, "DataLoader worker processes per training process (0 loads in the main process)")
    checkpoint_every: int = _opt(400, "save a checkpoint every N iterations (and at the end)")
    keep: int = _opt(3, "number of periodic checkpoints kept on disk")
    log_every: int = _opt(1, "write a log line (and sync the loss meters across ranks) every N iterations")
    val_every: int = _opt(0, "validate every N iterations (0: at the checkpoint iterations)")
    resume: str | None = _opt(
        None, "checkpoint file to resume from, or 'auto' for the newest valid one in --output-dir"
    )
    # speed
    amp: str = _opt("off", "mixed precision", choices=("off", "bf16", "fp16"))
    channels_last: bool = _opt(False, "use channels_last memory format for the model and inputs")
    compile: bool = _opt(False, "torch.compile the model")
    # distribution
    nproc: int = _opt(1, "processes to spawn on this node (one per GPU with NCCL, CPU processes with gloo)")
    backend: str | None = _opt(
        None, "distributed backend; default: nccl when CUDA is available, else gloo", choices=("nccl", "gloo")
    )
    nnodes: int = _opt(1, "number of nodes of a multi-node run")
    node_rank: int = _opt(0, "rank of this node in a multi-node run")
    master_addr: str = _opt("127.0.0.1", "address of node 0 for a multi-node run")
    master_port: int = _opt(29500, "port on node 0 for a multi-node run")
    dist_timeout: int = _opt(600, "seconds a collective may wait for a peer before the job fails")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
