"""The commands whose flags come from an options dataclass (``ignite_r3net.options``): ``evaluate``,
``predict``, ``compare`` and ``export``, one row each. Each row's function imports its command's code
when the command runs, so that ``--help`` and the other commands never import it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..options import CompareOptions, EvaluateOptions, ExportOptions, PredictOptions
from .common import add_options, options_from_args


def _evaluate(options: EvaluateOptions) -> None:
    """``evaluate``: a checkpoint scored on data sets, or saliency maps already on disk scored."""
    from ..evaluation.evaluate import evaluate

    evaluate(options)


def _predict(options: PredictOptions) -> None:
    """``predict``: saliency maps (or cutouts) of images, from a checkpoint or an exported model."""
    from ..evaluation.predict import predict

    predict(options)


def _compare(options: CompareOptions) -> None:
    """``compare``: the field's tables and curves for many methods on many data sets."""
    from ..evaluation.compare import compare

    compare(options)


def _export(options: ExportOptions) -> None:
    """``export``: the trained model as one ONNX or TorchScript file of its own, or a Hugging Face Hub folder."""
    from ..export.writer import export_model

    export_model(options)


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, its options dataclass, the function it runs with them, and the
    ``add_parser`` texts (``help``, ``description``, ``epilog``)."""

    name: str
    options: type
    run: Callable[[Any], None]
    help: str
    description: str
    epilog: str | None = None

    def add_to(self, sub: argparse._SubParsersAction) -> None:
        """This command's parser in ``sub``, with one flag per option field."""
        parser = sub.add_parser(self.name, help=self.help, description=self.description, epilog=self.epilog)
        add_options(parser, self.options)
        parser.set_defaults(handler=self._handle)

    def _handle(self, args: argparse.Namespace) -> int:
        self.run(options_from_args(self.options, args))
        return 0


COMMANDS = (
    Command(
        "evaluate",
        EvaluateOptions,
        _evaluate,
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution unless --size or "
        "--max-side, batch 1), or score saliency maps already on disk (--maps/--gt). Prints one row per "
        "data set; --json and --per-image write the numbers as files.",
    ),
    Command(
        "predict",
        PredictOptions,
        _predict,
        help="write saliency maps (or cutouts) for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder), with PyTorch from a "
        "checkpoint or with a model written by 'export', on one or --nproc processes (or the ranks of "
        "torchrun or srun). With --cutout, write the image with the map as its alpha channel instead (an "
        "RGBA PNG: a background remover's output). Each file is written atomically; a rerun into the same "
        "--output skips those it holds from the same model file and options (recorded in OUTPUT/.predict), "
        "so a stopped run continues. Images that cannot be read are listed at the end (exit code 1); the "
        "others are written.",
        epilog="example (a folder of photos to cutouts): python run.py predict --checkpoint CKPT --input "
        "photos --output cutouts --cutout",
    ),
    Command(
        "compare",
        CompareOptions,
        _compare,
        help="tables and PR / F-measure curves of many methods on many data sets",
        description="Score every method on every data set with the code of 'evaluate --maps', and write "
        "OUT/results.json ({dataset: {method: {metric: value, count}}}), OUT/table.md, table.csv and "
        "table.tex (best value of each column bold, second-best underlined; CSV plain) and "
        "OUT/curves/pr_<dataset>.png/.svg and fm_<dataset>.png/.svg (one line per method) with the "
        "curves' numbers in curves/curves.json, and the visual comparison OUT/figures/visual_<dataset>.png/.pdf "
        "(image, ground truth and each method's map for --show images; see --show). Scores are cached in "
        "OUT/cache per (method, data set), "
        "keyed by the files, their modification times, the protocol and the metric code: running again "
        "with one more method scores only that method. Rows and columns follow the command line.",
        epilog="example: python run.py compare --datasets ECSSD=data/ECSSD/GT DUTS_TE=data/DUTS_TE "
        "--methods Ours=runs/a/best.pt PoolNet=maps/PoolNet --out comparison",
    ),
    Command(
        "export",
        ExportOptions,
        _export,
        help="write the trained model as one ONNX or TorchScript file for use outside this package, or as a "
        "folder for the Hugging Face Hub",
        description="Write R3Net's inference graph (eval mode, sigmoid output at the input's size) as one "
        "file that runs without this package. Input: RGB uint8 (N, 3, H, W), 0..255; output: float "
        "(N, 1, H, W) saliency in 0..1; batch, height and width are dynamic and the ImageNet "
        "normalisation is inside the graph (this contract is also stored in the file's metadata). The "
        "file is loaded back and compared with the PyTorch model before it is given its name. "
        "--format hub writes a folder instead: model.safetensors (the state_dict), config.json (backbone, "
        "contract, the run's config.json as it is, starting weights and sha256s) and a model card README.md; "
        "upload it with your token (hf upload ORG/NAME DIR) and every command reads it as --checkpoint "
        "hf-hub:ORG/NAME.",
        epilog="example: python run.py export --checkpoint runs/r3net/best_model_8000_maxF=0.9350.pt --format hub "
        "--output r3net-duts --results comparison/results.json --trained-on DUTS-TR --repo-id me/r3net-duts",
    ),
)
