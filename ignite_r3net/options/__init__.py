"""What each command is asked to do, as one dataclass per command, built once from the command line
(``cli``), checked once (``validate``) and passed whole to the command's entry function and workers.
An option is a dataclass field carrying its help text and rule (``fields``); ``commands`` holds each
command's options and the groups several compose. ``TrainConfig`` (``config.py``) is ``train``'s. None
of these import torch, so ``--help`` answers at once.
"""

from .commands import CompareOptions, EvaluateOptions, ExportOptions, InferenceOptions, PredictOptions, ProcessOptions

__all__ = ["CompareOptions", "EvaluateOptions", "ExportOptions", "InferenceOptions", "PredictOptions", "ProcessOptions"]
