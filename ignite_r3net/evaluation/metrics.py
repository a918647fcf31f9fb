"""Salient-object-detection metrics as one ignite :class:`~ignite.metrics.Metric`, computed in torch.

The numbers equal those of PySODMetrics (``py_sod_metrics``: ``MAE``, ``Fmeasure``, ``Smeasure``,
``Emeasure``, ``WeightedFmeasure``), which follows the MATLAB toolboxes the SOD literature reports
with. We reimplement them in torch rather than import them so that

* the package depends on neither scipy, scikit-image nor opencv (PySODMetrics needs all three);
* a batch of equal-size maps is scored in a few vectorised tensor ops on any device;
* every per-image quantity is summed into float64 tensors, so ``sync_all_reduce`` makes the
  result under N processes equal to the result of one process.

Conventions copied from PySODMetrics on purpose (they decide the last digits):

* ``_prepare_data``: ``pred = u8 / 255``, min-max normalised per image when not constant;
  ``gt = gt_u8 > 128``.
* F- and E-measure curves quantise the normalised prediction with ``floor(pred * 255)`` (numpy's
  ``astype(uint8)`` truncates) and use ``>=`` thresholds; precision with no predicted positive is 0.
* Adaptive thresholds are ``min(2 * mean(pred), 1)`` on the normalised float prediction.
* ``EPS = 2**-52`` (numpy's ``np.spacing(1)``, MATLAB's ``eps``).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from ignite.exceptions import NotComputableError
from ignite.metrics import Metric
from ignite.metrics.metric import reinit__is_reduced, sync_all_reduce

__all__ = ["SaliencyMetrics", "METRIC_KEYS"]

#: Keys of the dict returned by :meth:`SaliencyMetrics.compute`.
METRIC_KEYS = ("mae", "maxF", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF")

EPS = 2.0**-52  # np.spacing(1): the epsilon PySODMetrics / the MATLAB code add to denominators
_F_BETA2 = 0.3  # beta^2 of the F-measure (Achanta et al.), as every SOD paper uses
_S_ALPHA = 0.5  # S-measure balance between object and region terms
_WF_BETA2 = 1.0  # weighted F-measure beta^2 (Margolin et al.)
_R3NET_EPS = 1e-4  # additive eps of R3Net's misc.cal_precision_recall_mae

Maps = Union[torch.Tensor, Sequence[torch.Tensor]]


# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------


def _to_uint8_pred(p: torch.Tensor) -> torch.Tensor:
    """Float maps in [0, 1] become the uint8 PNG one would save (``round(p * 255)``), so that
    scoring a tensor equals scoring its saved map; uint8 passes unchanged."""
    if p.dtype == torch.uint8:
        return p
    if not p.is_floating_point():
        raise TypeError(f"prediction must be uint8 or floating point, got {p.dtype}")
    return (p.double().clamp(0, 1) * 255).round().to(torch.uint8)


def _check_gt(g: torch.Tensor) -> torch.Tensor:
    if g.dtype == torch.bool:  # a binary mask: treat as 0 / 255
        return g.to(torch.uint8) * 255
    if g.dtype != torch.uint8:
        raise TypeError(f"ground truth must be uint8 0..255 (or bool), got {g.dtype}")
    return g


def _group_by_size(preds: List[torch.Tensor], gts: List[torch.Tensor]):
    """Yield (pred_batch, gt_batch) stacks of equal-size consecutive maps, so mixed sizes still
    vectorise as far as they can."""
    start = 0
    while start < len(preds):
        end = start + 1
        while end < len(preds) and preds[end].shape == preds[start].shape:
            end += 1
        yield torch.stack(preds[start:end]), torch.stack(gts[start:end])
        start = end


def _normalise(pred_u8: torch.Tensor) -> torch.Tensor:
    """PySODMetrics' prepare_data for a (N, H, W) uint8 batch: /255 then per-image min-max.

    The float64 operations are the same, in the same order, as numpy's, so the later
    ``floor(pred * 255)`` quantisation lands in exactly the same bins."""
    p = pred_u8.double() / 255
    flat = p.flatten(1)
    mn = flat.amin(1).view(-1, 1, 1)
    mx = flat.amax(1).view(-1, 1, 1)
    varying = mx != mn
    return torch.where(varying, (p - mn) / torch.where(varying, mx - mn, torch.ones_like(mx)), p)


# --------------------------------------------------------------------------------------------
# per-image metrics, batched over N equal-size maps; pred float64 in [0, 1], gt bool
# --------------------------------------------------------------------------------------------


def _hist_counts(levels: torch.Tensor, gt: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per image, how many gt-foreground (tp) and gt-background (fp) pixels have
    ``levels >= t`` for t = 0..255 (levels: integers 0..255): shape (N, 256) each, int64."""
    n = levels.shape[0]
    q = levels.long().flatten(1)
    idx = q + 256 * gt.flatten(1).long() + 512 * torch.arange(n, device=levels.device).view(-1, 1)
    hist = torch.bincount(idx.flatten(), minlength=512 * n).view(n, 2, 256)
    # reversed cumulative sum: count of values >= t
    ge = hist.flip(-1).cumsum(-1).flip(-1)
    return ge[:, 1], ge[:, 0]


