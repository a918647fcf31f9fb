"""What several commands share: the help formatter and the process, model and protocol options."""

from __future__ import annotations

import argparse

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


def add_process_options(parser: argparse.ArgumentParser, nproc_help: str) -> None:
    """``--nproc``, ``--backend`` and ``--master-port`` of the commands that spread work over processes."""
    parser.add_argument("--nproc", type=int, default=1, help=nproc_help)
    parser.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="distributed backend; default: nccl when CUDA is available, else gloo",
    )
    parser.add_argument("--master-port", type=int, default=None, help="rendezvous port; default: a free port")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """How a checkpoint's maps are made: backbone, CRF, precision, DataLoader workers."""
    parser.add_argument("--backbone", default=None, help=BACKBONE_HELP)
    parser.add_argument(
        "--crf",
        action="store_true",
        help="refine maps with a dense CRF (original R3Net parameters); needs the crf extra",
    )
    parser.add_argument("--amp", choices=("off", "bf16"), default="off", help="mixed precision inference")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per process")


def add_protocol_option(parser: argparse.ArgumentParser) -> None:
    """``--protocol``: which code's metric definitions the scores follow."""
    parser.add_argument(
        "--protocol",
        choices=("standard", "r3net"),
        default="standard",
        help="'standard' = PySODMetrics; 'r3net' = the original R3Net code's mae and maxF",
    )
