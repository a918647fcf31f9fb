"""After training: ``evaluate`` (checkpoints or saved maps) and ``predict``."""

from .evaluate import evaluate_checkpoint, evaluate_maps
from .predict import predict

__all__ = ["evaluate_checkpoint", "evaluate_maps", "predict"]
