"""The training options as the user gave them, saved in ``config.json`` beside every run (what start-up resolved
from them is ``training.plan.RunPlan``); their defaults are the reference DDP script's recipe. The command line is
generated from the fields, so ``--help`` cannot drift from them."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from .batch_layout import MIN_BATCH
from .errors import OptionError
from .options.common import (
    AMP_MODES,
    BACKEND_HELP,
    BACKENDS,
    DEVICE_HELP,
    DEVICES,
    HEAD_WIDTH,
    TF32_HELP,
    TF32_MODES,
    TRACKERS,
    data_root_option,
)
from .options.fields import NOT_NEGATIVE, POSITIVE, POSITIVE_COUNT, TCP_PORT, Rule, check_fields, option
from .recipes import DEFAULT_RECIPE, RECIPES, recipes_help

_MOMENTUM = Rule(lambda v: 0 <= v < 1, "must be in [0, 1)")
_SECONDS = Rule(lambda v: v >= 1, "must be at least 1 second")
_DEGREES = Rule(lambda v: 0 <= v <= 180, "must be between 0 and 180 degrees")
_OPEN_FRACTION = Rule(lambda v: 0 < v < 1, "must be a fraction between 0 and 1 (both excluded)")
_SHARE = Rule(lambda v: 0 <= v <= 1, "must be a share of the pairs, from 0 to 1")


@dataclass(frozen=True)
class TrainConfig:
    """The options of a training run as asked: the recipe's values under those given (``given`` names them)."""

    # data
    data: list[str] = option(
        help="training data: one or more folders in MSRA10K layout (name.jpg + name.png) or DUTS layout "
        "(images/ + masks/ folders), trained on as one set (--data A B, or --data A --data B; pairs "
        "of the same name in two folders are both kept), or 'synthetic' for the generated set written "
        "to OUTPUT_DIR/synthetic",
        default_factory=lambda: ["synthetic"],
        nargs="+",
        action="extend",
        metavar="DATA",
    )
    val_data: str | None = option(
        None,
        "validation data folder; default: the synthetic set's held-out split when --data synthetic, the pairs "
        "--val-split holds out when given, none otherwise",
        metavar="DIR",
    )
    val_split: float | None = option(
        None,
        "hold out this fraction (0 < F < 1) of the --data pairs for validation, instead of --val-data: a pair "
        "is held out when the sha256 of its name (file stem) falls below F, so no pair changes side when "
        "pairs are added; the held-out names go to OUTPUT_DIR/val_split.txt and config.json, and a resume "
        "needs the same F; default: none held out",
        rule=_OPEN_FRACTION,
        metavar="F",
    )
    data_root: str | None = data_root_option()
    output_dir: str = option(
        "runs/r3net", "folder for train.log, config.json, checkpoints and tb/", aliases=("--output",), metavar="DIR"
    )
    # recipe
    recipe: str = option(DEFAULT_RECIPE, recipes_help(), choices=tuple(RECIPES))
    iters: int = option(8000, "total training iterations", rule=POSITIVE_COUNT)
    batch_size: int = option(
        12,
        "images per process and micro-batch (global batch = this x processes x --accumulate); derived when "
        "only --global-batch is given",
        rule=POSITIVE_COUNT,
    )
    accumulate: int = option(
        1,
        "micro-batches whose gradients each optimiser step sums (DDP all-reduces after the last only): an "
        "iteration is one optimiser step of processes x --batch-size x N images, as --iters, the LR, the log "
        "and the checkpoints count it; BatchNorm's statistics stay per micro-batch; default: 1",
        rule=POSITIVE_COUNT,
    )
    global_batch: int | None = option(
        None,
        "images per optimiser step over all processes (processes x --batch-size x --accumulate), kept on any "
        "number of processes: given alone, --batch-size and --accumulate are derived (the largest batch per "
        "process, at most --max-batch-per-device, that divides the process's share); a resume on another "
        "number of processes is accepted when it is kept; config.json records it; default: the recipe's "
        "(r3net-paper: 14), else --batch-size x --accumulate x processes",
        rule=POSITIVE_COUNT,
        metavar="N",
    )
    max_batch_per_device: int | None = option(
        None,
        "the largest --batch-size that deriving a --global-batch's layout may choose (what one device's "
        "memory holds; not guessed from it); default: no limit (accumulation only where the processes "
        "cannot take their share at once)",
        rule=POSITIVE_COUNT,
        metavar="N",
    )
    lr: float = option(1e-3, "base learning rate (bias parameters use 2x)", rule=POSITIVE)
    lr_power: float = option(0.9, "poly LR power: lr = base * (1 - it / iters) ** power", rule=POSITIVE)
    momentum: float = option(0.9, "SGD momentum", rule=_MOMENTUM)
    weight_decay: float = option(5e-4, "weight decay of non-bias parameters (bias: none)", rule=NOT_NEGATIVE)
    crop: int = option(
        300,
        "side of the random square crop in pixels (images with a smaller side are first resized to crop x crop)",
        rule=POSITIVE_COUNT,
        metavar="PIXELS",
    )
    rotate: float = option(
        10.0, "random rotation range in degrees: uniform in [-rotate, rotate); 0 disables", rule=_DEGREES
    )
    backbone: str = option(
        "resnext101_32x4d",
        "backbone network: a ResNet or ResNeXt, or timm:NAME, a timm model whose features_only levels "
        'include strides 4, 8, 16 and 32 (the timm extra: pip install -e ".[timm]"; docs/training.md)',
    )
    head_width: float = option(
        1.0,
        "scales the channels of R3Net's head (everything after the backbone): 256 x F in its integrated "
        "features and 128 x F in its refinement blocks; 1 is the paper's model, 0.25 a slim head of a seventh "
        "(ResNeXt-101) to a twelfth (MobileNetV3) of its multiply-accumulates; a multiple of 1/128; default: 1",
        rule=HEAD_WIDTH,
        metavar="F",
    )
    pretrained: str = option(
        "imagenet",
        "backbone weights to start from: 'imagenet' (the backbone's ImageNet-1k weights, listed in "
        "docs/training.md; for timm:NAME, the weights timm loads for NAME; downloaded once per node into the "
        "torch or Hugging Face cache), 'none' (random), a file (.pth/.pt/.bin/.safetensors: torchvision, timm "
        "or the original resnext_101_32x4d.pth layout; for timm:NAME, a timm checkpoint of NAME), a "
        "torchvision weights name (IMAGENET1K_V1, IMAGENET1K_V2, DEFAULT) or hf-hub:ORG/NAME (e.g. "
        "hf-hub:timm/resnext101_32x4d.gluon_in1k); default: imagenet",
    )
    init_from: str | None = option(
        None,
        "start a new run (iteration 1, fresh optimiser and schedule) from the weights of a trained "
        "model: any checkpoint_N.pt or best_model_*.pt of ours, an original R3Net release file, or "
        "hf-hub:ORG/NAME[@REVISION] (a model written by 'export --format hub'); for fine-tuning on other data or "
        "training longer than a finished run. Unlike --resume, nothing but the weights is taken; --backbone must "
        "match them; default: none (--pretrained's weights)",
    )
    seed: int = option(2018, "random seed (model init, sampling, augmentation)")
    # run control
    workers: int = option(
        2, "DataLoader worker processes per training process (0 loads in the main process)", rule=NOT_NEGATIVE
    )
    checkpoint_every: int = option(400, "save a checkpoint every N iterations (and at the end)", rule=POSITIVE_COUNT)
    keep: int = option(
        3, "number of periodic checkpoints kept on disk (the best one is kept besides)", rule=POSITIVE_COUNT
    )
    log_every: int = option(
        1, "write a log line (and sync the loss meters across ranks) every N iterations", rule=POSITIVE_COUNT
    )
    val_every: int = option(0, "validate every N iterations (0: at the checkpoint iterations)", rule=NOT_NEGATIVE)
    val_at_start: bool = option(
        True,
        "validate before the first iteration too (the untrained model, the reference of the final "
        "validation line); --no-val-at-start skips it",
    )
    val_max: int = option(
        0,
        "score at most N validation pairs, evenly spaced through the sorted listing of --val-data's (or "
        "--val-split's) pairs, the same pairs at every validation; 0: all",
        rule=NOT_NEGATIVE,
    )
    resume: str | None = option(
        None,
        "checkpoint file to resume from, or 'auto' for the newest valid one in --output-dir (a fresh run when "
        "there is none); default: none (a fresh run, refused when --output-dir holds checkpoints)",
        metavar="FILE",
    )
    tracker: list[str] = option(
        default_factory=list,
        help="also log the run to these experiment trackers: mlflow, wandb or clearml (each an extra: pip "
        "install -e '.[mlflow]', '.[wandb]' or '.[clearml]'); they get what "
        "TensorBoard gets, the recipe as parameters and the best checkpoint as an artifact. mlflow logs to "
        "MLFLOW_TRACKING_URI, by default to OUTPUT_DIR/mlruns.db (see: mlflow ui --backend-store-uri "
        "sqlite:///OUTPUT_DIR/mlruns.db); a resumed run continues its tracker runs. Checked at start-up: a "
        "missing package or a server that does not answer stops the run before any worker starts",
        nargs="+",
        choices=TRACKERS,
        metavar="NAME",
    )
    # damaged images
    max_bad_images: float = option(
        0.01,
        "share of the training pairs that may turn out unreadable during the run (each is reported "
        "once and replaced by the next readable pair); one more stops the run on every rank. 0.01: "
        "1%%, e.g. 10 of 1000 pairs; 0: stop at the first; a fraction from 0 to 1",
        rule=_SHARE,
        metavar="F",
    )
    allow_decode_warnings: bool = option(
        False,
        "train on JPEGs that decode with libjpeg warnings (corrupt or truncated data: part of the "
        "picture missing or grey) instead of counting them as unreadable",
    )
    # console
    verbose: bool = option(False, "print the full configuration and ignite's launcher and DDP messages too")
    progress: bool = option(
        True,
        "show the run's progress on rank 0: one bar over --iters (continuing from a resumed iteration) with "
        "images/s, elapsed time and ETA on a terminal, a plain line every 10%% when stderr is a file (SLURM "
        "logs); --no-progress shows none (train.log has the ETA either way)",
    )
    # speed
    amp: str = option(
        "off",
        "mixed precision: the model's forward pass autocast to bfloat16 (bf16: CPUs with AVX-512 BF16/AMX, "
        "Ampere or newer GPUs) or float16 (fp16: GPUs, with a gradient scaler saved in the checkpoints; "
        "emulated and slow on a CPU); the losses, weights and optimiser stay float32; off: float32 throughout, "
        "as the original (on a GPU, TF32 convolutions unless --tf32 off)",
        choices=AMP_MODES,
    )
    tf32: str = option("on", TF32_HELP, choices=TF32_MODES)
    deterministic: bool = option(
        False,
        "train the same bits on every run of the same command, machine and software: deterministic cuDNN "
        "algorithms without autotuning, torch.use_deterministic_algorithms (R3Net's bilinear upsampling and "
        "global pooling then run as matrix products) and CUBLAS_WORKSPACE_CONFIG=:4096:8; slower on a GPU. "
        "Without it a GPU run varies in the last bits from run to run (a CPU run does not)",
    )
    channels_last: bool = option(False, "use channels_last memory format for the model and inputs")
    compile: bool = option(False, "torch.compile the model")
    # distribution
    nproc: int = option(
        1,
        "processes to spawn on this node (on GPUs at most one per GPU; see --device); under srun, "
        "per task (with one task per node); under torchrun, leave it out",
        rule=POSITIVE_COUNT,
    )
    backend: str | None = option(None, BACKEND_HELP, choices=BACKENDS)
    device: str = option(
        "auto",
        f"{DEVICE_HELP}; config.json records the device the run used (--config does not take it); a resumed run "
        "may change it: where a run computes is no part of its recipe (the numbers differ in rounding only)",
        choices=DEVICES,
    )
    nnodes: int = option(
        1, "number of nodes of a multi-node run started by hand (under srun: from SLURM)", rule=POSITIVE_COUNT
    )
    node_rank: int = option(
        0, "rank of this node in a multi-node run started by hand, 0 to N-1 (under srun: from SLURM)", metavar="R"
    )
    master_addr: str | None = option(
        None,
        "address of node 0, where the processes of a job of several nodes (or srun tasks) meet; default: "
        "MASTER_ADDR from the environment, else under srun the first node of SLURM_JOB_NODELIST, else 127.0.0.1 "
        "(a single node: 127.0.0.1; under torchrun: torchrun's, leave it out)",
        metavar="ADDR",
    )
    master_port: int | None = option(
        None,
        "rendezvous port on node 0; default: MASTER_PORT from the environment, else under srun 15000 + the last "
        "4 digits of SLURM_JOB_ID, else 29500 (a single node: a free port; under torchrun: torchrun's)",
        rule=TCP_PORT,
        metavar="PORT",
    )
    dist_timeout: int = option(
        600,
        "seconds the processes of a job wait for each other: at the rendezvous (then the job stops with one line "
        "saying who is missing) and in every collective",
        rule=_SECONDS,
        metavar="SECONDS",
    )
    # which options were given (the command line, or --config's run), not taken from the recipe or the defaults:
    # a global batch's layout derives --batch-size and --accumulate unless they are among them
    given: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        if isinstance(self.data, str):  # a config.json written when --data took one folder
            object.__setattr__(self, "data", [self.data])
        object.__setattr__(self, "given", frozenset(self.given))  # a list, from config.json

    def to_json(self) -> str:
        values = dataclasses.asdict(self) | {"given": sorted(self.given)}
        return json.dumps(values, indent=2, sort_keys=True)

    def validate(self) -> None:
        """Raise ``OptionError`` naming the first wrong option (data, machine and files: ``training.start``)."""
        check_fields(self)
        if self.batch_size < MIN_BATCH:
            raise OptionError(
                f"--batch-size must be at least {MIN_BATCH}: the BatchNorm after R3Net's global-pooling "
                "branch needs two images per process"
            )
        limits = (("--max-batch-per-device", self.max_batch_per_device), ("--global-batch", self.global_batch))
        for flag, value in limits:
            if value is not None and value < MIN_BATCH:
                raise OptionError(
                    f"{flag} must be at least {MIN_BATCH} (R3Net's BatchNorm needs two images), got {value}"
                )
        if self.val_split is not None and self.val_data:
            raise OptionError(
                "--val-split and --val-data both choose the validation pairs: give one (--val-split holds out "
                "--data pairs, --val-data is a folder of its own)"
            )
        if self.val_split is not None and "synthetic" in self.data:
            raise OptionError(
                "--val-split holds out pairs of --data folders; the synthetic set has its own validation pairs "
                "(validated on by default): give --data folders, or leave --val-split out"
            )
        if not 0 <= self.node_rank < self.nnodes:
            raise OptionError(f"--node-rank must be in [0, {self.nnodes - 1}], got {self.node_rank}")

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        """The options a run's ``config.json`` records (its ``resolved`` part and unknown keys left out)."""
        values = json.loads(Path(path).read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
