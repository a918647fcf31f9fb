"""The command line, its flags generated from the options dataclasses; a ``UserError`` becomes one ``error: ...``
line. The options need no torch and each command imports its code only when it runs: ``--help`` answers at once."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from .config import TrainConfig
from .console import echo, tolerate_closed_console
from .errors import Terminated, UserError, ending_line
from .model.backbones import BACKBONE_NAMES
from .options import CompareOptions, EvaluateOptions, ExportOptions, PredictOptions, ProfileOptions
from .options.command_line import add_options, given_options, options_from_args, with_default
from .options.fields import OUTPUT_FOLDER, flags_named, is_option
from .options.predict import PREDICT_NOT_PIXELS
from .options.reproduce import REPRODUCE_DEFAULTS, ReproduceOptions
from .options.serve import ServeOptions
from .recipes import R3NET_PAPER

Subparsers = argparse._SubParsersAction


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose refusals are one ``error:`` line (exit 2), not the usage first; its sub-commands' too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} ({self.prog} --help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    parser = OneLineErrors(
        prog=name if name == "ignite-r3net" else "python run.py",
        description="Train and evaluate R3Net saliency detection with pytorch-ignite. "
        "Without a command, 'train' is run: `python run.py --nproc 2 ...`.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_train(sub)  # the commands in the order --help lists them
    for command in COMMANDS:
        command.add_to(sub)
    add_reproduce(sub)
    add_data_commands(sub)
    for parser_of_command in sub.choices.values():
        parser_of_command.allow_abbrev = False  # "--checkpoint" must not pass for "--checkpoint-every"
        parser_of_command.set_defaults(command_parser=parser_of_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python run.py`` and the ``ignite-r3net`` console script."""
    tolerate_closed_console()
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or (words[0].startswith("-") and words[0] not in ("-h", "--help")):
        words.insert(0, "train")  # the default command
    parser = build_parser()
    refuse_misspelled_flags(parser, words)
    args, unknown = parser.parse_known_args(words)
    if unknown:  # the command's usage and --help, not the top level's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.handler(args)
    except KeyboardInterrupt as e:
        echo(ending_line(e), sys.stderr)  # a closed pipe (`2>&1 | head`) loses the line, not the exit code
        return 143 if isinstance(e, Terminated) else 130
    except UserError as e:
        echo(ending_line(e), sys.stderr)
        return e.exit_code


def refuse_misspelled_flags(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """An unknown ``--flag`` close to one of the command's is refused naming that one, before argparse would
    first name the required flag it left out (``make-data --ouput x``: "did you mean --output?")."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    command = commands.get(words[0])
    if command is None:
        return
    known = list(command._option_string_actions)
    for word in words[1:]:
        if word == "--":
            return
        flag = word.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=1) if flag.startswith("--") and flag not in known else []
        if close:
            command.error(f"unrecognized arguments: {flag} (did you mean {close[0]}?)")


# the commands


def add_train(sub: Subparsers) -> None:
    """``train`` (the default command): one ``--flag`` per recipe field of ``TrainConfig``."""
    train = sub.add_parser(
        "train",
        help="train R3Net (the default command)",
        description="Train R3Net with the original training recipe (SGD, poly LR, 7 side-output losses) "
        "on one or many processes.",
    )
    train.add_argument(
        "--config",
        metavar="FILE",
        help="rerun the recipe a run saved in FILE (its config.json): the options given on the command line "
        "replace the saved ones; the saved --resume is not taken, and the starting weights are fetched again "
        "(with a warning when they differ from the saved run's); default: none (--recipe's values under the "
        "options given)",
    )
    backbone_help = next(f for f in dataclasses.fields(TrainConfig) if f.name == "backbone").metadata["help"]
    add_options(train, TrainConfig, backbone=f"{backbone_help}; one of: {BACKBONE_NAMES}")
    train.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from .training.recipe_config import saved_weights
    from .training.start import train

    expected = saved_weights(args.config, given_options(TrainConfig, args)) if args.config else None
    train(train_config(args), expected_weights=expected)
    return 0


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The training config ``train``'s parsed command line describes (under ``--config FILE``'s when given)."""
    from .training.recipe_config import config_from_file, config_from_options

    given = given_options(TrainConfig, args)
    return config_from_file(args.config, given) if args.config else config_from_options(given)


def add_reproduce(sub: Subparsers) -> None:
    """``reproduce``: every ``train`` option, with the paper's recipe as defaults, plus its own."""
    parser = sub.add_parser(
        "reproduce",
        help="train with the paper's recipe, evaluate as the paper did, and compare with its numbers",
        description="Train R3Net with the original recipe (--recipe r3net-paper) on MSRA10K from --data-root "
        "(resuming a run in OUTPUT_DIR), evaluate the final checkpoint on every test set found in --data-root "
        "(ECSSD, HKU-IS, PASCAL-S, SOD, DUT-OMRON, DUTS-TE) with the original protocol without and with the "
        "original CRF and with the standard protocol, and print and write OUTPUT_DIR/results.md, results.csv "
        "and results.json: the published max F and MAE beside ours, the differences and whether each is within "
        "the tolerance. A rerun evaluates nothing again for the same checkpoint. Any training option below "
        "replaces the recipe's value.",
        epilog="example: python run.py reproduce --data-root /data/saliency --nproc 1",
    )
    add_options(parser, ReproduceOptions)
    add_options(
        parser,
        TrainConfig,
        **_recipe_defaults(),
        recipe="training recipe (default: r3net-paper; what each sets: train --help)",
        data=f"training data (default: {' '.join(REPRODUCE_DEFAULTS['data'])}, found in --data-root)",
        output_dir=f"folder of the training runs (seed-N/), evaluations/ and results.* "
        f"(default: {REPRODUCE_DEFAULTS['output_dir']})",
        resume="training checkpoint to resume from (default: auto, the newest in OUTPUT_DIR/seed-N)",
    )
    parser.set_defaults(handler=run_reproduce)


def _recipe_defaults() -> dict[str, str]:
    """The help of each option the paper's recipe sets, with the recipe's value as its default."""
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig) if is_option(f)}
    texts = {
        name: f"{helps[name]} (default: {value}, the recipe's)"
        for name, value in R3NET_PAPER.values.items()
        if "default:" not in helps[name]  # a text that says its default already says this one
    }
    texts["batch_size"] = (
        f"{helps['batch_size']} (default: {R3NET_PAPER.global_batch} / the number of processes: the recipe's "
        "global batch)"
    )
    return texts


