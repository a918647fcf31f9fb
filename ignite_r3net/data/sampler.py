"""Samplers whose output is a pure function of (seed, epoch, position), so a run resumes exactly."""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator

import torch
from torch.utils.data import Sampler

_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """Deterministic 63-bit seed for the sample at ``position`` of the padded permutation of ``epoch``."""
    # blake2b: ``hash()`` is salted per process, and neighbouring torch seeds (seed + position) would
    # give correlated streams
    key = struct.pack("<QQQ", seed & _MASK64, epoch & _MASK64, position & _MASK64)
    digest = hashlib.blake2b(key, digest_size=8, person=b"r3net-aug").digest()
    return int.from_bytes(digest, "little") & _MASK63


class ResumableDistributedSampler(Sampler[tuple[int, int]]):
    """A ``DistributedSampler`` (``drop_last=False``) that yields ``(index, sample_seed)`` and can start mid-epoch:
    the seed of the global position draws the augmentation, the same whether or not the epoch was interrupted."""

    def __init__(
        self,
        dataset_len: int,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        batch_size: int = 1,
    ) -> None:
        if dataset_len < 1:
            raise ValueError(f"dataset_len must be positive, got {dataset_len}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"invalid rank {rank} for num_replicas {num_replicas}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.dataset_len, self.num_replicas, self.rank = int(dataset_len), int(num_replicas), int(rank)
        self.seed, self.shuffle, self.batch_size = int(seed), bool(shuffle), int(batch_size)
        self.num_samples = math.ceil(self.dataset_len / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.epoch = self.skip_batches = 0

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        """Select the epoch for the next ``__iter__``, which (that one only) starts after ``skip_batches``."""
        if skip_batches < 0 or skip_batches > self.num_batches:
            raise ValueError(f"skip_batches must be in [0, {self.num_batches}], got {skip_batches}")
        self.epoch, self.skip_batches = int(epoch), int(skip_batches)

    def keys(self, epoch: int, skip_batches: int = 0) -> list[tuple[int, int]]:
        """This rank's ``(index, sample_seed)`` list for ``epoch``, after ``skip_batches`` batches."""
        if self.shuffle:  # the padded permutation all ranks share
            g = torch.Generator().manual_seed(self.seed + epoch)
            indices = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            indices = list(range(self.dataset_len))
        padding = self.total_size - len(indices)
        if padding > 0:
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
        start = self.rank + skip_batches * self.batch_size * self.num_replicas
        return [
            (indices[pos], sample_seed(self.seed, epoch, pos))
            for pos in range(start, self.total_size, self.num_replicas)
        ]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        # a list, not a generator: the epoch and skip set when the DataLoader's iterator is created are used
        keys = self.keys(self.epoch, self.skip_batches)
        self.skip_batches = 0
        return iter(keys)

    def __len__(self) -> int:
        return self.num_samples

    @property
    def num_batches(self) -> int:
        """Full batches per epoch on this rank (``drop_last=True``)."""
        return self.num_samples // self.batch_size


class EvalShardSampler(Sampler[int]):
    """Strided, unpadded shard for evaluation: every sample is seen once across ranks (exact metrics)."""

    def __init__(self, dataset_len: int, num_replicas: int = 1, rank: int = 0) -> None:
        if dataset_len < 0:
            raise ValueError(f"dataset_len must be >= 0, got {dataset_len}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"invalid rank {rank} for num_replicas {num_replicas}")
        self.indices = range(int(rank), int(dataset_len), int(num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)
