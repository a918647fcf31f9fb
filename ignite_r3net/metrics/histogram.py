"""Per-map histograms and the scores that follow from them: MAE, F- and E-measure curves, adaptive F
and E, S-measure (and the R3Net protocol's MAE and precision / recall), for many maps at once on any device.

PySODMetrics reads a prediction as ``pred_u8 / 255`` min-max normalised per image, a ground truth as
``gt_u8 > 128``, so for every score but the weighted F-measure a map is fully described by a (4, 2, 256)
histogram: its pixels per S-measure quadrant, gt value and uint8 value (one ``bincount`` per batch).
Conventions copied from PySODMetrics on purpose (they decide the last digits): the F- and E-measure
curves bin the normalised prediction with ``floor(pred * 255)`` (numpy's ``astype(uint8)`` truncates)
and count ``>=`` thresholds; precision with no predicted positive is 0; adaptive thresholds are
``min(2 * mean(pred), 1)`` on the normalised float prediction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

EPS = 2.0**-52  # np.spacing(1): the epsilon PySODMetrics and the MATLAB code add to denominators
F_BETA2 = 0.3  # beta^2 of the F-measure (Achanta et al.), as every SOD paper uses
R3NET_EPS = 1e-4  # additive eps of R3Net's misc.cal_precision_recall_mae
S_ALPHA = 0.5  # S-measure: balance between the object and region terms


def normalised_levels(pred_u8: torch.Tensor) -> torch.Tensor:
    """PySODMetrics' ``prepare_data`` as a per-map table (N, 256) float64: the normalised value of each uint8
    value, bit-identical to numpy's (so ``floor(levels * 255)`` gives the same bins)."""
    flat = pred_u8.flatten(1)
    low = flat.amin(1).double().view(-1, 1) / 255
    high = flat.amax(1).double().view(-1, 1) / 255
    v = torch.arange(256, device=pred_u8.device, dtype=torch.float64).view(1, -1) / 255
    varying = high != low  # a constant map is not normalised
    return torch.where(varying, (v - low) / torch.where(varying, high - low, torch.ones_like(high)), v)


