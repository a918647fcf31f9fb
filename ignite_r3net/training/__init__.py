"""Training: the ``train`` entry (checks, then workers), the Engine and its handlers."""

from .train import train

__all__ = ["train"]
