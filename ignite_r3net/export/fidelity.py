"""Whether an exported model gives the model's maps: its output is judged against the exact map (the same
model run in float64), with room for float32 rounding however the CPU's kernels round: the rule that
docs/deployment.md states, ``Fidelity.allowed_max`` at every pixel and ``allowed_mean`` on average.

An absolute bound on the difference to PyTorch's float32 output judges the CPU, not the file: a model whose
output is sensitive to rounding (an early checkpoint, whose BatchNorm statistics come from a few small
batches) gives PyTorch float32 maps several gray levels from the exact ones at single pixels, and
onnxruntime's kernels round otherwise than PyTorch's, differently on each CPU. A wrong graph (another
normalisation, no sigmoid, channels or axes swapped, other weights) is off by far more than rounding at most
pixels, and the average bound refuses it even where a few sensitive pixels widen the first bound. The bounds
widen with the model's own rounding: for a model whose float32 maps are far from exact on average, a mistake
that moves its maps less than 4 times that (a channel swap, for a model that hardly looks at colour) passes,
and such a file's maps are then within that rounding of the model's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import ExportError

HALF_GRAY_LEVEL = 0.5 / 255  # the 8-bit maps within one gray level of the exact ones
MEAN_FLOOR = 1e-5  # a twentieth of a gray level on average: far below what a wrong graph gives
ROUNDING_FACTOR = 4  # another float32 implementation rounds about as much as PyTorch's; 4x leaves room


@dataclass(frozen=True)
class Fidelity:
    """How far an exported model's output is from PyTorch's and from the exact map, on one input."""

    to_pytorch: float  # largest |exported - PyTorch float32|: the figure export prints
    exported_max: float  # largest |exported - float64|
    exported_mean: float
    pytorch_max: float  # largest |PyTorch float32 - float64|: PyTorch's own rounding
    pytorch_mean: float

    @property
    def allowed_max(self) -> float:
        return max(HALF_GRAY_LEVEL, ROUNDING_FACTOR * self.pytorch_max)

    @property
    def allowed_mean(self) -> float:
        return max(MEAN_FLOOR, ROUNDING_FACTOR * self.pytorch_mean)

    def problem(self) -> str | None:
        """Why the exported output is not the model's (None when it is); NaN fails."""
        if self.exported_max <= self.allowed_max and self.exported_mean <= self.allowed_mean:
            return None
        return (
            f"differs from PyTorch's by {self.to_pytorch:.3g}: from the exact (float64) map it is "
            f"{self.exported_max:.3g} off at most (allowed {self.allowed_max:.3g}) and {self.exported_mean:.3g} on "
            f"average (allowed {self.allowed_mean:.3g}), where PyTorch's own float32 output is "
            f"{self.pytorch_max:.3g} and {self.pytorch_mean:.3g} off"
        )


def measure(exported: torch.Tensor, float32: torch.Tensor, float64: torch.Tensor) -> Fidelity:
    """The distances of ``exported`` to PyTorch's float32 output and of both to the exact ``float64`` one."""
    exact = float64.to(torch.float64)
    off = (exported.to(torch.float64) - exact).abs()
    pytorch_off = (float32.to(torch.float64) - exact).abs()
    return Fidelity(
        to_pytorch=float((exported.to(torch.float64) - float32.to(torch.float64)).abs().max()),
        exported_max=float(off.max()),
        exported_mean=float(off.mean()),
        pytorch_max=float(pytorch_off.max()),
        pytorch_mean=float(pytorch_off.mean()),
    )


@torch.no_grad()
def check_fidelity(exported: Callable[[torch.Tensor], torch.Tensor], model: nn.Module, inputs: torch.Tensor) -> float:
    """Run ``exported`` and ``model`` (float32, and a float64 copy) on ``inputs``; ``ExportError`` when the
    exported output is not the model's by the rule above. Returns the largest difference to PyTorch's output."""
    got, expected = exported(inputs), model(inputs)
    if got.shape != expected.shape:
        raise ExportError(f"the exported model gives shape {tuple(got.shape)} for {tuple(inputs.shape)}")
    exact = copy.deepcopy(model).to(torch.float64)  # buffers too: the normalisation runs in float64 as well
    floating = inputs.to(torch.float64) if inputs.is_floating_point() else inputs
    fidelity = measure(got, expected, exact(floating))
    wrong = fidelity.problem()
    if wrong:
        raise ExportError(f"the exported model's output {wrong}, at {tuple(inputs.shape)}; nothing was written")
    return fidelity.to_pytorch
