"""Loaders: exact resume independent of workers, unpadded evaluation shards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import default_collate

from ignite_r3net.data.loader import (
    SaliencyEvalSet,
    SaliencyTrainSet,
    TrainData,
    build_eval_loader,
    build_train_loader,
    collate_train,
    stop_workers,
)
from ignite_r3net.data.sampler import sample_seed
from ignite_r3net.data.synthetic import make_synthetic_dataset
from ignite_r3net.data.transforms import DeviceAugment, normalize_image
from ignite_r3net.errors import DataError
from ignite_r3net.training.step import prepare_batch


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_synthetic_dataset(tmp_path_factory.mktemp("syn"), n_train=13, n_val=5, size=(40, 72), seed=1)


def _recipe(data: Path, batch_size: int = 2, **values) -> tuple[TrainData, int]:
    """The training data of ``data`` with ``values`` (crop, rotate, seed, workers), and the batch size."""
    return TrainData(folders=[str(data)], **{"crop": 32, "rotate": 0.0, "seed": 2018, **values}), batch_size


def _batches(loader) -> list[dict]:
    return [{k: v.clone() if torch.is_tensor(v) else v for k, v in b.items()} for b in loader]


def test_train_loader_batches_and_exact_resume(synthetic: tuple[Path, Path]) -> None:
    train, _ = synthetic
    loader, sampler = build_train_loader(*_recipe(train, crop=48, rotate=10, batch_size=3, seed=9, workers=0), 2, 1)
    assert sampler.num_batches == 2 and len(loader) == 2
    sampler.set_epoch(1)
    full = _batches(loader)
    assert len(full) == 2
    b = full[0]
    assert b["image"].shape == (3, 3, 48, 48) and b["image"].dtype == torch.uint8
    assert b["image"].is_contiguous(memory_format=torch.channels_last)
    assert b["mask"].shape == (3, 1, 48, 48) and b["mask"].dtype == torch.uint8
    assert b["angle"].shape == (3,) and b["angle"].dtype == torch.float32
    assert b["index"].shape == (3,)

    # Resume after one batch, with worker processes this time: same samples, same augmentation.
    loader2, sampler2 = build_train_loader(*_recipe(train, crop=48, rotate=10, batch_size=3, seed=9, workers=2), 2, 1)
    sampler2.set_epoch(1, skip_batches=1)
    resumed = _batches(loader2)
    assert len(resumed) == 1
    assert resumed[0]["image"].is_contiguous(memory_format=torch.channels_last)  # through worker processes too
    for key in ("image", "mask", "angle", "index"):
        assert torch.equal(resumed[0][key], full[1][key])

    sampler.set_epoch(2)
    assert not torch.equal(_batches(loader)[0]["image"], full[0]["image"])


def test_channels_last_batches_give_the_same_numbers(synthetic: tuple[Path, Path]) -> None:
    """Items are channels-last views and ``collate_train`` keeps that layout; the batch holds the
    same values as a planar one, and the device step sees bit-identical tensors either way."""
    train, _ = synthetic
    dataset = SaliencyTrainSet(train, crop=32, rotate=10)
    items = [dataset[(i, sample_seed(4, 0, i))] for i in range(6)]
    assert all(it["image"].permute(1, 2, 0).is_contiguous() for it in items)
    batch, planar = collate_train(items), default_collate(items)
    assert batch["image"].is_contiguous(memory_format=torch.channels_last) and planar["image"].is_contiguous()
    assert batch.keys() == planar.keys() and all(torch.equal(batch[k], planar[k]) for k in batch if k != "bad")
    assert batch["bad"] == [] == planar["bad"]  # every pair was readable
    assert torch.equal(normalize_image(batch["image"]), normalize_image(planar["image"]))
    augment = DeviceAugment()
    for channels_last in (False, True):
        x, y = prepare_batch(batch, torch.device("cpu"), augment, channels_last)
        x_ref, y_ref = prepare_batch(planar, torch.device("cpu"), augment, channels_last)
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
        assert x.stride() == x_ref.stride() and y.stride() == y_ref.stride()


def test_train_loader_too_small(synthetic: tuple[Path, Path]) -> None:
    train, _ = synthetic
    with pytest.raises(DataError, match="too few"):
        build_train_loader(*_recipe(train, crop=32, rotate=0, batch_size=8, seed=0), 2, 0)


def test_eval_loader_full_resolution_unpadded(synthetic: tuple[Path, Path]) -> None:
    _, val = synthetic
    names = []
    for rank in range(2):
        for batch in build_eval_loader(val, num_replicas=2, rank=rank, workers=0):
            assert batch["image"].dtype == torch.uint8 and batch["image"].shape[:2] == (1, 3)
            assert batch["mask"].shape[1] == 1 and batch["mask"].shape[-2:] == batch["image"].shape[-2:]
            names.extend(batch["name"])
    assert sorted(names) == [f"syn_{i:05d}" for i in range(5)]
    item = SaliencyEvalSet(val)[0]
    assert item["mask"].max() == 255 and item["name"] == "syn_00000" and item["index"] == 0


def test_workers_are_forked_even_in_a_spawned_rank(synthetic: tuple[Path, Path]) -> None:
    """A rank started by ``idist.Parallel`` inherits spawn as its start method; its DataLoader
    workers must not start fresh interpreters (seconds of imports each, at every validation)."""
    train, val = synthetic
    loaders = [
        build_train_loader(*_recipe(train, crop=32, rotate=0, batch_size=2, workers=1))[0],
        build_eval_loader(val, workers=1),
        build_eval_loader(val, workers=0),
    ]
    assert [
        loader.multiprocessing_context and loader.multiprocessing_context.get_start_method() for loader in loaders
    ] == [
        "fork",
        "fork",
        None,
    ]


def test_persistent_workers_stop_at_once_when_asked(synthetic: tuple[Path, Path]) -> None:
    """At the end of training the loader is still held in the Engine's reference cycles; left to
    the garbage collector its workers would each wait out a 5 s status check."""
    train, _ = synthetic
    loader, sampler = build_train_loader(*_recipe(train, crop=32, rotate=0, batch_size=2, workers=2))
    sampler.set_epoch(0)
    next(iter(loader))
    workers = list(loader._iterator._workers)
    assert all(w.is_alive() for w in workers)
    stop_workers(loader)
    assert not any(w.is_alive() for w in workers)
    # exited on being told to stop, not terminated after waiting out the 5 s status check
    assert [w.exitcode for w in workers] == [0, 0]
    stop_workers(loader)  # a second call (or a loader without workers) is harmless
