"""Resumable sampler: DistributedSampler order, per-position seeds, exact mid-epoch resume."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from ignite_r3net.data.sampler import EvalShardSampler, ResumableDistributedSampler, sample_seed


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("n,world", [(10, 1), (10, 3), (7, 2), (2, 4)])
def test_matches_distributed_sampler_and_covers_permutation(n: int, world: int) -> None:
    per_rank = []
    for rank in range(world):
        ours = ResumableDistributedSampler(n, world, rank, seed=11)
        ours.set_epoch(4)
        ref = DistributedSampler(_Sized(n), num_replicas=world, rank=rank, seed=11, shuffle=True)
        ref.set_epoch(4)
        keys = list(ours)
        assert [k[0] for k in keys] == list(ref)
        assert len(ours) == len(ref) == -(-n // world)
        assert all(isinstance(i, int) and isinstance(s, int) and 0 <= s < 2**63 for i, s in keys)
        per_rank.append(keys)
    indices = [k[0] for keys in per_rank for k in keys]
    assert set(indices) == set(range(n))  # padding only repeats, never drops
    assert len(indices) == -(-n // world) * world
    seeds = [k[1] for keys in per_rank for k in keys]
    assert len(set(seeds)) == len(seeds)  # one seed per global position, padding included


def test_deterministic_and_differs_across_epochs() -> None:
    a = ResumableDistributedSampler(50, 2, 1, seed=3)
    b = ResumableDistributedSampler(50, 2, 1, seed=3)
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a) == list(b)
    b.set_epoch(3)
    epoch3 = list(b)
    a.set_epoch(2)
    epoch2 = list(a)
    assert [k[0] for k in epoch2] != [k[0] for k in epoch3]
    assert not {k[1] for k in epoch2} & {k[1] for k in epoch3}
    assert sample_seed(3, 2, 0) != sample_seed(3, 3, 0) != sample_seed(4, 3, 0)


def test_skip_batches_yields_exact_tail() -> None:
    sampler = ResumableDistributedSampler(37, 3, 2, seed=5, batch_size=4)
    assert len(sampler) == 13 and sampler.num_batches == 3
    sampler.set_epoch(6)
    full = list(sampler)
    for skip in range(sampler.num_batches + 1):
        sampler.set_epoch(6, skip_batches=skip)
        assert list(sampler) == full[skip * 4 :]
        assert len(sampler) == 13  # the full length, whatever the skip
    # The skip is one-shot: the next iteration of the same epoch is whole again.
    sampler.set_epoch(6, skip_batches=2)
    iter(sampler)
    assert list(sampler) == full
    with pytest.raises(ValueError):
        sampler.set_epoch(6, skip_batches=4)


def test_iter_is_eager() -> None:
    sampler = ResumableDistributedSampler(20, 1, 0, seed=1)
    sampler.set_epoch(0)
    it = iter(sampler)
    sampler.set_epoch(1)  # must not affect an iterator already created
    epoch0 = ResumableDistributedSampler(20, 1, 0, seed=1)
    assert list(it) == list(epoch0)


def test_no_shuffle_order() -> None:
    sampler = ResumableDistributedSampler(5, 2, 0, seed=0, shuffle=False)
    assert [k[0] for k in sampler] == [0, 2, 4]


@pytest.mark.parametrize("n,world", [(9, 2), (5, 4), (3, 4), (0, 2)])
def test_eval_shard_covers_each_sample_once(n: int, world: int) -> None:
    shards = [list(EvalShardSampler(n, world, r)) for r in range(world)]
    flat = sorted(i for s in shards for i in s)
    assert flat == list(range(n))
    assert [len(EvalShardSampler(n, world, r)) for r in range(world)] == [len(s) for s in shards]
    assert all(isinstance(i, int) for s in shards for i in s)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ResumableDistributedSampler(10, 2, 2, seed=0)
    with pytest.raises(ValueError):
        ResumableDistributedSampler(0, 1, 0, seed=0)
    with pytest.raises(ValueError):
        EvalShardSampler(10, 2, -1)
    assert torch.Generator().manual_seed(sample_seed(2**40, 10**6, 10**9)) is not None
