"""Data: pair listing and checks, decoding, synthetic data, augmentation, resumable sampling.

Listing, checking and generating data need only PIL and numpy. The names that need torch are
imported from their module when first used (PEP 562), so that ``make-data`` and ``check-data``
start without importing torch.
"""

from importlib import import_module
from typing import Any

from ..errors import DataError
from .checks import assert_dataset_ok, check_dataset, image_size
from .folder import IMAGE_EXTS, MASK_EXTS, dataset_of_half, list_pairs, listing_digest, split_dirs
from .synthetic import ensure_synthetic, make_synthetic_dataset, synthetic_paths

_LAZY = {  # name -> the module that defines it
    "load_image": "decode",
    "load_mask": "decode",
    "SaliencyEvalSet": "loader",
    "SaliencyTrainSet": "loader",
    "build_eval_loader": "loader",
    "build_train_loader": "loader",
    "collate_train": "loader",
    "init_loader_worker": "loader",
    "stop_workers": "loader",
    "worker_context": "loader",
    "EvalShardSampler": "sampler",
    "ResumableDistributedSampler": "sampler",
    "sample_seed": "sampler",
    "IMAGENET_MEAN": "transforms",
    "IMAGENET_STD": "transforms",
    "DeviceAugment": "transforms",
    "JointCropFlip": "transforms",
    "draw_angle": "transforms",
    "normalize_image": "transforms",
}

__all__ = [
    "DataError",
    "IMAGE_EXTS",
    "MASK_EXTS",
    "list_pairs",
    "listing_digest",
    "split_dirs",
    "dataset_of_half",
    "check_dataset",
    "assert_dataset_ok",
    "image_size",
    "make_synthetic_dataset",
    "synthetic_paths",
    "ensure_synthetic",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_LAZY[name]}", __name__), name)