def run_reproduce(args: argparse.Namespace) -> int:
    from .reproduce.runner import reproduce

    reproduce(given_options(TrainConfig, args), options_from_args(ReproduceOptions, args))
    return 0


def add_data_commands(sub: Subparsers) -> None:
    """``make-data`` and ``check-data``: the synthetic data set and the data set scan (no torch)."""
    make = sub.add_parser(
        "make-data",
        help="write the generated synthetic saliency data set",
        description="Write the synthetic data set (MSRA10K layout) to OUT/train and OUT/val.",
    )
    make.add_argument(
        "--out", *OUTPUT_FOLDER, dest="out", required=True, metavar="DIR", help="output folder (required)"
    )
    make.add_argument("--train", type=int, default=400, metavar="N", help=with_default("number of training pairs", 400))
    make.add_argument("--val", type=int, default=60, metavar="N", help=with_default("number of validation pairs", 60))
    make.add_argument(
        "--seed", type=int, default=2018, help=with_default("generator seed (same seed, same files)", 2018)
    )
    make.set_defaults(handler=run_make_data)
    check = sub.add_parser(
        "check-data",
        help="scan a data set and report every problem by file name",
        description="Scan image/mask pairs (headers only, unless --decode) and list every problem. What "
        "the header scan finds about each file is cached in $XDG_CACHE_HOME/ignite_r3net/scan (default "
        "~/.cache), keyed by the file's path, size and modification time, so a second scan reads only new "
        "or changed files (--decode decodes every file each time).",
    )
    check.add_argument(
        "folders", nargs="+", metavar="FOLDER", help="data set folders (MSRA10K or DUTS layout), one or more (required)"
    )
    check.add_argument(
        "--decode",
        action="store_true",
        help="also decode every image and mask in full, as training does, and name each one that fails or "
        "that libjpeg decodes with warnings (corrupt or truncated data: part of the picture missing or grey); "
        "slower than the header scan (default: off, the headers only)",
    )
    check.set_defaults(handler=run_check_data)


def run_make_data(args: argparse.Namespace) -> int:
    from .data.commands import make_data

    make_data(args.out, n_train=args.train, n_val=args.val, seed=args.seed)
    return 0


def run_check_data(args: argparse.Namespace) -> int:
    from .data.commands import check_data

    return check_data(args.folders, decode=args.decode)


@dataclass(frozen=True)
class Command:
    """A command whose flags come from its options dataclass and that runs with them the function ``run`` names
    (``.module:function``, imported only when the command runs)."""

    name: str
    options: type
    run: str
    help: str
    description: str
    epilog: str | None = None

    def add_to(self, sub: Subparsers) -> None:
        parser = sub.add_parser(self.name, help=self.help, description=self.description, epilog=self.epilog)
        add_options(parser, self.options)
        parser.set_defaults(handler=self._handle)

    def _handle(self, args: argparse.Namespace) -> int:
        module, function = self.run.split(":")
        getattr(importlib.import_module(module, __package__), function)(options_from_args(self.options, args))
        return 0


# predict's options that change no pixel besides those naming the model, the images and the folder
_PREDICT_RUN_OPTIONS = flags_named(
    PredictOptions, set(PREDICT_NOT_PIXELS) - {"checkpoint", "model", "inputs", "output", "overwrite"}
)

