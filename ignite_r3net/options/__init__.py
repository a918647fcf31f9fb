"""What each command is asked to do, one dataclass per command (``commands``; ``train``'s is ``TrainConfig``),
built once from the command line (``cli``), checked once (``validate``) and passed whole to the command's entry
function and workers; an option is a dataclass field carrying its help text and rule (``fields``). None of these
import torch, so ``--help`` answers at once."""

from .commands import (
    CompareOptions,
    EvaluateOptions,
    ExportOptions,
    InferenceOptions,
    PredictOptions,
    ProcessOptions,
    ProfileOptions,
)

__all__ = [
    "CompareOptions",
    "EvaluateOptions",
    "ExportOptions",
    "InferenceOptions",
    "PredictOptions",
    "ProcessOptions",
    "ProfileOptions",
]
