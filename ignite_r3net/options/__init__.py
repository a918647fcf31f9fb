"""What each command is asked to do, one dataclass per command in the module of its name (``train``'s is
``config.TrainConfig``) and the groups several share (``common``), built once from the command line (``cli``),
checked once (``validate``) and passed whole to the command's entry function and workers; an option is a dataclass
field carrying its help text and rule (``fields``). None of these import torch, so ``--help`` answers at once."""

from .common import InferenceOptions, ProcessOptions
from .compare import CompareOptions
from .evaluate import EvaluateOptions
from .export import ExportOptions
from .predict import PredictOptions
from .profile import ProfileOptions

__all__ = [
    "CompareOptions",
    "EvaluateOptions",
    "ExportOptions",
    "InferenceOptions",
    "PredictOptions",
    "ProcessOptions",
    "ProfileOptions",
]
