"""After training: ``evaluate`` (checkpoints or saved maps), ``predict`` and ``compare``."""

from .compare import InferenceOptions, compare
from .evaluate import evaluate_checkpoint, evaluate_maps
from .predict import predict

__all__ = ["InferenceOptions", "compare", "evaluate_checkpoint", "evaluate_maps", "predict"]
