"""After training: ``evaluate`` (checkpoints or saved maps), ``predict`` and ``export``."""

from .evaluate import evaluate_checkpoint, evaluate_maps
from .export import export_model
from .predict import predict

__all__ = ["evaluate_checkpoint", "evaluate_maps", "export_model", "predict"]