def foreground_centroid(gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per map of an (N, H, W) bool batch: foreground pixel count and PySODMetrics' 1-based rounded
    centroid (cy, cx); the map's centre for an empty foreground. Int64, shape (N,) each."""
    n, h, w = gt.shape
    dev = gt.device
    fg = gt.to(torch.float32)  # float sums of 0/1 are exact and much faster than bool sums
    rows, cols = fg.sum(2).double(), fg.sum(1).double()
    n_fg = rows.sum(1)
    # sums of integer coordinates are exact in float64; round() is half-to-even, like numpy's
    cy = (rows * torch.arange(h, device=dev)).sum(1) / n_fg.clamp_min(1)
    cx = (cols * torch.arange(w, device=dev)).sum(1) / n_fg.clamp_min(1)
    cy = torch.where(n_fg > 0, cy.round(), torch.full_like(cy, round(h / 2))).long() + 1
    cx = torch.where(n_fg > 0, cx.round(), torch.full_like(cx, round(w / 2))).long() + 1
    return n_fg.long(), cy, cx


def quadrant_histogram(pred_u8: torch.Tensor, gt: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor) -> torch.Tensor:
    """Counts (N, 4, 2, 256) of pixels per S-measure quadrant (lt, rt, lb, rb: split before the
    1-based centroid row / column), gt value and uint8 prediction value: one bincount per batch."""
    n, h, w = pred_u8.shape
    dev = pred_u8.device
    # key = value + 256 * gt + 512 * right + 1024 * bottom + 2048 * map index
    bottom = (torch.arange(h, device=dev).view(1, h, 1) >= cy.view(-1, 1, 1)).to(torch.int32) * 1024
    bottom += (torch.arange(n, device=dev, dtype=torch.int32) * 2048).view(-1, 1, 1)
    right = (torch.arange(w, device=dev).view(1, 1, w) >= cx.view(-1, 1, 1)).to(torch.int32) * 512
    key = pred_u8.to(torch.int32)
    key.add_(gt.to(torch.int32), alpha=256).add_(bottom).add_(right)
    return torch.bincount(key.flatten(), minlength=2048 * n).view(n, 4, 2, 256)


@dataclass(frozen=True)
class MapStats:
    """What every score but the weighted F-measure needs of N maps (all float64, shape (N, ...))."""

    levels: torch.Tensor  # (N, 256) normalised value of each uint8 value
    quadrants: torch.Tensor  # (N, 4, 2, 256) counts: quadrant, gt background / foreground, value
    hist: torch.Tensor  # (N, 2, 256) the same summed over quadrants
    n_fg: torch.Tensor  # (N,) gt-foreground pixels
    cy: torch.Tensor  # (N,) 1-based centroid row (the bottom quadrants start there)
    cx: torch.Tensor  # (N,) 1-based centroid column
    height: torch.Tensor  # (N,)
    width: torch.Tensor  # (N,)

    @classmethod
    def of(cls, pred_u8: torch.Tensor, gt: torch.Tensor) -> MapStats:
        """Statistics of an (N, H, W) uint8 prediction batch and its bool ground truth."""
        n, h, w = gt.shape
        n_fg, cy, cx = foreground_centroid(gt)
        quadrants = quadrant_histogram(pred_u8, gt, cy, cx).double()
        height, width = (torch.full((n,), float(s), dtype=torch.float64, device=gt.device) for s in (h, w))
        levels = normalised_levels(pred_u8)
        return cls(levels, quadrants, quadrants.sum(1), n_fg.double(), cy.double(), cx.double(), height, width)

    @classmethod
    def cat(cls, parts: Sequence[MapStats]) -> MapStats:
        """One batch of the maps of ``parts`` (any sizes)."""
        return cls(*(torch.cat([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))

    @property
    def size(self) -> torch.Tensor:
        return self.height * self.width

    def mean_pred(self) -> torch.Tensor:
        """Mean normalised prediction per map (exact sums of counts times levels)."""
        return (self.hist.sum(1) * self.levels).sum(1) / self.size


def mae(stats: MapStats) -> torch.Tensor:
    """Mean |pred - gt| per map: pred on the background, 1 - pred on the foreground."""
    bg, fg = stats.hist[:, 0], stats.hist[:, 1]
    return ((bg * stats.levels).sum(1) + (fg * (1 - stats.levels)).sum(1)) / stats.size


def threshold_counts(stats: MapStats) -> tuple[torch.Tensor, torch.Tensor]:
    """Per map, gt-foreground (tp) and gt-background (fp) pixels with ``floor(pred * 255) >= t``: (N, 256)."""
    # levels outside [min, max] of a map hold no pixel; clamping only keeps them indexable
    bins = (stats.levels * 255).floor().clamp(0, 255).long()
    binned = torch.zeros_like(stats.hist).scatter_add_(2, bins.unsqueeze(1).expand_as(stats.hist), stats.hist)
    ge = binned.flip(-1).cumsum(-1).flip(-1)  # reversed cumulative sum: count of values >= t
    return ge[:, 1], ge[:, 0]


def fmeasure_curves(
    tp: torch.Tensor, fp: torch.Tensor, n_fg: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Precision, recall and F curves (N, T) from threshold counts, as PySODMetrics' ``cal_pr``."""
    precision = tp / (tp + fp).clamp_min(1)  # no predicted positive: tp is 0 too, precision 0
    recall = tp / n_fg.clamp_min(1).view(-1, 1)
    num = (1 + F_BETA2) * precision * recall
    den = torch.where(num == 0, torch.ones_like(num), F_BETA2 * precision + recall)
    return precision, recall, num / den


def emeasure(fg_fg: torch.Tensor, fg_bg: torch.Tensor, n_fg: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """E-measure (N, T) from predicted-foreground pixels on gt foreground / background (N, T): PySODMetrics'
    closed form, the alignment matrix taking one value on each of the four (pred, gt) classes."""
    n_fg, size = n_fg.view(-1, 1), size.view(-1, 1)
    pred_fg = fg_fg + fg_bg
    pred_bg = size - pred_fg
    bg_fg = n_fg - fg_fg
    mean_pred, mean_gt = pred_fg / size, n_fg / size
    total = torch.zeros_like(fg_fg)
    for count, dp, dg in (
        (fg_fg, 1 - mean_pred, 1 - mean_gt),
        (fg_bg, 1 - mean_pred, -mean_gt),
        (bg_fg, -mean_pred, 1 - mean_gt),
        (pred_bg - bg_fg, -mean_pred, -mean_gt),
    ):
        align = 2 * (dp * dg) / (dp**2 + dg**2 + EPS)
        total = total + (align + 1) ** 2 / 4 * count
    # all-background / all-foreground gt: the alignment degenerates to the predicted bg / fg count
    total = torch.where(n_fg == 0, pred_bg, torch.where(n_fg == size, pred_fg, total))
    return total / (size - 1 + EPS)


def adaptive_scores(stats: MapStats) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive F and E per map: the prediction binarised at ``min(2 * mean(pred), 1)``."""
    threshold = (2 * stats.mean_pred()).clamp_max(1).view(-1, 1)
    selected = (stats.levels >= threshold).double()
    # selected pixels on gt foreground / background: one-threshold counts (N, 1)
    fg_fg, fg_bg = ((stats.hist[:, gt] * selected).sum(1, keepdim=True) for gt in (1, 0))
    _, _, adp_f = fmeasure_curves(fg_fg, fg_bg, stats.n_fg)
    return adp_f[:, 0], emeasure(fg_fg, fg_bg, stats.n_fg, stats.size)[:, 0]


def smeasure(stats: MapStats) -> torch.Tensor:
    """S-measure (Fan et al., ICCV 2017), alpha = 0.5, per map; ``1 - mean(pred)`` for an empty gt, ``mean(pred)``
    for a full one. PySODMetrics' ``Smeasure`` takes only sums over pixel values, which the quadrant histogram
    gives exactly. Two deliberate differences, in degenerate quadrants: pred and gt both constant score the exact
    1 (PySODMetrics' pairwise summed mean may not round back to the constant, 249/255 over 15x6 does not, and
    the variance a few ulps above 0 scores 0); an empty quadrant (centroid on the last row or column) has
    weight 0 (PySODMetrics averages an empty slice and returns NaN for the whole map)."""
    y = stats.n_fg / stats.size
    # object term: foreground pixels of pred and background pixels of 1 - pred, weighted by the gt's share
    fg, bg = _s_object(stats.hist[:, 1], stats.levels), _s_object(stats.hist[:, 0], 1 - stats.levels)
    object_term = fg * y + bg * (1 - y)
    # region term: ssim of the four quadrants split at the (1-based, MATLAB) centroid, weighted by their areas
    h, w, cy, cx, size = stats.height, stats.width, stats.cy, stats.cx, stats.size
    w_lt, w_rt, w_lb = cx * cy / size, cy * (w - cx) / size, (h - cy) * cx / size
    weights = torch.stack([w_lt, w_rt, w_lb, 1 - w_lt - w_rt - w_lb], 1)  # (N, 4)
    region_term = (_ssim(stats.quadrants, stats.levels) * weights).sum(1)
    score = (object_term * S_ALPHA + region_term * (1 - S_ALPHA)).clamp_min(0)
    mean_pred = stats.mean_pred()
    return torch.where(y == 0, 1 - mean_pred, torch.where(y == 1, mean_pred, score))


def _s_object(counts: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``2 mean / (mean^2 + 1 + std + EPS)`` of pixels counted per value, sample std (0 for one pixel)."""
    n = counts.sum(1)
    mean = (counts * values).sum(1) / n.clamp_min(1)
    squared_dev = (counts * (values - mean.view(-1, 1)) ** 2).sum(1)
    std = torch.where(n > 1, (squared_dev / (n - 1).clamp_min(1)).sqrt(), torch.zeros_like(mean))
    return 2 * mean / (mean**2 + 1 + std + EPS)


def _ssim(quadrants: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """PySODMetrics' ``Smeasure.ssim`` of each quadrant from its counts (N, 4, 2, 256): (N, 4)."""
    both = quadrants.sum(2)  # (N, 4, 256) pixels per quadrant and value
    fg = quadrants[:, :, 1]
    count = both.sum(2)
    safe = count.clamp_min(1)
    lv = levels.unsqueeze(1)  # (N, 1, 256)
    # The mean is taken relative to a value present in the quadrant, so that a constant quadrant
    # has a deviation of exactly 0 and takes the exact alpha = beta = 0 branch (smeasure's docstring).
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


def r3net_mae(pred_u8: torch.Tensor, gt_u8: torch.Tensor) -> torch.Tensor:
    """R3Net's ``misc.cal_precision_recall_mae`` MAE: against the soft gt, no min-max normalisation."""
    return (pred_u8.double() - gt_u8.double()).abs_().flatten(1).mean(1) / 255


def r3net_precision_recall(pred_u8: torch.Tensor, gt_u8: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """R3Net's precision and recall (N, 256), ``(tp + 1e-4) / (. + 1e-4)``, of ``pred_u8 > t``, gt ``>= 128``."""
    n = pred_u8.shape[0]
    hard = (gt_u8 >= 128).to(torch.int32)  # gt / 255 > 0.5
    key = pred_u8.to(torch.int32).add_(hard, alpha=256).flatten(1)
    key += 512 * torch.arange(n, device=key.device, dtype=torch.int32).view(-1, 1)
    hist = torch.bincount(key.flatten(), minlength=512 * n).view(n, 2, 256).double()
    # count of values > t: reversed cumulative sum shifted by one, 0 for t = 255
    gt_counts = torch.nn.functional.pad(hist.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1))
    tp, positives = gt_counts[:, 1], gt_counts.sum(1)
    n_true = hist[:, 1].sum(1, keepdim=True)
    return (tp + R3NET_EPS) / (positives + R3NET_EPS), (tp + R3NET_EPS) / (n_true + R3NET_EPS)
