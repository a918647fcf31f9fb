"""``evaluate``, ``predict`` and ``export``: a checkpoint's maps scored or written, or the model
written as a file of its own."""

from __future__ import annotations

import argparse

from ..errors import OptionError
from ..export.formats import DEFAULT_OPSET, FORMATS, OPSETS, SUFFIXES
from .common import BACKBONE_HELP, CHECKPOINT_HELP, add_model_options, add_process_options, add_protocol_option


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution, batch 1), or score "
        "saliency maps already on disk (--maps/--gt). Prints one row per data set.",
    )
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help=CHECKPOINT_HELP)
    src.add_argument("--maps", help="folder of saliency maps (PNG/JPG/BMP, any method's) to score; needs --gt")
    ev.add_argument(
        "--data", nargs="+", metavar="DIR", help="data set folders (MSRA10K or DUTS layout); with --checkpoint"
    )
    ev.add_argument("--gt", metavar="DIR", help="folder of ground-truth masks matched to --maps by file stem")
    add_protocol_option(ev)
    ev.add_argument("--json", metavar="FILE", help="also write the numbers as JSON keyed by data set name")
    add_model_options(ev)
    ev.add_argument("--save-maps", metavar="OUT", help="write each map as OUT/<dataset>/<stem>.png")
    add_process_options(ev, "processes to spawn (one per GPU with NCCL, CPU processes with gloo)")
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
    add_model_options(pr)
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
    from ..export.writer import export_model

    export_model(args.checkpoint, args.format, args.output, backbone=args.backbone, opset=args.opset)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from ..evaluation.evaluate import evaluate_checkpoint, evaluate_maps

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
    from ..evaluation.predict import predict

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