COMMANDS = (
    Command(
        "evaluate",
        EvaluateOptions,
        ".evaluation.evaluate:evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution unless --size or "
        "--max-side, batch 1), or score saliency maps already on disk (--maps/--gt). Prints one row per "
        "data set; --json and --per-image write the numbers as files.",
    ),
    Command(
        "predict",
        PredictOptions,
        ".evaluation.predict:predict",
        help="write saliency maps (or cutouts) for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder), with PyTorch from a "
        "checkpoint or with a model written by 'export', on one or --nproc processes (or the ranks of "
        "torchrun or srun). With --cutout, write the image with the map as its alpha channel instead (an "
        "RGBA PNG: a background remover's output). Each file is written atomically; a rerun into the same "
        "--output skips those it holds from the same model (by content) and the same options that change "
        "pixels (recorded in OUTPUT/.predict), so a stopped run continues; the options that change no pixel "
        f"({', '.join(_PREDICT_RUN_OPTIONS)}) may differ, and --tf32 only counts where it acts (on a GPU). "
        "Images that cannot be read are listed at the end (exit code 1); the others are written.",
        epilog="example (a folder of photos to cutouts): python run.py predict --checkpoint CKPT --input "
        "photos --output cutouts --cutout",
    ),
    Command(
        "compare",
        CompareOptions,
        ".evaluation.compare:compare",
        help="tables and PR / F-measure curves of many methods on many data sets",
        description="Score every method on every data set with the code of 'evaluate --maps', and write "
        "OUT/results.json ({dataset: {method: {metric: value, count}}}), OUT/table.md, table.csv and "
        "table.tex (best value of each column bold, second-best underlined; CSV plain) and "
        "OUT/curves/pr_<dataset>.png/.svg and fm_<dataset>.png/.svg (one line per method) with the "
        "curves' numbers in curves/curves.json, and the visual comparison OUT/figures/visual_<dataset>.png/.pdf "
        "(image, ground truth and each method's map for --show images; see --show). Scores are cached in "
        "OUT/cache per (method, data set), keyed by the files, their modification times, the protocol and the "
        "metric code: running again with one more method scores only that method. Rows and columns follow the "
        "command line.",
        epilog="example: python run.py compare --datasets ECSSD=data/ECSSD/GT DUTS_TE=data/DUTS_TE "
        "--methods Ours=runs/a/best.pt PoolNet=maps/PoolNet --out comparison",
    ),
    Command(
        "export",
        ExportOptions,
        ".export.writer:export_model",
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
    Command(
        "serve",
        ServeOptions,
        ".serve.server:serve",
        help="answer HTTP requests with saliency maps and cutouts, with a demo page (needs the serve extra)",
        description='Serve the model over HTTP (FastAPI on uvicorn; pip install -e ".[serve]" in the clone): POST '
        "/predict takes an image (multipart field 'image') and answers a PNG, the map predict writes for it "
        "(?output=map, the default) or the cutout (?output=cutout), with ?threshold=T, ?max_side=N and ?crf=true "
        "as predict's options, and for a cutout ?refine=true (--refine-foreground), ?background=COLOR or none "
        "(--background; # written %23) and ?jpeg=true; GET /healthz says the model, device and provider; GET / is "
        "a demo page (choose or drop a photo, see its map and cutout; one model run per photo, the threshold, "
        "refinement and background composed in the page). A bad upload is answered 4xx with one line of JSON, a "
        "full queue 503; each request is one log line (status, bytes, milliseconds). SIGTERM or Ctrl-C answers the "
        "requests in flight, then stops.",
        epilog="example: python run.py serve --checkpoint runs/r3net/best_model_8000_maxF=0.9350.pt --port 8000 & "
        "curl --retry 30 --retry-connrefused -F image=@photo.jpg 'http://127.0.0.1:8000/predict?output=cutout' "
        "-o cutout.png",
    ),
    Command(
        "profile",
        ProfileOptions,
        ".profiling.command:profile",
        help="what a model costs: parameters, GMACs, latency, images/s and peak memory per size, batch and mode",
        description="Measure a checkpoint (or a bare --backbone) at each --size, --batch-size and --amp mode on one "
        "device, in inference (and with --onnx an exported file in onnxruntime), in a training step (--train), or "
        "the largest training batch a GPU holds (--train --find-max-batch). Each row is printed, and written to "
        "--json, as it is measured: parameters (M), GMACs per image (torch.utils.flop_counter's FLOPs / 2), the "
        "median and 95th percentile latency per batch over --repeats runs after --warmup, the device synchronised "
        "around each run, images/s (batch / median), and the peak memory (the CUDA allocator's peak on a GPU; on "
        "the CPU, the process's peak resident memory above what it held before the row). A mode that cannot run is "
        "a row saying why. See docs/profile.md.",
        epilog="example: python run.py profile --backbone resnext101_32x4d --size 400 300 --batch-size 1 8 "
        "--amp off bf16",
    ),
)
