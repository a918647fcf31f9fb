"""S-measure (structure measure, Fan et al., ICCV 2017), alpha = 0.5. Every quantity PySODMetrics'
``Smeasure`` takes of the pixels (means, variances, covariance with the binary gt, per object and per
quadrant) is a sum over pixel values, so it follows exactly from the quadrant histogram.

Two deliberate differences from PySODMetrics, both in degenerate quadrants:

* prediction and gt both constant: ssim has ``alpha = beta = 0`` and scores 1. PySODMetrics' pairwise
  summed mean may not round back to the constant (249/255 over 15x6 does not), leaving a variance a
  few ulps above 0 that scores 0; we score the exact value, 1.
* an empty quadrant (centroid on the last row or column) has weight 0 and contributes 0 here;
  PySODMetrics averages an empty slice and returns NaN for the whole map.
"""

from __future__ import annotations

import torch

from .histogram import EPS, MapStats

S_ALPHA = 0.5  # balance between the object and region terms


def smeasure(stats: MapStats) -> torch.Tensor:
    """S-measure per map, (N,) float64; ``1 - mean(pred)`` for an empty gt, ``mean(pred)`` for a
    full one, as PySODMetrics."""
    y = stats.n_fg / stats.size
    score = (_object_term(stats) * S_ALPHA + _region_term(stats) * (1 - S_ALPHA)).clamp_min(0)
    mean_pred = stats.mean_pred()
    return torch.where(y == 0, 1 - mean_pred, torch.where(y == 1, mean_pred, score))


def _s_object(counts: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``2 mean / (mean^2 + 1 + std + EPS)`` of the pixels with ``counts`` of each of ``values`` (N, 256),
    with the sample (ddof=1) std; std = 0 for a single pixel."""
    n = counts.sum(1)
    mean = (counts * values).sum(1) / n.clamp_min(1)
    squared_dev = (counts * (values - mean.view(-1, 1)) ** 2).sum(1)
    std = torch.where(n > 1, (squared_dev / (n - 1).clamp_min(1)).sqrt(), torch.zeros_like(mean))
    return 2 * mean / (mean**2 + 1 + std + EPS)


def _object_term(stats: MapStats) -> torch.Tensor:
    """Foreground pixels of pred and background pixels of ``1 - pred``, weighted by the gt's share."""
    y = stats.n_fg / stats.size
    fg = _s_object(stats.hist[:, 1], stats.levels)
    bg = _s_object(stats.hist[:, 0], 1 - stats.levels)
    return fg * y + bg * (1 - y)


def _region_term(stats: MapStats) -> torch.Tensor:
    """ssim of the four quadrants split at the (1-based, MATLAB) centroid, weighted by their areas."""
    h, w, cy, cx, size = stats.height, stats.width, stats.cy, stats.cx, stats.size
    w_lt, w_rt, w_lb = cx * cy / size, cy * (w - cx) / size, (h - cy) * cx / size
    weights = torch.stack([w_lt, w_rt, w_lb, 1 - w_lt - w_rt - w_lb], 1)  # (N, 4)
    ssim = _ssim(stats.quadrants, stats.levels)
    return (ssim * weights).sum(1)


def _ssim(quadrants: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """PySODMetrics' ``Smeasure.ssim`` of each quadrant from its counts (N, 4, 2, 256): (N, 4)."""
    both = quadrants.sum(2)  # (N, 4, 256) pixels per quadrant and value
    fg = quadrants[:, :, 1]
    count = both.sum(2)
    safe = count.clamp_min(1)
    lv = levels.unsqueeze(1)  # (N, 1, 256)
    # The mean is taken relative to a value present in the quadrant, so that a constant quadrant
    # has a deviation of exactly 0 and takes the exact alpha = beta = 0 branch (module docstring).
    ref = levels.gather(1, (both > 0).to(torch.uint8).argmax(2))  # (N, 4): first value present
    x = ref + (both * (lv - ref.unsqueeze(2))).sum(2) / safe
    dx = lv - x.unsqueeze(2)
    n_fg = fg.sum(2)
    y = n_fg / safe
    denom = count - 1 + EPS
    sigma_x = (both * dx * dx).sum(2) / denom
    sigma_y = (n_fg * (1 - y) ** 2 + (count - n_fg) * y**2) / denom
    # sum((pred - x) (gt - y)): gt - y is 1 - y on the foreground and -y on the background
    sigma_xy = ((fg * dx).sum(2) * (1 - y) - (quadrants[:, :, 0] * dx).sum(2) * y) / denom
    alpha = 4 * x * y * sigma_xy
    beta = (x**2 + y**2) * (sigma_x + sigma_y)
    ssim = torch.where(alpha != 0, alpha / (beta + EPS), (beta == 0).double())
    return torch.where(count > 0, ssim, torch.zeros_like(ssim))  # an empty quadrant has weight 0
