"""Validation during training: the best checkpoint follows max F, the TensorBoard grid shows every
side output."""

from __future__ import annotations

import torch
from ignite.engine import Engine

from ignite_r3net.config import TrainConfig
from ignite_r3net.model import R3Net
from ignite_r3net.training.validation import GRID_TILE, _best_checkpointer, side_output_grid


def _validated(best, trainer: Engine, evaluator: Engine, iteration: int, max_f: float) -> None:
    trainer.state.iteration = iteration
    evaluator.state.metrics = {"maxF": max_f}
    best(evaluator)


def _best_files(folder):
    return sorted(p.name for p in folder.glob("best_*.pt"))


def test_best_checkpoint_follows_max_f(tmp_path):
    model = torch.nn.Linear(2, 1)
    trainer, evaluator = Engine(lambda e, b: None), Engine(lambda e, b: None)
    config = TrainConfig(output_dir=str(tmp_path))
    best = _best_checkpointer(model, trainer, config)
    _validated(best, trainer, evaluator, 400, 0.70)
    assert _best_files(tmp_path) == ["best_model_400_maxF=0.7000.pt"]
    _validated(best, trainer, evaluator, 800, 0.65)  # worse: the 400 model stays
    assert _best_files(tmp_path) == ["best_model_400_maxF=0.7000.pt"]
    with torch.no_grad():
        model.weight.fill_(3.0)
    _validated(best, trainer, evaluator, 1200, 0.81)
    assert _best_files(tmp_path) == ["best_model_1200_maxF=0.8100.pt"]
    saved = torch.load(tmp_path / "best_model_1200_maxF=0.8100.pt", weights_only=True)
    assert torch.equal(saved["weight"], model.weight.detach())

    # a resumed run knows the best so far: a worse score saves nothing, a better one replaces it
    resumed = _best_checkpointer(model, trainer, config)
    _validated(resumed, trainer, evaluator, 1600, 0.80)
    assert _best_files(tmp_path) == ["best_model_1200_maxF=0.8100.pt"]
    _validated(resumed, trainer, evaluator, 2000, 0.90)
    assert _best_files(tmp_path) == ["best_model_2000_maxF=0.9000.pt"]


def test_side_output_grid_has_image_gt_and_seven_outputs_per_row():
    torch.manual_seed(0)
    model = R3Net(backbone="resnet18")
    model.train()
    dataset = [
        {
            "image": torch.randint(0, 255, (3, 50, 70), dtype=torch.uint8),
            "mask": torch.randint(0, 255, (1, 50, 70), dtype=torch.uint8),
        }
        for _ in range(3)
    ]
    grid = side_output_grid(model, dataset, count=4)
    pad = 2
    assert grid.shape == (3, pad + 3 * (GRID_TILE + pad), pad + 9 * (GRID_TILE + pad))
    assert 0 <= grid.min() and grid.max() <= 1
    assert model.training, "the model goes back to training mode"