def _fmeasure(tp: torch.Tensor, fp: torch.Tensor, n_fg: torch.Tensor):
    """Precision, recall and F curves (N, 256) from threshold counts, as PySODMetrics' cal_pr."""
    tp = tp.double()
    pos = (tp + fp.double()).clamp_min(1)  # no predicted positive: tp is 0 too, precision 0
    precision = tp / pos
    recall = tp / n_fg.clamp_min(1).double().view(-1, 1)
    num = (1 + _F_BETA2) * precision * recall
    den = torch.where(num == 0, torch.ones_like(num), _F_BETA2 * precision + recall)
    return precision, recall, num / den


def _adaptive_fmeasure(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    thr = (2 * pred.flatten(1).mean(1)).clamp_max(1).view(-1, 1, 1)
    binary = pred >= thr
    inter = (binary & gt).flatten(1).sum(1).double()
    pre = inter / binary.flatten(1).sum(1).clamp_min(1).double()
    rec = inter / gt.flatten(1).sum(1).clamp_min(1).double()
    fm = (1 + _F_BETA2) * pre * rec / torch.where(inter == 0, torch.ones_like(pre), _F_BETA2 * pre + rec)
    return torch.where(inter == 0, torch.zeros_like(fm), fm)


def _emeasure_from_counts(fg_fg: torch.Tensor, fg_bg: torch.Tensor, n_fg: torch.Tensor, size: int) -> torch.Tensor:
    """Enhanced-alignment measure of binarised predictions from their confusion counts.

    fg_fg / fg_bg: predicted-foreground pixels on gt foreground / background, shape (N, T);
    n_fg: gt-foreground pixels per image, shape (N,). Mirrors PySODMetrics' closed form."""
    fg_fg = fg_fg.double()
    fg_bg = fg_bg.double()
    n_fg = n_fg.double().view(-1, 1)
    pred_fg = fg_fg + fg_bg
    pred_bg = size - pred_fg
    bg_fg = n_fg - fg_fg
    bg_bg = pred_bg - bg_fg
    mean_pred = pred_fg / size
    mean_gt = n_fg / size
    dp_fg, dp_bg = 1 - mean_pred, 0 - mean_pred
    dg_fg, dg_bg = 1 - mean_gt, 0 - mean_gt
    total = torch.zeros_like(fg_fg)
    for numel, a, b in (
        (fg_fg, dp_fg, dg_fg),
        (fg_bg, dp_fg, dg_bg),
        (bg_fg, dp_bg, dg_fg),
        (bg_bg, dp_bg, dg_bg),
    ):
        align = 2 * (a * b) / (a**2 + b**2 + EPS)
        total = total + (align + 1) ** 2 / 4 * numel
    # all-background / all-foreground gt: the alignment degenerates to the predicted bg / fg count
    total = torch.where(n_fg == 0, pred_bg, torch.where(n_fg == size, pred_fg, total))
    return total / (size - 1 + EPS)


def _adaptive_emeasure(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    thr = (2 * pred.flatten(1).mean(1)).clamp_max(1).view(-1, 1, 1)
    binary = pred >= thr
    fg_fg = (binary & gt).flatten(1).sum(1, keepdim=True)
    fg_bg = (binary & ~gt).flatten(1).sum(1, keepdim=True)
    n_fg = gt.flatten(1).sum(1)
    return _emeasure_from_counts(fg_fg, fg_bg, n_fg, gt[0].numel())[:, 0]


def _s_object(sum_x: torch.Tensor, sum_sq_dev: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """2*mean / (mean^2 + 1 + std + EPS) with the sample (ddof=1) std; std = 0 for one pixel."""
    mean = sum_x / n.clamp_min(1)
    std = torch.where(n > 1, (sum_sq_dev / (n - 1).clamp_min(1)).sqrt(), torch.zeros_like(mean))
    return 2 * mean / (mean**2 + 1 + std + EPS)


def _smeasure(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Structure measure (Fan et al. 2017), alpha = 0.5, batched over N equal-size maps."""
    n, h, w = pred.shape
    dev = pred.device
    g = gt.double()
    n_fg = g.flatten(1).sum(1)
    y = n_fg / (h * w)
    mean_pred = pred.flatten(1).mean(1)

    # ---- object term: foreground pixels of pred, background pixels of 1 - pred
    n_bg = h * w - n_fg
    fg_sum = (pred * g).flatten(1).sum(1)
    fg_mean = (fg_sum / n_fg.clamp_min(1)).view(-1, 1, 1)
    fg_dev = (((pred - fg_mean) ** 2) * g).flatten(1).sum(1)
    inv = 1 - pred
    bg_sum = (inv * (1 - g)).flatten(1).sum(1)
    bg_mean = (bg_sum / n_bg.clamp_min(1)).view(-1, 1, 1)
    bg_dev = (((inv - bg_mean) ** 2) * (1 - g)).flatten(1).sum(1)
    obj = _s_object(fg_sum, fg_dev, n_fg) * y + _s_object(bg_sum, bg_dev, n_bg) * (1 - y)

    # ---- region term: split at the (1-based, MATLAB) foreground centroid into four quadrants
    rows = torch.arange(h, device=dev, dtype=torch.float64)
    cols = torch.arange(w, device=dev, dtype=torch.float64)
    # sums of integer coordinates are exact in float64; round() is half-to-even like numpy's
    cy = (g.sum(2) * rows).sum(1) / n_fg.clamp_min(1)
    cx = (g.sum(1) * cols).sum(1) / n_fg.clamp_min(1)
    cy = torch.where(n_fg > 0, cy.round(), torch.full_like(cy, round(h / 2))).long() + 1
    cx = torch.where(n_fg > 0, cx.round(), torch.full_like(cx, round(w / 2))).long() + 1
    area = h * w
    cyf, cxf = cy.double(), cx.double()  # int / int would give float32
    w_lt = cxf * cyf / area
    w_rt = cyf * (w - cxf) / area
    w_lb = (h - cyf) * cxf / area
    weights = torch.stack([w_lt, w_rt, w_lb, 1 - w_lt - w_rt - w_lb], 1)  # (N, 4)

    below = (torch.arange(h, device=dev).view(1, h, 1) >= cy.view(-1, 1, 1)).long()
    right = (torch.arange(w, device=dev).view(1, 1, w) >= cx.view(-1, 1, 1)).long()
    quad = 2 * below + right + 4 * torch.arange(n, device=dev).view(-1, 1, 1)  # (N, H, W) in 0..4N-1
    qf = quad.flatten()

    def qsum(values: torch.Tensor) -> torch.Tensor:
        return torch.bincount(qf, weights=values.flatten(), minlength=4 * n).view(n, 4)

    count = torch.bincount(qf, minlength=4 * n).view(n, 4).double()
    safe = count.clamp_min(1)
    # Means are taken relative to one pixel of the quadrant (its top-left corner) so that a
    # constant quadrant has exactly zero deviation, as numpy's pairwise mean gives: the
    # "alpha == 0 and beta == 0 -> score 1" branch of ssim depends on that exactness.
    r0 = torch.stack([torch.zeros_like(cy), torch.zeros_like(cy), cy, cy], 1).clamp_max(h - 1)
    c0 = torch.stack([torch.zeros_like(cx), cx, torch.zeros_like(cx), cx], 1).clamp_max(w - 1)
    ref = pred[torch.arange(n, device=dev).view(-1, 1), r0, c0]  # (N, 4)
    ref_px = ref.flatten()[qf].view(n, h, w)
    x = ref + qsum(pred - ref_px) / safe
    yq = qsum(g) / safe
    dx = pred - x.flatten()[qf].view(n, h, w)
    dy = g - yq.flatten()[qf].view(n, h, w)
    denom = count - 1 + EPS
    sigma_x = qsum(dx * dx) / denom
    sigma_y = qsum(dy * dy) / denom
    sigma_xy = qsum(dx * dy) / denom
    alpha = 4 * x * yq * sigma_xy
    beta = (x**2 + yq**2) * (sigma_x + sigma_y)
    ssim = torch.where(
        alpha != 0, alpha / (beta + EPS), torch.where(beta == 0, torch.ones_like(alpha), torch.zeros_like(alpha))
    )
    ssim = _numpy_rounding_of_constant_quadrants(ssim, x, count, sigma_x, sigma_y, cy, cx, h, w)
    # An empty quadrant (centroid on the last row/column) has weight 0. PySODMetrics takes the
    # mean of an empty slice there and returns NaN for the whole image; we count it as 0.
    ssim = torch.where(count > 0, ssim, torch.zeros_like(ssim))
    region = (ssim * weights).sum(1)

    sm = (obj * _S_ALPHA + region * (1 - _S_ALPHA)).clamp_min(0)
    return torch.where(y == 0, 1 - mean_pred, torch.where(y == 1, mean_pred, sm))


def _numpy_rounding_of_constant_quadrants(ssim, x, count, sigma_x, sigma_y, cy, cx, h, w):
    """Reproduce PySODMetrics where pred and gt are both constant over a quadrant.

    There ssim's alpha is exactly 0 and its beta is 0 only if numpy's mean of the slice rounds
    back to the constant value c: score 1 if it does, else 0. Whether it does depends on numpy's
    pairwise summation over that slice layout, so we ask numpy itself, on a constant array of the
    same shape and slice (rare: a handful of calls for constant predictions)."""
    tie = (count > 0) & (sigma_x == 0) & (sigma_y == 0) & (x != 0) & (x != 1)
    if not bool(tie.any()):
        return ssim
    import numpy as np  # a dependency of the package; used only for this rounding question

    ssim = ssim.clone()
    for i, q in tie.nonzero().tolist():
        c = float(x[i, q])
        rows = slice(0, int(cy[i])) if q < 2 else slice(int(cy[i]), h)
        cols = slice(0, int(cx[i])) if q % 2 == 0 else slice(int(cx[i]), w)
        exact = np.full((h, w), c, dtype=np.float64)[rows, cols].mean() == c
        ssim[i, q] = 1.0 if exact else 0.0
    return ssim


# ---------------------------- exact Euclidean feature transform ----------------------------


def nearest_feature_transform(feature: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact Euclidean distance transform of a 2-D bool map, with the nearest feature pixel.

    Returns ``(dist_sq, row, col)``: the squared distance of every pixel to its nearest ``True``
    pixel and that pixel's coordinates. Equivalent to ``scipy.ndimage.distance_transform_edt(
    ~feature, return_indices=True)`` including its tie-breaking (scipy's Maurer pass along
    axis 0 keeps the upper of two equidistant pixels in a column; the pass along axis 1 keeps the
    leftmost of equidistant column candidates), which matters because the weighted F-measure
    copies the error of that pixel. ``feature`` must hold at least one ``True``.
    """
    h, w = feature.shape
    dev = feature.device
    big = 1 << 40
    dtype = torch.int64
    r = torch.arange(h, device=dev, dtype=dtype).view(-1, 1).expand(h, w)
    # pass 1, within each column: nearest feature at-or-above and at-or-below
    up = torch.where(feature, r, torch.full_like(r, -big)).cummax(0).values
    down = torch.where(feature, r, torch.full_like(r, 2 * big)).flip(0).cummin(0).values.flip(0)
    d_up, d_down = r - up, down - r
    take_up = d_up <= d_down  # a tie keeps the smaller row, as scipy does
    row1 = torch.where(take_up, up, down)
    d1 = torch.where(take_up, d_up, d_down)
    has_col = feature.any(0)
    inf = big
    d1sq = torch.where(has_col.view(1, -1), d1 * d1, torch.full_like(d1, inf))

    # pass 2, along each row: min over columns j of d1sq[r, j] + (c - j)^2, ties -> smallest j.
    # Candidates are compared by the single integer key dist_sq * w + j, so one `minimum` does
    # both the distance comparison and the tie-break.
    c = torch.arange(w, device=dev, dtype=dtype)
    d1key = d1sq * w + c.view(1, -1)
    feat_cols = has_col.nonzero().flatten().tolist()
    # Two exact ways; pick the one with fewer full-image steps. Offsets k only need to run while
    # k^2 <= the largest distance, which is bounded by the nearest feature in the same row/column.
    cc = c.view(1, -1).expand(h, w)
    left = torch.where(feature, cc, torch.full_like(r, -big)).cummax(1).values
    right = torch.where(feature, cc, torch.full_like(r, 2 * big)).flip(1).cummin(1).values.flip(1)
    row_d = torch.minimum(cc - left, right - cc)
    pixel_bound = torch.minimum(row_d, torch.where(has_col.view(1, -1), d1, torch.full_like(d1, big)))
    row_bound = pixel_bound.amax(1)  # per row, no pixel is farther than this from a feature
    bound = int(row_bound.max())
    if len(feat_cols) <= bound:  # few columns hold features (small objects): loop over them
        best = torch.full((h, w), inf * w, dtype=dtype, device=dev)
        for j in feat_cols:
            torch.minimum(best, d1key[:, j : j + 1] + (c - j).pow(2).view(1, -1) * w, out=best)
    else:  # loop over column offsets k; a row is done once k exceeds its bound
        # rows sorted by decreasing bound, so the rows still active are a leading slice
        order = torch.argsort(row_bound, descending=True)
        bounds = row_bound[order].tolist()
        keys = d1key[order]
        best = keys.clone()
        active = h
        for k in range(1, min(bound, w - 1) + 1):
            while bounds[active - 1] < k:
                active -= 1
            shift = k * k * w
            torch.minimum(best[:active, k:], keys[:active, : w - k] + shift, out=best[:active, k:])  # j = c - k
            torch.minimum(best[:active, : w - k], keys[:active, k:] + shift, out=best[:active, : w - k])  # j = c + k
        best = torch.empty_like(best).index_copy_(0, order, best)
    arg = best % w
    best = best // w
    row = row1.gather(1, arg)
    return best, row, arg


def _gaussian_taps(size: int = 7, sigma: float = 5.0) -> List[float]:
    """1-D factor of MATLAB's ``fspecial('gaussian', size, sigma)``: the 2-D kernel is the outer
    product of these taps (equal to it up to float64 rounding; fspecial's zeroing of taps below
    eps * max never triggers for 7 taps with sigma 5)."""
    m = (size - 1) / 2
    taps = [math.exp(-((i - m) ** 2) / (2 * sigma * sigma)) for i in range(size)]
    total = sum(taps)
    return [t / total for t in taps]


def _gaussian_filter(x: torch.Tensor, size: int = 7, sigma: float = 5.0) -> torch.Tensor:
    """``scipy.ndimage.convolve(x, fspecial('gaussian', 7, 5), mode='constant', cval=0)`` on an
    (N, H, W) float64 batch. Separable shifted sums: torch's float64 conv2d on CPU is ~20x slower."""
    taps = _gaussian_taps(size, sigma)
    half = size // 2
    h, w = x.shape[-2:]
    padded = F.pad(x, (half, half, half, half))  # zeros outside, as mode="constant", cval=0
    rows = sum(t * padded[:, i : i + h, :] for i, t in enumerate(taps))
    return sum(t * rows[:, :, i : i + w] for i, t in enumerate(taps))


def _weighted_fmeasure(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Weighted F-measure (Margolin et al. 2014), beta^2 = 1; 0 for an empty gt, as PySODMetrics."""
    n, h, w = pred.shape
    dev = pred.device
    g = gt.double()
    err = (pred - g).abs()
    err_t = err.clone()
    dist = torch.zeros_like(pred)
    has_fg = gt.flatten(1).any(1)
    for i in range(n):  # the feature transform is per image (its loop length depends on the map)
        if not bool(has_fg[i]):
            continue
        dsq, rr, cc = nearest_feature_transform(gt[i])
        dist[i] = dsq.double().sqrt()
        # background pixels take the error of their nearest foreground pixel (edge handling)
        err_t[i] = torch.where(gt[i], err[i], err[i][rr, cc])
    ea = _gaussian_filter(err_t)  # the kernel is symmetric: convolution == correlation
    min_e_ea = torch.where(gt & (ea < err), ea, err)
    b = torch.where(gt, torch.ones_like(dist), 2 - torch.exp(math.log(0.5) / 5 * dist))
    ew = min_e_ea * b
    n_fg = g.flatten(1).sum(1)
    ew_fg = (ew * g).flatten(1).sum(1)
    tpw = n_fg - ew_fg
    fpw = (ew * (1 - g)).flatten(1).sum(1)
    recall = 1 - ew_fg / n_fg.clamp_min(1)
    precision = tpw / (tpw + fpw + EPS)
    q = (1 + _WF_BETA2) * recall * precision / (recall + _WF_BETA2 * precision + EPS)
    return torch.where(has_fg, q, torch.zeros_like(q))


# --------------------------------------------------------------------------------------------
# the ignite metric
# --------------------------------------------------------------------------------------------

_ACCUMULATORS = (
    "_sum_mae",
    "_sum_precision",
    "_sum_recall",
    "_sum_fm",
    "_sum_adp_f",
    "_sum_em",
    "_sum_adp_e",
    "_sum_sm",
    "_sum_wf",
    "_num_images",
)


class SaliencyMetrics(Metric):
    r"""MAE, F-measure (max / mean / adaptive), S-measure, E-measure (max / mean / adaptive) and
    weighted F-measure of saliency maps, in one pass.

    ``update`` takes ``(pred, gt)``: each a list of 2-D tensors or an ``(N, H, W)`` tensor.

    * ``pred``: ``uint8`` 0..255, or float in [0, 1], which is first turned into the uint8 map
      one would save (``round(p * 255)``) so that scoring a tensor equals scoring its PNG.
    * ``gt``: ``uint8`` 0..255 (or ``bool``).

    Protocols:

    * ``"standard"`` (default) equals PySODMetrics (``MAE``, ``Fmeasure``, ``Smeasure``,
      ``Emeasure``, ``WeightedFmeasure``, all with ``normalize=True``): gt binarised at
      ``> 128``; pred divided by 255 and min-max normalised per image; every score computed per
      image and averaged over images. ``maxF``/``maxE`` are the maxima of the mean curves over the
      256 thresholds, ``meanF``/``meanE`` their means, ``adpF``/``adpE`` use threshold
      ``min(2 * mean(pred), 1)`` per image.
    * ``"r3net"`` reproduces the evaluation of the original R3Net code (``misc.py``,
      ``cal_precision_recall_mae`` and ``cal_fmeasure``) for ``mae`` and ``maxF`` only: ``mae``
      against the soft gt ``gt / 255`` with no min-max normalisation of the prediction;
      precision / recall (each ``(tp + 1e-4) / (. + 1e-4)``) at ``pred_u8 > t`` for t = 0..255
      against the gt binarised at ``gt / 255 > 0.5``, averaged over the dataset, then
      ``maxF = max_t 1.3 P R / (0.3 P + R)``. The other seven keys keep their standard values.

    Every image contributes per-image sums held as float64 tensors on ``device``; ``compute``
    all-reduces them (``sync_all_reduce``), so a distributed evaluation over a split dataset gives
    the numbers of a single process (up to float64 summation order).

    The per-image S-measure differs from PySODMetrics in one case only: when the foreground
    centroid falls on the last row or column, PySODMetrics averages an empty quadrant and returns
    NaN; here that zero-weight quadrant contributes 0.

    Args:
        output_transform: maps the engine's output to ``(pred, gt)``.
        device: where accumulators live and the computation runs.
        protocol: ``"standard"`` or ``"r3net"``.

    Example:

    .. code-block:: python

        import torch
        from ignite_r3net.evaluation.metrics import SaliencyMetrics

        gt = torch.zeros(2, 32, 32, dtype=torch.uint8)
        gt[:, 8:24, 8:24] = 255
        pred = gt.float() / 255 * 0.9  # float maps in [0, 1]
        metric = SaliencyMetrics()
        metric.update((pred, gt))
        scores = metric.compute()  # {"mae": ..., "maxF": ..., ..., "wF": ...}
        precision, recall = metric.pr_curve()  # 256 thresholds each

    Attach it to an evaluator like any ignite metric:
    ``SaliencyMetrics().attach(evaluator, "sod")`` then ``evaluator.state.metrics["sod"]`` is the
    dict (ignite also spreads its keys into ``state.metrics``).
    """

    _state_dict_all_req_keys = _ACCUMULATORS

    def __init__(
        self,
        output_transform: Callable = lambda x: x,
        device: Union[str, torch.device] = "cpu",
        protocol: str = "standard",
    ) -> None:
        if protocol not in ("standard", "r3net"):
            raise ValueError(f"protocol must be 'standard' or 'r3net', got {protocol!r}")
        self.protocol = protocol
        super().__init__(output_transform=output_transform, device=device)

    @reinit__is_reduced
    def reset(self) -> None:
        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.float64, device=self._device)

        self._sum_mae = zeros()
        self._sum_precision = zeros(256)  # indexed by threshold t = 0..255
        self._sum_recall = zeros(256)
        self._sum_fm = zeros(256)
        self._sum_adp_f = zeros()
        self._sum_em = zeros(256)
        self._sum_adp_e = zeros()
        self._sum_sm = zeros()
        self._sum_wf = zeros()
        self._num_images = zeros()

    @staticmethod
    def _as_list(maps: Maps) -> List[torch.Tensor]:
        if isinstance(maps, torch.Tensor):
            if maps.dim() == 2:
                return [maps]
            if maps.dim() == 4 and maps.shape[1] == 1:  # (N, 1, H, W) from a model or loader
                maps = maps[:, 0]
            if maps.dim() != 3:
                raise ValueError(f"expected (H, W), (N, H, W) or (N, 1, H, W) maps, got shape {tuple(maps.shape)}")
            return list(maps.unbind(0))
        out = []
        for m in maps:
            m = m.squeeze(0) if m.dim() == 3 and m.shape[0] == 1 else m
            if m.dim() != 2:
                raise ValueError(f"each map must be 2-D, got shape {tuple(m.shape)}")
            out.append(m)
        return out

    @reinit__is_reduced
    def update(self, output: Tuple[Maps, Maps]) -> None:
        preds = [_to_uint8_pred(p.detach()).to(self._device) for p in self._as_list(output[0])]
        gts = [_check_gt(g.detach()).to(self._device) for g in self._as_list(output[1])]
        if len(preds) != len(gts):
            raise ValueError(f"got {len(preds)} predictions for {len(gts)} ground truths")
        for p, g in zip(preds, gts):
            if p.shape != g.shape:
                raise ValueError(f"prediction shape {tuple(p.shape)} != ground truth shape {tuple(g.shape)}")
        for pred_u8, gt_u8 in _group_by_size(preds, gts):
            # chunks of ~0.5 M pixels keep the float64 intermediates in cache; larger batches
            # were not faster on CPU
            step = max(1, (1 << 19) // pred_u8[0].numel())
            for i in range(0, pred_u8.shape[0], step):
                self._update_batch(pred_u8[i : i + step], gt_u8[i : i + step])

    def _update_batch(self, pred_u8: torch.Tensor, gt_u8: torch.Tensor) -> None:
        n = pred_u8.shape[0]
        size = pred_u8[0].numel()
        pred = _normalise(pred_u8)
        gt = gt_u8 > 128
        n_fg = gt.flatten(1).sum(1)

        # floor == numpy's astype(uint8) truncation PySODMetrics uses to bin the normalised map
        tp, fp = _hist_counts((pred * 255).floor(), gt)
        if self.protocol == "standard":
            self._sum_mae += (pred - gt.double()).abs().flatten(1).mean(1).sum()
            precision, recall, fm = _fmeasure(tp, fp, n_fg)
            self._sum_precision += precision.sum(0)
            self._sum_recall += recall.sum(0)
        else:
            p = pred_u8.double() / 255
            g = gt_u8.double() / 255
            self._sum_mae += (p - g).abs().flatten(1).mean(1).sum()
            hard = g > 0.5
            # pred/255 > t/255  <=>  pred_u8 > t: count of values >= t + 1
            r_tp, r_fp = _hist_counts(pred_u8, hard)
            zero = torch.zeros_like(r_tp[:, :1])
            r_tp = torch.cat([r_tp[:, 1:], zero], 1).double()
            r_pos = r_tp + torch.cat([r_fp[:, 1:], zero], 1).double()
            t = hard.flatten(1).sum(1, keepdim=True).double()
            self._sum_precision += ((r_tp + _R3NET_EPS) / (r_pos + _R3NET_EPS)).sum(0)
            self._sum_recall += ((r_tp + _R3NET_EPS) / (t + _R3NET_EPS)).sum(0)
            _, _, fm = _fmeasure(tp, fp, n_fg)
        self._sum_fm += fm.sum(0)
        self._sum_adp_f += _adaptive_fmeasure(pred, gt).sum()
        self._sum_em += _emeasure_from_counts(tp, fp, n_fg, size).sum(0)
        self._sum_adp_e += _adaptive_emeasure(pred, gt).sum()
        self._sum_sm += _smeasure(pred, gt).sum()
        self._sum_wf += _weighted_fmeasure(pred, gt).sum()
        self._num_images += n

    @sync_all_reduce(*_ACCUMULATORS)
    def compute(self) -> Dict[str, float]:
        count = float(self._num_images)
        if count == 0:
            raise NotComputableError("SaliencyMetrics must have at least one example before it can be computed.")
        fm = self._sum_fm / count
        em = self._sum_em / count
        if self.protocol == "standard":
            max_f = float(fm.max())
        else:  # R3Net: F of the dataset-mean precision / recall curves
            p, r = self._sum_precision / count, self._sum_recall / count
            max_f = float(((1 + _F_BETA2) * p * r / (_F_BETA2 * p + r)).max())
        return {
            "mae": float(self._sum_mae) / count,
            "maxF": max_f,
            "meanF": float(fm.mean()),
            "adpF": float(self._sum_adp_f) / count,
            "Sm": float(self._sum_sm) / count,
            "maxE": float(em.max()),
            "meanE": float(em.mean()),
            "adpE": float(self._sum_adp_e) / count,
            "wF": float(self._sum_wf) / count,
        }

    @sync_all_reduce("_sum_precision", "_sum_recall", "_num_images")
    def pr_curve(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Mean precision and recall over images, each of 256 values indexed by threshold t:
        a pixel is positive when ``floor(pred * 255) >= t`` (standard, pred normalised) or
        ``pred_u8 > t`` (r3net)."""
        count = float(self._num_images)
        if count == 0:
            raise NotComputableError("SaliencyMetrics must have at least one example before it can be computed.")
        return self._sum_precision / count, self._sum_recall / count
