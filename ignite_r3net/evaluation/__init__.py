"""After training: ``evaluate`` (checkpoints or saved maps), ``predict``, ``compare`` and ``export``."""

from .compare import InferenceOptions, compare
from .evaluate import evaluate_checkpoint, evaluate_maps
from .export import export_model
from .predict import predict

__all__ = ["InferenceOptions", "compare", "evaluate_checkpoint", "evaluate_maps", "export_model", "predict"]
