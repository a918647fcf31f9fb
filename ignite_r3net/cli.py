"""The command line: ``train`` (the default), ``evaluate``, ``predict``, ``export``, ``make-data``,
``check-data``.

Argument parsing only: each command's options, then one entry function per command. The ``train``
options are generated from ``TrainConfig``, so every recipe field has a flag whose ``--help`` shows
its default. A ``UserError`` from any command becomes one ``error: ...`` line.

The options need no torch (their choices come from torch-free modules) and each entry function
imports its command's code, so ``--help`` answers at once and a process imports only what its
command needs (``train``'s launching process: the checks and the launcher, not the Engine).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path

from .config import TrainConfig
from .errors import OptionError, Terminated, UserError, error_line
from .evaluation.export_formats import DEFAULT_OPSET, FORMATS, OPSETS, SUFFIXES
from .evaluation.report import DEFAULT_METRICS
from .metrics import METRIC_KEYS
from .model import BACKBONES

Handler = Callable[[argparse.Namespace], int]
CHECKPOINT_HELP = "training checkpoint, best_model_*.pt, or an original R3Net release state_dict"
BACKBONE_HELP = "backbone of the checkpoint; default: config.json beside it, else inferred from its weights"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none (None) or the help text already
    says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="Train and evaluate R3Net saliency detection with pytorch-ignite. "
        "Without a command, 'train' is run: `python run.py --nproc 2 ...`.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_train, add_evaluate, add_predict, add_compare, add_export, add_make_data, add_check_data):
        add(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
        command.allow_abbrev = False  # "--checkpoint" must not pass for "--checkpoint-every"
    return parser


# ------------------------------------------------------------------------------------------ train


def add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, 7 side-output losses) "
        "on one or many processes.",
    )
    add_train_options(train)
    train.set_defaults(handler=run_train)


def add_train_options(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per option field of ``TrainConfig``, with its help text and default."""
    hints = typing.get_type_hints(TrainConfig)
    for field in dataclasses.fields(TrainConfig):
        meta = dict(field.metadata)
        if "help" not in meta:  # recorded at start-up, not an option
            continue
        help_text = meta.pop("help")
        if field.name == "backbone":
            help_text += f" (one of: {', '.join(BACKBONES)})"
        flag = "--" + field.name.replace("_", "-")
        kind = _option_type(hints[field.name])
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=help_text)
            continue
        if "choices" not in meta:  # argparse shows {a,b,c} for choices
            meta["metavar"] = field.name.upper()
        parser.add_argument(flag, type=kind, default=field.default, help=help_text, **meta)


