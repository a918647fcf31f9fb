"""The foreground's own colours where a cutout's alpha is soft, by Blur-fusion x2 (Forte and Pitié, ICIP 2021),
from the photo and its alpha alone: docs/deployment.md gives the update and its two windows. Box sums make each
window cost the same whatever its size; torch runs it on the device of the image."""

from __future__ import annotations

import torch
import torch.nn.functional as F

RADII = (90, 6)  # the paper's two sizes, in pixels, as the radii of the box windows
REDUCTION = 4  # the wide window's means, smooth at that scale, are computed on a 4x smaller grid
_EPSILON = 1e-6  # a window without any foreground (or background) weight


def refine_foreground(image: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The RGB of a refined cutout of ``image`` (uint8 ``(3, H, W)``) with ``alpha`` (uint8 ``(H, W)``), on the
    image's device: the estimated foreground where ``0 < alpha < 255``, the image's own pixels elsewhere."""
    unit = 1 / 255
    estimate = estimate_foreground(image.float().mul_(unit), alpha.float().mul_(unit)[None])
    soft = (alpha > 0) & (alpha < 255)
    return torch.where(soft, estimate.mul_(255).round_().to(torch.uint8), image)


def estimate_foreground(image: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Blur-fusion x2: the foreground colour, float ``(3, H, W)`` in 0..1, of ``image`` (float ``(3, H, W)`` in
    0..1) under ``alpha`` (float ``(1, H, W)`` in 0..1)."""
    height, width = image.shape[-2:]
    stack = image.new_empty(7, height, width)  # alpha F, alpha, (1 - alpha) B: what each pass sums over windows
    # the first, wide pass on a reduced grid: its windows' means are smooth, the fusion is at full resolution
    torch.mul(alpha, image, out=stack[:3])
    small = [F.avg_pool2d(x[None], REDUCTION, ceil_mode=True)[0] for x in (stack[:3], alpha, image)]
    small = [small[0], small[1], small[2] - small[0], 1 - small[1]]
    sums = window_sums(torch.cat(small), max(1, round(RADII[0] / REDUCTION)))
    means = torch.cat([sums[:3] / sums[3:4].clamp_min(_EPSILON), sums[4:7] / sums[7:8].clamp_min(_EPSILON)])
    means = F.interpolate(means[None], size=(height, width), mode="bilinear", align_corners=False)[0]
    residual = _residual(image, alpha, means[:3], means[3:])
    foreground = torch.addcmul(means[:3], alpha, residual).clamp_(0, 1)
    background = (means[3:] + residual).addcmul_(alpha, residual, value=-1).clamp_(0, 1)
    # the second, narrow pass at full resolution, from the first pass's F and B
    torch.mul(alpha, foreground, out=stack[:3])
    stack[3:4] = alpha
    torch.mul(1 - alpha, background, out=stack[4:])
    sums = window_sums(stack, RADII[1])
    counts = _window_counts(height, RADII[1], image.device)[:, None] * _window_counts(width, RADII[1], image.device)
    mean_foreground = sums[:3].div_(sums[3:4].clamp_min(_EPSILON))
    mean_background = sums[4:7].div_((counts - sums[3:4]).clamp_min_(_EPSILON))
    residual = _residual(image, alpha, mean_foreground, mean_background)
    return torch.addcmul(mean_foreground, alpha, residual).clamp_(0, 1)


def _residual(
    image: torch.Tensor, alpha: torch.Tensor, mean_foreground: torch.Tensor, mean_background: torch.Tensor
) -> torch.Tensor:
    """I - alpha F_mean - (1 - alpha) B_mean: what the means leave unexplained, which the paper's update gives F
    in proportion to alpha (F = F_mean + alpha residual) and B to 1 - alpha."""
    return (image - mean_background).addcmul_(alpha, mean_foreground - mean_background, value=-1)


def _window_counts(n: int, radius: int, device: torch.device) -> torch.Tensor:
    """The pixels in each window along a side of ``n`` pixels, clipped to it."""
    index = torch.arange(n, device=device)
    return ((index + radius).clamp(max=n - 1) - (index - radius).clamp(min=0) + 1).float()


def window_sums(x: torch.Tensor, radius: int) -> torch.Tensor:
    """The sums of ``x`` (C, H, W) over the (2 radius + 1)^2 window around each pixel, clipped to the image."""
    for dim in (-1, -2):
        x = _window_along(_running_sums(x, dim), radius, dim)
    return x


def _running_sums(x: torch.Tensor, dim: int) -> torch.Tensor:
    if dim == -1:
        return torch.cumsum(x, -1)
    sums = torch.empty_like(x)
    sums[..., 0, :] = x[..., 0, :]
    # row by row: torch's CPU cumsum over a non-last dimension ran 5x slower (1024x1024, 8 channels)
    for row in range(1, x.shape[-2]):
        torch.add(sums[..., row - 1, :], x[..., row, :], out=sums[..., row, :])
    return sums


def _window_along(sums: torch.Tensor, radius: int, dim: int) -> torch.Tensor:
    """The window sums along ``dim`` from its running ``sums``: sums[i + r] - sums[i - r - 1], both ends clipped,
    each written once (a pass over 8 channels of a photo costs as much as the arithmetic)."""
    n = sums.shape[dim]
    radius = min(radius, n - 1)  # a wider window sums the same
    out = torch.empty_like(sums)

    def part(of: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        return of.narrow(dim, start, stop - start)

    last = part(sums, n - 1, n)
    uncut = n - radius  # the windows i < n - r end inside
    if radius + 1 < uncut:  # neither end cut
        torch.sub(part(sums, 2 * radius + 1, n), part(sums, 0, uncut - radius - 1), out=part(out, radius + 1, uncut))
    start = max(radius + 1, uncut)
    if start < n:  # cut at the end only
        part(out, start, n).copy_(last.expand_as(part(out, start, n))).sub_(
            part(sums, start - radius - 1, n - radius - 1)
        )
    head = min(radius + 1, n)  # cut at the start
    inside = max(0, min(head, uncut))
    part(out, 0, inside).copy_(part(sums, radius, radius + inside))
    part(out, inside, head).copy_(last.expand_as(part(out, inside, head)))
    return out
