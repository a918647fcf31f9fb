"""Data: pair listing and checks, decoding, synthetic data, augmentation, resumable sampling."""

from ..errors import DataError
from .checks import assert_dataset_ok, check_dataset
from .folder import IMAGE_EXTS, MASK_EXTS, list_pairs, load_image, load_mask, split_dirs
from .loader import (
    SaliencyEvalSet,
    SaliencyTrainSet,
    build_eval_loader,
    build_train_loader,
    collate_train,
    init_loader_worker,
    stop_workers,
    worker_context,
)
from .sampler import EvalShardSampler, ResumableDistributedSampler, sample_seed
from .synthetic import ensure_synthetic, make_synthetic_dataset, synthetic_paths
from .transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DeviceAugment,
    JointCropFlip,
    device_augment,
    draw_angle,
    normalize_image,
    rotate_batch,
)

__all__ = [
    "IMAGE_EXTS",
    "MASK_EXTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "DataError",
    "list_pairs",
    "split_dirs",
    "load_image",
    "load_mask",
    "check_dataset",
    "assert_dataset_ok",
    "make_synthetic_dataset",
    "synthetic_paths",
    "ensure_synthetic",
    "JointCropFlip",
    "draw_angle",
    "rotate_batch",
    "normalize_image",
    "device_augment",
    "DeviceAugment",
    "ResumableDistributedSampler",
    "EvalShardSampler",
    "sample_seed",
    "SaliencyTrainSet",
    "SaliencyEvalSet",
    "collate_train",
    "build_train_loader",
    "init_loader_worker",
    "stop_workers",
    "worker_context",
    "build_eval_loader",
]