def _option_type(hint: object) -> type:
    """``int`` for ``int``, ``str`` for ``str | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.cast(type, hint)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if "help" in f.metadata}
    )


def run_train(args: argparse.Namespace) -> int:
    from .training import train  # each command's code is imported when it runs: see the module docstring

    train(config_from_args(args))
    return 0


# ----------------------------------------------------------------------- evaluate, predict, export


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution, batch 1), or score "
        "saliency maps already on disk (--maps/--gt). Prints one row per data set.",
    )
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--checkpoint", help="training checkpoint, best_model_*.pt, or an original R3Net release state_dict"
    )
    src.add_argument("--maps", help="folder of saliency maps (PNG/JPG/BMP, any method's) to score; needs --gt")
    ev.add_argument(
        "--data", nargs="+", metavar="DIR", help="data set folders (MSRA10K or DUTS layout); with --checkpoint"
    )
    ev.add_argument("--gt", metavar="DIR", help="folder of ground-truth masks matched to --maps by file stem")
    ev.add_argument(
        "--protocol",
        choices=("standard", "r3net"),
        default="standard",
        help="'standard' = PySODMetrics; 'r3net' = the original R3Net code's mae and maxF",
    )
    ev.add_argument("--json", metavar="FILE", help="also write the numbers as JSON keyed by data set name")
    _add_model_options(ev)
    ev.add_argument("--save-maps", metavar="OUT", help="write each map as OUT/<dataset>/<stem>.png")
    _add_process_options(ev, "processes to spawn (one per GPU with NCCL, CPU processes with gloo)")
    ev.set_defaults(handler=run_evaluate)


def add_predict(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser(
        "predict",
        help="write saliency maps for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder), with PyTorch from a "
        "checkpoint or with a model written by 'export'.",
    )
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help=CHECKPOINT_HELP)
    src.add_argument(
        "--model",
        metavar="FILE",
        help="a model written by 'export': FILE.onnx runs with onnxruntime (needs the onnx extra), "
        "any other name is loaded as TorchScript; same maps as --checkpoint",
    )
    pr.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="PATH",
        help="image files and/or folders (images directly inside, sorted)",
    )
    pr.add_argument("--output", required=True, metavar="DIR", help="folder for the maps")
    _add_model_options(pr)
    pr.set_defaults(handler=run_predict)


def add_export(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser(
        "export",
        help="write the trained model as one ONNX or TorchScript file for use outside this package",
        description="Write R3Net's inference graph (eval mode, sigmoid output at the input's size) as one "
        "file that runs without this package. Input: RGB uint8 (N, 3, H, W), 0..255; output: float "
        "(N, 1, H, W) saliency in 0..1; batch, height and width are dynamic and the ImageNet "
        "normalisation is inside the graph (this contract is also stored in the file's metadata). The "
        "file is loaded back and compared with the PyTorch model before it is given its name.",
    )
    ex.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    ex.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        help="onnx (torch.onnx's torch.export-based exporter; run it with onnxruntime or another ONNX "
        "runtime; needs the onnx extra) or torchscript (torch.jit.trace; load it with torch.jit.load or "
        "libtorch C++)",
    )
    ex.add_argument(
        "--output",
        required=True,
        metavar="FILE",
        help=f"file to write: ending in {SUFFIXES['onnx']} for onnx, {SUFFIXES['torchscript']} for torchscript; "
        "an existing file is replaced",
    )
    ex.add_argument(
        "--opset",
        type=int,
        default=None,
        metavar="N",
        help=f"ONNX opset, {OPSETS[0]} to {OPSETS[-1]} (default: {DEFAULT_OPSET}, the oldest, which the most "
        "runtimes read); onnx only",
    )
    ex.add_argument("--backbone", default=None, help=BACKBONE_HELP)
    ex.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from .evaluation.export import export_model

    export_model(args.checkpoint, args.format, args.output, backbone=args.backbone, opset=args.opset)
    return 0


def _add_process_options(parser: argparse.ArgumentParser, nproc_help: str) -> None:
    """``--nproc``, ``--backend`` and ``--master-port`` of the commands that spread work over processes."""
    parser.add_argument("--nproc", type=int, default=1, help=nproc_help)
    parser.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="distributed backend; default: nccl when CUDA is available, else gloo",
    )
    parser.add_argument("--master-port", type=int, default=None, help="rendezvous port; default: a free port")


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default=None, help=BACKBONE_HELP)
    parser.add_argument(
        "--crf",
        action="store_true",
        help="refine maps with a dense CRF (original R3Net parameters); needs the crf extra",
    )
    parser.add_argument("--amp", choices=("off", "bf16"), default="off", help="mixed precision inference")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per process")


def run_evaluate(args: argparse.Namespace) -> int:
    from .evaluation.evaluate import evaluate_checkpoint, evaluate_maps

    if args.maps is not None:
        if args.gt is None:
            raise OptionError("--maps needs --gt DIR (the ground-truth masks)")
        if args.data:
            raise OptionError("--data goes with --checkpoint; with --maps give the masks as --gt")
        for option in ("save_maps", "crf"):
            if getattr(args, option):
                raise OptionError(f"--{option.replace('_', '-')} needs --checkpoint (it acts on predictions)")
        evaluate_maps(args.maps, args.gt, protocol=args.protocol, json_path=args.json)
        return 0
    if args.gt is not None:
        raise OptionError("--gt goes with --maps; with --checkpoint give the data sets as --data")
    if not args.data:
        raise OptionError("--checkpoint needs --data DIR [DIR ...]")
    evaluate_checkpoint(
        args.checkpoint,
        args.data,
        backbone=args.backbone,
        protocol=args.protocol,
        json_path=args.json,
        save_maps=args.save_maps,
        crf=args.crf,
        amp=args.amp,
        workers=args.workers,
        nproc=args.nproc,
        backend=args.backend,
        master_port=args.master_port,
    )
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from .evaluation.predict import predict

    predict(
        args.checkpoint,
        args.input,
        args.output,
        model=args.model,
        backbone=args.backbone,
        crf=args.crf,
        amp=args.amp,
        workers=args.workers,
    )
    return 0


# ---------------------------------------------------------------------------------------- compare


def add_compare(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser(
        "compare",
        help="tables and PR / F-measure curves of many methods on many data sets",
        description="Score every method on every data set with the code of 'evaluate --maps', and write "
        "OUT/results.json ({dataset: {method: {metric: value, count}}}), OUT/table.md, table.csv and "
        "table.tex (best value of each column bold, second-best underlined; CSV plain) and "
        "OUT/curves/pr_<dataset>.png/.svg and fm_<dataset>.png/.svg (one line per method) with the "
        "curves' numbers in curves/curves.json. Scores are cached in OUT/cache per (method, data set), "
        "keyed by the files, their modification times, the protocol and the metric code: running again "
        "with one more method scores only that method. Rows and columns follow the command line.",
        epilog="example: python run.py compare --datasets ECSSD=data/ECSSD/GT DUTS_TE=data/DUTS_TE "
        "--methods Ours=runs/a/best.pt PoolNet=maps/PoolNet --out comparison",
    )
    cmp.add_argument(
        "--datasets",
        nargs="+",
        required=True,
        metavar="NAME=DIR",
        help="data sets: DIR is the masks folder (maps are matched to its masks by file stem), or a data "
        "set folder holding images and masks (images/ + masks/, Imgs/ + GT/, DUTS-TE-Image/ + DUTS-TE-Mask/, "
        "or name.jpg beside name.png), which checkpoint methods need for their images; a masks folder "
        "inside such a folder works too",
    )
    cmp.add_argument(
        "--methods",
        nargs="+",
        required=True,
        metavar="NAME=SOURCE",
        help="methods: SOURCE is a folder with one subfolder of maps per data set NAME (SOURCE/<dataset>/"
        "<stem>.png, as released maps come; a folder matching the name up to case and punctuation is "
        "accepted), or a checkpoint file, whose maps are first made as by 'evaluate --save-maps' into "
        "OUT/maps/<method>/<dataset> and kept for the next run",
    )
    cmp.add_argument("--out", required=True, metavar="OUT", help="output folder (created; rerun into it to reuse)")
    cmp.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_METRICS),
        metavar="METRIC",
        help=f"table columns per data set, in this order, from: {', '.join(METRIC_KEYS)} (results.json "
        f"always holds all nine); default: {' '.join(DEFAULT_METRICS)}",
    )
    cmp.add_argument(
        "--protocol",
        choices=("standard", "r3net"),
        default="standard",
        help="'standard' = PySODMetrics; 'r3net' = the original R3Net code's mae and maxF",
    )
    cmp.add_argument(
        "--allow-missing",
        action="store_true",
        help="score a method that lacks some maps of a data set on the maps it has (the cell is marked "
        "and not ranked) instead of stopping; a method lacking a whole data set is always just a '-'",
    )
    cmp.add_argument("--digits", type=int, default=3, help="decimals in the tables (ranks use the printed values)")
    _add_model_options(cmp)
    _add_process_options(
        cmp, "processes for scoring (and for checkpoint inference); the numbers are those of one process"
    )
    cmp.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from .evaluation.compare import InferenceOptions, compare

    compare(
        args.datasets,
        args.methods,
        args.out,
        metrics=args.metrics,
        protocol=args.protocol,
        allow_missing=args.allow_missing,
        digits=args.digits,
        inference=InferenceOptions(backbone=args.backbone, crf=args.crf, amp=args.amp, workers=args.workers),
        nproc=args.nproc,
        backend=args.backend,
        master_port=args.master_port,
    )
    return 0


# ------------------------------------------------------------------------------------- data tools


def add_make_data(sub: argparse._SubParsersAction) -> None:
    make = sub.add_parser(
        "make-data",
        help="write the generated synthetic saliency data set",
        description="Write the synthetic data set (MSRA10K layout) to OUT/train and OUT/val.",
    )
    make.add_argument("--out", required=True, help="output folder")
    make.add_argument("--train", type=int, default=400, help="number of training pairs")
    make.add_argument("--val", type=int, default=60, help="number of validation pairs")
    make.add_argument("--seed", type=int, default=2018, help="generator seed (same seed, same files)")
    make.set_defaults(handler=run_make_data)


def add_check_data(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser(
        "check-data",
        help="scan a data set and report every problem by file name",
        description="Scan image/mask pairs (headers only) and list every problem.",
    )
    check.add_argument("folders", nargs="+", help="data set folders (MSRA10K or DUTS layout)")
    check.set_defaults(handler=run_check_data)


def run_make_data(args: argparse.Namespace) -> int:
    from .data.tools import make_data

    make_data(args.out, n_train=args.train, n_val=args.val, seed=args.seed)
    return 0


def run_check_data(args: argparse.Namespace) -> int:
    from .data.tools import check_data

    return check_data(args.folders)


# ------------------------------------------------------------------------------------------- main


def _program_name() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name == "ignite-r3net" else "python run.py"


def _with_default_command(argv: Sequence[str]) -> list[str]:
    """Insert ``train`` when the command line starts with an option (or is empty)."""
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "train")
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python run.py`` and the ``ignite-r3net`` console script."""
    parser = build_parser()
    args = parser.parse_args(_with_default_command(sys.argv[1:] if argv is None else argv))
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except UserError as e:
        print(f"error: {error_line(e) if not _lists_problems(e) else e}", file=sys.stderr)
        return e.exit_code


def _lists_problems(e: UserError) -> bool:
    """A data error that lists one problem per line is printed whole."""
    return "\n  - " in str(e)


if __name__ == "__main__":
    sys.exit(main())
