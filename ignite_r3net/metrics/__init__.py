"""Salient-object-detection metrics (interim: the implementation moves here from evaluation)."""

from .interim import METRIC_KEYS, SaliencyMetrics

__all__ = ["METRIC_KEYS", "SaliencyMetrics"]
