"""``export`` judges the written file, not the CPU: a wrong graph is refused, while float32 rounding is
accepted however the kernels round, for a model whose maps float32 rounding moves by a gray level.

The model is sensitive to rounding by construction (``helpers.save_rounding_sensitive_r3net``), so these tests
hold on any CPU; another CPU's kernels are stood in for by noise as large as PyTorch's own float32 error at each
pixel, which the old check (an absolute 1e-4 on the difference to PyTorch) refused. The wrong graphs are those of
an ordinary model (``helpers.save_spread_r3net``): the check's bounds widen with the model's own rounding, so on
the sensitive model a mistake that moves its maps less than that rounding (a channel swap: with one torch thread
its float32 error grows enough to cover it) is not a mistake the check can see."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import save_rounding_sensitive_r3net, save_spread_r3net
from torch import nn

from ignite_r3net import cli
from ignite_r3net.export import fidelity
from ignite_r3net.export import writer as export
from ignite_r3net.model.trained_model import build_model, read_trained_weights


@pytest.fixture(scope="module")
def sensitive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_rounding_sensitive_r3net(tmp_path_factory.mktemp("sensitive") / "best_model_1_maxF=0.5000.pt")


def _graph(checkpoint: Path) -> export.SaliencyGraph:
    return export.SaliencyGraph(build_model(read_trained_weights(checkpoint), "cpu"))


def _check_image() -> torch.Tensor:
    return torch.randint(0, 256, (1, 3, 45, 71), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def test_the_model_rounds_by_about_a_gray_level_in_float32(sensitive: Path) -> None:
    """What the tests below rely on: PyTorch's own float32 maps of this model are further from the exact ones
    than the old check's 1e-4, on any CPU (the rounding happens at values of 2**16)."""
    graph = _graph(sensitive)
    with torch.no_grad():
        image = _check_image()
        own = fidelity.measure(graph(image), graph(image), copy.deepcopy(graph).double()(image))
    assert own.pytorch_max > 1e-3, own
    assert float(graph(image).detach().std()) > 0.05  # maps with structure


Mistake = Callable[[export.SaliencyGraph, torch.Tensor], torch.Tensor]


class _Wrong(nn.Module):
    """A graph that gets one thing wrong around the right model."""

    def __init__(self, graph: export.SaliencyGraph, mistake: Mistake) -> None:
        super().__init__()
        self.graph, self.mistake = graph, mistake

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.mistake(self.graph, image)


MISTAKES = {
    "normalisation without the std": lambda g, x: g.model(x.float() / 255 - 0.45),
    "no sigmoid": lambda g, x: torch.logit(g(x), eps=1e-6),
    "BGR channels": lambda g, x: g(x.flip(1)),
    "height and width transposed": lambda g, x: g(x.transpose(2, 3)).transpose(2, 3),
}


# about 1 to 1.5 s each, kept in the fast tier on purpose: the export's self-check on every kind of mistake
@pytest.mark.parametrize("mistake", [*MISTAKES, "another checkpoint"])
def test_a_wrong_graph_is_refused_and_nothing_is_written(
    mistake: str,
    spread_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    write = export._write_torchscript

    def write_wrong(graph: export.SaliencyGraph, example, path, metadata) -> None:
        if mistake == "another checkpoint":
            wrong = _graph(save_spread_r3net(tmp_path / "other.pt", seed=2))
        else:
            wrong = _Wrong(graph, MISTAKES[mistake])
        write(wrong, example, path, metadata)

    monkeypatch.setattr(export, "_write_torchscript", write_wrong)
    out = tmp_path / "out" / "r3net.pt"
    args = ["export", "--checkpoint", str(spread_checkpoint), "--format", "torchscript", "--output", str(out)]
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the exported model's output differs from PyTorch's by ") and "\n" not in err, err
    assert err.endswith("at (1, 3, 45, 71); nothing was written"), err
    assert not out.exists() and list(out.parent.iterdir()) == []


def _as_on_another_cpu(load: Callable, graph: export.SaliencyGraph) -> Callable:
    """``load_exported`` whose model rounds as another CPU's kernels may: PyTorch's own float32 error at each
    pixel, with a random sign and size, added to the file's output."""

    def load_on_another_cpu(path, *args, **kwargs):
        run = load(path, *args, **kwargs)
        exact = copy.deepcopy(graph).double()

        def run_rounded_otherwise(image: torch.Tensor) -> torch.Tensor:
            own_error = (graph(image).double() - exact(image)).abs()
            signs = torch.rand(own_error.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
            return (run(image).double() + signs * own_error).float()

        return run_rounded_otherwise

    return load_on_another_cpu


# TorchScript (about 1.5 s) kept in the fast tier on purpose: the acceptance of float32 rounding on any CPU
@pytest.mark.parametrize("fmt", ["torchscript", pytest.param("onnx", marks=pytest.mark.slow)])
def test_float32_rounding_of_a_sensitive_model_is_accepted_on_any_cpu(
    fmt: str, sensitive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / f"r3net.{'onnx' if fmt == 'onnx' else 'pt'}"
    args = ["export", "--checkpoint", str(sensitive), "--format", fmt, "--output", str(out)]
    assert cli.main(args) == 0, capsys.readouterr().err  # this CPU's own kernels
    assert "max difference to PyTorch" in capsys.readouterr().out
    graph = _graph(sensitive)
    monkeypatch.setattr(export, "load_exported", _as_on_another_cpu(export.load_exported, graph))
    with torch.no_grad():
        difference = export._check_written(out, graph)
    assert difference > 1e-4  # what the old check refused: "differs from PyTorch's by 0.000255 (> 0.0001)"


def test_a_hub_folder_that_reads_back_with_other_maps_is_refused(
    sensitive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The Hub export's read-back judges the maps by the same rule (its weights are compared bit for bit
    first): a model that reads back with the right weights but computes otherwise is refused."""
    build = export.build_model
    calls = []

    def build_then_misread(weights, device):
        model = build(weights, device)
        calls.append(model)
        if len(calls) == 2:  # the read-back: same weights, but the last refinement's output doubled
            model.predict6.register_forward_hook(lambda module, args, output: output * 2)
        return model

    monkeypatch.setattr(export, "build_model", build_then_misread)
    out = tmp_path / "hub"
    assert cli.main(["export", "--checkpoint", str(sensitive), "--format", "hub", "--output", str(out)]) == 1
    assert "the exported model's output differs from PyTorch's" in capsys.readouterr().err
    assert not out.exists()


def test_nan_and_a_wrong_shape_are_refused() -> None:
    model = nn.Sequential(nn.Conv2d(3, 1, 1), nn.Sigmoid())
    image = torch.rand(1, 3, 8, 8)
    with pytest.raises(fidelity.ExportError, match="differs from PyTorch's by nan"):
        fidelity.check_fidelity(lambda x: model(x) * float("nan"), model, image)
    with pytest.raises(fidelity.ExportError, match=r"gives shape \(1, 1, 8, 4\)"):
        fidelity.check_fidelity(lambda x: model(x)[..., :4], model, image)
    assert fidelity.check_fidelity(model, model, image) == 0
