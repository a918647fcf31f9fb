"""``reproduce``: the paper's numbers in one command; every ``train`` option, plus its own."""

from __future__ import annotations

import argparse
import dataclasses

from ..config import TrainConfig
from ..options.fields import is_option
from ..options.reproduce import REPRODUCE_DEFAULTS, ReproduceOptions
from ..recipes import R3NET_PAPER
from .common import add_options, given_options, options_from_args


def add_reproduce(sub: argparse._SubParsersAction) -> None:
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
        if "default" not in helps[name]  # a text that says its default already says this one
    }
    texts["batch_size"] = (
        f"{helps['batch_size']} (default: {R3NET_PAPER.global_batch} / the number of processes: the recipe's "
        "global batch)"
    )
    return texts


def run_reproduce(args: argparse.Namespace) -> int:
    # imported when the command runs: see cli/__init__.py
    from ..reproduce.runner import reproduce

    reproduce(given_options(TrainConfig, args), options_from_args(ReproduceOptions, args))
    return 0
