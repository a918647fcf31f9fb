"""Salient-object-detection metrics as one ignite :class:`~ignite.metrics.Metric`, computed in torch.

The numbers equal those of PySODMetrics (``py_sod_metrics``: ``MAE``, ``Fmeasure``, ``Smeasure``,
``Emeasure``, ``WeightedFmeasure``), which follows the MATLAB toolboxes the SOD literature reports
with. We reimplement them in torch rather than import them so that

* the package depends on neither scipy, scikit-image nor opencv (PySODMetrics needs all three);
* a batch of equal-size maps is scored in a few vectorised tensor ops on any device; the
  histogram statistics of many maps (any sizes) are computed together in one batched pass;
* on the CPU the weighted F-measure runs map by map in numpy, with the exact distance transform
  in numpy and its local work cut to the
  foreground's bounding box; on an accelerator it runs batched in torch;
* every per-image quantity is rounded to a multiple of 2**-32 and summed into float64 tensors:
  the sums are exact, so ``sync_all_reduce`` makes the result under N processes bit for bit the
  result of one process.

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
from collections.abc import Callable, Sequence

import numpy as np
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

Maps = torch.Tensor | Sequence[torch.Tensor]


# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------


_QUANTUM = 2.0**32


def _exact(per_image: torch.Tensor) -> torch.Tensor:
    """Round per-image values to multiples of 2**-32 before they are summed.

    Sums of such values are exact in float64 (up to 2**21 images), so the order of additions -
    batch size, shards across ranks, all-reduce order - cannot change a single bit of the result,
    and N processes give exactly the numbers of one. The rounding moves each image's value by at
    most 1.2e-10.
    """
    return torch.round(per_image.double() * _QUANTUM) / _QUANTUM


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


def _group_by_size(preds: list[torch.Tensor], gts: list[torch.Tensor]):
    """Yield (pred_batch, gt_batch) stacks of equal-size consecutive maps, so mixed sizes still
    vectorise as far as they can."""
    start = 0
    while start < len(preds):
        end = start + 1
        while end < len(preds) and preds[end].shape == preds[start].shape:
            end += 1
        yield torch.stack(preds[start:end]), torch.stack(gts[start:end])
        start = end


# --------------------------------------------------------------------------------------------
# per-image metrics, batched over N equal-size maps; pred float64 in [0, 1], gt bool
# --------------------------------------------------------------------------------------------


def _hist_counts(levels: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def _emeasure_from_counts(
    fg_fg: torch.Tensor, fg_bg: torch.Tensor, n_fg: torch.Tensor, size: torch.Tensor
) -> torch.Tensor:
    """Enhanced-alignment measure of binarised predictions from their confusion counts.

    fg_fg / fg_bg: predicted-foreground pixels on gt foreground / background, shape (N, T);
    n_fg, size: gt-foreground and all pixels per image, shape (N,). Mirrors PySODMetrics' closed
    form."""
    fg_fg = fg_fg.double()
    fg_bg = fg_bg.double()
    n_fg = n_fg.double().view(-1, 1)
    size = size.view(-1, 1)
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


def _s_object(sum_x: torch.Tensor, sum_sq_dev: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """2*mean / (mean^2 + 1 + std + EPS) with the sample (ddof=1) std; std = 0 for one pixel."""
    mean = sum_x / n.clamp_min(1)
    std = torch.where(n > 1, (sum_sq_dev / (n - 1).clamp_min(1)).sqrt(), torch.zeros_like(mean))
    return 2 * mean / (mean**2 + 1 + std + EPS)


def _numpy_rounding_of_constant_quadrants(ssim, x, count, sigma_x, sigma_y, cy, cx, heights, widths):
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
        h, w = int(heights[i]), int(widths[i])
        rows = slice(0, int(cy[i])) if q < 2 else slice(int(cy[i]), h)
        cols = slice(0, int(cx[i])) if q % 2 == 0 else slice(int(cx[i]), w)
        exact = np.full((h, w), c, dtype=np.float64)[rows, cols].mean() == c
        ssim[i, q] = 1.0 if exact else 0.0
    return ssim


# ---------------------------- weighted F-measure ----------------------------


def _gaussian_taps(size: int = 7, sigma: float = 5.0) -> list[float]:
    """1-D factor of MATLAB's ``fspecial('gaussian', size, sigma)``: the 2-D kernel is the outer
    product of these taps (equal to it up to float64 rounding; fspecial's zeroing of taps below
    eps * max never triggers for 7 taps with sigma 5)."""
    m = (size - 1) / 2
    taps = [math.exp(-((i - m) ** 2) / (2 * sigma * sigma)) for i in range(size)]
    total = sum(taps)
    return [t / total for t in taps]


_BAND_OFFSETS: dict[tuple[int, str], torch.Tensor] = {}


def _band_offsets(max_sq: int = 18, device=None) -> torch.Tensor:
    """:func:`_make_band_offsets`, built once per size and device (it is a Python loop)."""
    key = (max_sq, str(device))
    if key not in _BAND_OFFSETS:
        _BAND_OFFSETS[key] = _make_band_offsets(max_sq, device)
    return _BAND_OFFSETS[key]


def _make_band_offsets(max_sq: int = 18, device=None) -> torch.Tensor:
    """For each squared distance s <= max_sq: the offsets (dr, dc) with dr^2 + dc^2 == s in the
    order scipy's feature transform prefers them (smaller column first, then smaller row),
    padded with (0, 0) to 8: a (max_sq + 1, 8, 2) int64 table."""
    table = torch.zeros(max_sq + 1, 8, 2, dtype=torch.int64)
    r = math.isqrt(max_sq)
    for s in range(1, max_sq + 1):
        offs = sorted((dc, dr) for dr in range(-r, r + 1) for dc in range(-r, r + 1) if dr * dr + dc * dc == s)
        for i, (dc, dr) in enumerate(offs):
            table[s, i, 0], table[s, i, 1] = dr, dc
    return table.to(device)


def _gaussian_filter(x: torch.Tensor, size: int = 7, sigma: float = 5.0) -> torch.Tensor:
    """``scipy.ndimage.convolve(x, fspecial('gaussian', 7, 5), mode='constant', cval=0)`` on an
    (N, H, W) batch, as separable shifted sums (the kernel is symmetric: convolution ==
    correlation)."""
    taps = _gaussian_taps(size, sigma)
    half = size // 2
    h, w = x.shape[-2:]
    padded = F.pad(x, (half, half, half, half))  # zeros outside, as mode="constant", cval=0
    rows = padded[:, 0:h, :] * taps[0]
    for i in range(1, size):
        rows.add_(padded[:, i : i + h, :], alpha=taps[i])
    out = rows[:, :, 0:w] * taps[0]
    for i in range(1, size):
        out.add_(rows[:, :, i : i + w], alpha=taps[i])
    return out


def _weighted_fmeasure(pred_u8: torch.Tensor, gt: torch.Tensor, lut: torch.Tensor, hist: torch.Tensor) -> torch.Tensor:
    """Weighted F-measure (Margolin et al. 2014), beta^2 = 1; 0 for an empty gt, as PySODMetrics.

    What PySODMetrics' pixel maps feed into, and how we get it:

    * background pixels weigh ``E * B`` with ``E = pred`` and ``B = 2 - 0.5 ** (dist / 5)``:
      their sum is ``2 * sum(pred) - sum(pred * 0.5 ** (dist / 5))``, the first term exact from
      the histogram, the second from the exact distance transform (float32 terms, float64 sum);
    * foreground pixels weigh ``min(E, EA)``, ``EA`` the Gaussian-smoothed error map in which
      every background pixel takes the error of its nearest foreground pixel (``Et``). EA is
      read at foreground pixels only, whose 7x7 windows reach background pixels within squared
      distance 18 of the foreground: only those need their nearest foreground pixel, found among
      the few offsets of exactly their distance, with scipy's preference among equals.
    """
    n, h, w = gt.shape
    dev = gt.device
    n_fg = hist[:, 1].sum(1)  # float64
    out = torch.zeros(n, dtype=torch.float64, device=dev)
    has_fg = n_fg > 0
    if not bool(has_fg.all()):
        keep = has_fg.nonzero().flatten()
        if keep.numel() == 0:
            return out
        return out.index_copy_(0, keep, _weighted_fmeasure(pred_u8[keep], gt[keep], lut[keep], hist[keep]))
    d2 = _edt_sq(gt)
    pred = lut.float().gather(1, pred_u8.flatten(1).long()).view(n, h, w)
    err = torch.where(gt, 1 - pred, pred)

    # Et: background pixels near the foreground take the error of their nearest foreground pixel
    err_t = err.clone()
    d2 = d2.float()  # exact: integers below 2**24; contiguous even where d2 was a transposed view
    bi, ri, ci = ((d2 > 0) & (d2 <= 18)).nonzero(as_tuple=True)
    if bi.numel():
        table = _band_offsets(18, dev)[d2[bi, ri, ci].long()]  # (P, 8, 2)
        rr = ri.view(-1, 1) + table[..., 0]
        cc = ci.view(-1, 1) + table[..., 1]
        padded = F.pad(gt, (4, 4, 4, 4))  # offsets reach 4 pixels: outside is background
        hit = padded[bi.view(-1, 1), rr + 4, cc + 4]  # (P, 8); padding slots (0, 0) are background
        first = hit.to(torch.uint8).argmax(1, keepdim=True)
        err_t[bi, ri, ci] = err[bi, rr.gather(1, first).view(-1), cc.gather(1, first).view(-1)]
    ea = _gaussian_filter(err_t)

    fg_err = (hist[:, 1] * (1 - lut)).sum(1)  # sum of E over the foreground, exact
    bg_pred = (hist[:, 0] * lut).sum(1)  # sum of E over the background, exact
    # in place (each fresh full-size tensor costs its page faults); -ea + err == err - ea exactly
    gain = ea.neg_().add_(err).clamp_min_(0).masked_fill_(~gt, 0)
    fg_gain = gain.sum((1, 2), dtype=torch.float64)
    decay = d2.sqrt_().mul_(math.log(0.5) / 5).exp_()
    bg_decay = decay.mul_(pred).masked_fill_(gt, 0).sum((1, 2), dtype=torch.float64)
    ew_fg = fg_err - fg_gain
    tpw = n_fg - ew_fg
    fpw = 2 * bg_pred - bg_decay
    recall = 1 - ew_fg / n_fg
    precision = tpw / (tpw + fpw + EPS)
    return (1 + _WF_BETA2) * recall * precision / (recall + _WF_BETA2 * precision + EPS)


def _weighted_fmeasure_maps(
    pred_u8: torch.Tensor, gt: torch.Tensor, lut: torch.Tensor, hist: torch.Tensor
) -> torch.Tensor:
    """Per-map weighted F-measure (N,) float64: map by map in numpy on the CPU, batched in torch
    on an accelerator."""
    if pred_u8.device.type != "cpu" or not _CPU_WF:
        return _weighted_fmeasure(pred_u8, gt, lut, hist)
    p, g, table, counts = pred_u8.numpy(), gt.numpy(), lut.numpy(), hist.numpy()
    return torch.tensor(
        [_weighted_fmeasure_cpu(p[i], g[i], table[i], counts[i]) for i in range(len(p))], dtype=torch.float64
    )


#: False sends CPU maps through the torch path as well (tests compare the two)
_CPU_WF = True

# The same measure for one map on the CPU, in numpy and float64: full-map work is limited to
# the distance transform (C kernel when built) and one dot product; the error maps, the band of
# nearest foreground pixels and the Gaussian are computed on the foreground's bounding box only.

_DECAY_TABLE = np.ones(1)


def _decay_table(max_sq: int) -> np.ndarray:
    """``0.5 ** (sqrt(k) / 5)`` for squared distances k = 0..max_sq, in PySODMetrics' float64
    operations (``exp(log(0.5) / 5 * dist)``); grown on demand and kept."""
    global _DECAY_TABLE
    if _DECAY_TABLE.shape[0] <= max_sq:
        _DECAY_TABLE = np.exp(np.log(0.5) / 5 * np.sqrt(np.arange(max_sq + 1, dtype=np.float64)))
    return _DECAY_TABLE


def _squared_distance_cpu(fg: np.ndarray) -> np.ndarray:
    """Exact squared distances to the nearest ``True`` of a 2-D bool map (with one), int32: the C
    kernel when built, else the numpy transform."""
    return _edt_sq_cpu(fg[None])[0].astype(np.int64)


def _weighted_fmeasure_cpu(pred_u8: np.ndarray, gt: np.ndarray, lut: np.ndarray, hist: np.ndarray) -> float:
    """:func:`_weighted_fmeasure` of one (H, W) map: ``pred_u8`` uint8, ``gt`` bool, ``lut`` (256,)
    float64 normalised values, ``hist`` (2, 256) counts. Same quantities, same scipy tie-breaking."""
    n_fg = hist[1].sum()
    if n_fg == 0:
        return 0.0
    h, w = gt.shape
    d2 = _squared_distance_cpu(gt)
    fg_pred = float(hist[1] @ lut)  # sum of pred over the foreground, exact
    bg_pred = float(hist[0] @ lut)
    # sum over the background of pred * decay(dist): over all pixels minus the foreground's
    # (where the distance is 0 and the decay 1)
    decay = _decay_table(int(d2.max()))
    bg_decay = float(np.dot(lut[pred_u8.ravel()], decay[d2.ravel()])) - fg_pred

    # the foreground's bounding box, 4 pixels wider: every band pixel (squared distance <= 18)
    # and every 7x7 window around a foreground pixel lies inside it
    rows, cols = np.flatnonzero(gt.any(1)), np.flatnonzero(gt.any(0))
    r0, r1 = max(rows[0] - 4, 0), min(rows[-1] + 5, h)
    c0, c1 = max(cols[0] - 4, 0), min(cols[-1] + 5, w)
    g = gt[r0:r1, c0:c1]
    pred = lut[pred_u8[r0:r1, c0:c1]]
    err = np.where(g, 1 - pred, pred)
    err_t = err.copy()
    d2_box = d2[r0:r1, c0:c1]
    ri, ci = np.nonzero((d2_box > 0) & (d2_box <= 18))
    if ri.size:
        table = _band_offsets(18).numpy()[d2_box[ri, ci]]  # (P, 8, 2)
        rr = ri[:, None] + table[..., 0]
        cc = ci[:, None] + table[..., 1]
        padded = np.pad(g, 4)  # outside the box (or the map) there is no foreground nearby
        first = padded[rr + 4, cc + 4].argmax(1)
        pick = np.arange(ri.size)
        err_t[ri, ci] = err[rr[pick, first], cc[pick, first]]
    ea = _gaussian_filter(torch.from_numpy(err_t)[None])[0].numpy()
    gain = err - ea
    fg_gain = float(gain[g & (gain > 0)].sum())

    ew_fg = (n_fg - fg_pred) - fg_gain  # sum over the foreground of min(E, EA)
    tpw = n_fg - ew_fg
    fpw = 2 * bg_pred - bg_decay
    recall = 1 - ew_fg / n_fg
    precision = tpw / (tpw + fpw + EPS)
    return float((1 + _WF_BETA2) * recall * precision / (recall + _WF_BETA2 * precision + EPS))


# ---------------------------- exact Euclidean distance transform ----------------------------


def _column_distance(fg: torch.Tensor) -> torch.Tensor:
    """(N, H, W) bool -> (N, H, W) float64: squared distance to the nearest ``True`` in the same
    column, ``inf`` in columns without one."""
    n, h, w = fg.shape
    big = 1 << 20
    r = torch.arange(h, device=fg.device, dtype=torch.int32).view(1, h, 1)
    # nearest feature row at-or-above / at-or-below: running max / min down each column, done
    # along the contiguous last dim of the transposed map (torch's cummax along a strided dim
    # is several times slower on CPU)
    ft = fg.transpose(1, 2)
    rt = r.view(1, 1, h)
    up = torch.where(ft, rt, torch.full_like(rt, -big)).contiguous().cummax(2).values.transpose(1, 2)
    down = torch.where(ft, rt, torch.full_like(rt, big)).flip(2).contiguous().cummin(2).values.flip(2).transpose(1, 2)
    v = torch.minimum(r - up, down - r).double()
    return torch.where(fg.any(1, keepdim=True), v * v, torch.full_like(v, math.inf))


def _row_transform(f: torch.Tensor, has_col: torch.Tensor) -> torch.Tensor:
    """Squared-distance transform along rows: ``min_j f[n, r, j] + (c - j)^2`` for every pixel.

    f: (N, H, W) float64, ``inf`` in the columns without a feature (``has_col`` (N, W) False);
    every map has at least one feature column. Felzenszwalb & Huttenlocher's lower envelope of
    parabolas, run for all rows of all maps at once: step i pushes each map's i-th feature
    column, so the Python loop is as long as the largest number of feature columns of one map.
    The stack is a linked list (a push writes one row of (K, R) tables, a pop gathers), and an
    element once popped is dead for good, so the envelope is the never-popped elements.
    Exact: breakpoints are quotients of integers with denominators <= 2W, correctly rounded, so
    their comparisons are those of the exact rationals."""
    n, h, w = f.shape
    dev = f.device
    rows = n * h
    counts = has_col.sum(1)  # (N,)
    k_max = int(counts.max())
    # per map, its feature columns in ascending order, padded with the last one (steps past a
    # map's count are no-ops)
    order = torch.sort((~has_col).to(torch.uint8), dim=1, stable=True).indices[:, :k_max]  # (N, K)
    step = torch.arange(k_max, device=dev).view(1, -1)
    valid_nk = step < counts.view(-1, 1)
    col_nk = order  # (N, K) column of step i
    # (K, R) tables: column, f + column^2 of every step for every row
    col_kr = col_nk.t().repeat_interleave(h, dim=1)  # (K, N*H)
    valid_kr = valid_nk.t().repeat_interleave(h, dim=1)
    f_rows = f.reshape(rows, w)
    g_kr = f_rows.gather(1, col_kr.t()).t() + col_kr.double() ** 2
    g_kr = torch.where(valid_kr, g_kr, torch.zeros_like(g_kr)).contiguous()
    colf_kr = col_kr.double().contiguous()
    # element K is the empty stack's sentinel: its parabola is at +inf, its breakpoint NaN
    prev = torch.full((k_max + 1, rows), k_max, dtype=torch.int64, device=dev)
    z_all = torch.full((k_max + 1, rows), math.nan, dtype=torch.float64, device=dev)
    g_all = torch.cat([g_kr, torch.full((1, rows), math.inf, dtype=torch.float64, device=dev)])
    v_all = torch.cat([colf_kr, torch.full((1, rows), -1.0, dtype=torch.float64, device=dev)])
    dead = torch.zeros(k_max + 1, rows, dtype=torch.bool, device=dev)
    top = torch.full((rows,), k_max, dtype=torch.int64, device=dev)
    top_v = torch.full((rows,), -1.0, dtype=torch.float64, device=dev)
    top_g = torch.full((rows,), math.inf, dtype=torch.float64, device=dev)
    top_z = torch.full((rows,), math.nan, dtype=torch.float64, device=dev)
    sentinel = torch.full((rows,), k_max, dtype=torch.int64, device=dev)
    for i in range(k_max):
        valid = valid_kr[i]
        gq = g_kr[i]
        q = colf_kr[i]
        s = (gq - top_g) / (2 * (q - top_v))  # -inf against the sentinel
        pop = valid & (s <= top_z)
        while bool(pop.any()):
            dead.scatter_(0, torch.where(pop, top, sentinel).view(1, -1), True)
            top = torch.where(pop, prev.gather(0, top.view(1, -1)).view(-1), top)
            idx = top.view(1, -1)
            top_v = v_all.gather(0, idx).view(-1)
            top_g = g_all.gather(0, idx).view(-1)
            top_z = z_all.gather(0, idx).view(-1)
            s = (gq - top_g) / (2 * (q - top_v))
            pop = pop & (s <= top_z)
        prev[i] = top
        z_all[i] = s
        top = torch.where(valid, torch.full_like(top, i), top)
        top_v = torch.where(valid, q, top_v)
        top_g = torch.where(valid, gq, top_g)
        top_z = torch.where(valid, s, top_z)
    # breakpoints of the living elements ascend; a dead (or padding) element takes the
    # breakpoint of the next living one, so that a sorted search never lands on it
    z = torch.where(dead[:k_max] | ~valid_kr, torch.full_like(z_all[:k_max], math.inf), z_all[:k_max])
    z = z.flip(0).cummin(0).values.flip(0).t().contiguous()  # (R, K)
    c = torch.arange(w, device=dev, dtype=torch.float64).view(1, -1).expand(rows, w).contiguous()
    seg = (torch.searchsorted(z, c, right=True) - 1).clamp_min(0)
    j = col_kr.t().gather(1, seg)
    return (f_rows.gather(1, j) + (c - j) ** 2).view(n, h, w)


# The same transform for CPU tensors, in numpy: the envelope loop is bound by per-operation
# overhead on arrays of a few hundred rows, which is several times lower in numpy than in torch.


def _edt_rows_cpu(fg: np.ndarray) -> np.ndarray:
    """:func:`_edt_sq` of an (N, H, W) bool array (every map with a ``True``) in numpy, with the
    lower envelope along rows: (N, H, W) float64.

    The same algorithm as :func:`_column_distance` + :func:`_row_transform`, arranged for
    the CPU, where the envelope loop is bound by per-operation overhead on arrays of a few hundred
    rows (several times lower in numpy than in torch):

    * the column pass runs only over the feature columns, transposed so that the running
      max / min go along contiguous memory, straight into the (K, R) tables of the loop;
    * maps are sorted by their number of feature columns, so the rows still pushing at step i are
      a leading slice; the breakpoint of every element against its predecessor is computed for
      all steps at once, and the loop only walks back the stacks of the rows that pop;
    * the envelope is read without a sorted search: element k's segment starts at column
      ``ceil(z_k)``, so each row's living (column, f) pairs, encoded as ``j * 2**32 + f`` (exact
      in float64), are written as differences at those starts and a cumulative sum fills them in.
    """
    n, h, w = fg.shape
    rows = n * h
    has_col = fg.any(1)  # (N, W)
    counts = has_col.sum(1)
    order = np.argsort(-counts, kind="stable")
    has_col, counts = has_col[order], counts[order]
    k_max = int(counts[0])
    cols = np.zeros((n, k_max), dtype=np.int64)  # padding: computed, never read
    for m in range(n):
        cols[m, : counts[m]] = np.flatnonzero(has_col[m])
    # column pass over the feature columns: (N, K, H), nearest feature row above / below
    sel = torch.from_numpy(
        fg[order[:, None], :, cols].copy() if n > 1 else fg[0][:, cols[0]].T.copy().reshape(1, k_max, h)
    )
    big = 1 << 20
    r = torch.arange(h, dtype=torch.int32)
    up = torch.where(sel, r, torch.tensor(-big, dtype=torch.int32)).cummax(2).values
    down = torch.where(sel.flip(2), r.flip(0), torch.tensor(big, dtype=torch.int32)).cummin(2).values.flip(2)
    v = torch.minimum(r - up, down - r).double()
    colf_kr = np.repeat(cols.T.astype(np.float64), h, axis=1)  # (K, R)
    g_kr = (v * v).transpose(0, 1).reshape(k_max, rows).numpy() + colf_kr * colf_kr
    active_at = (np.searchsorted(-counts, -np.arange(k_max), side="left") * h).tolist()
    # z[i]: breakpoint of element i against the element below it on the stack, at first i - 1
    # (padding entries, never read, may hold nan)
    z_all = np.empty((k_max, rows))
    z_all[0] = -np.inf  # the bottom element is never popped
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(g_kr[1:] - g_kr[:-1], 2 * (colf_kr[1:] - colf_kr[:-1]), out=z_all[1:])
    # prev[i, r]: flat index (k * rows + r) of the element below element i in row r's stack
    prev = np.arange(-rows, (k_max - 1) * rows, dtype=np.int64).reshape(k_max, rows)
    g_flat, z_flat, prev_flat = g_kr.reshape(-1), z_all.reshape(-1), prev.reshape(-1)
    v2_flat = 2 * colf_kr.reshape(-1)
    for i in range(1, k_max):
        a = active_at[i]
        s = z_all[i, :a]
        idx = np.flatnonzero(s <= z_all[i - 1, :a])  # the rows where element i - 1 pops
        if not idx.size:
            continue
        gi, qi = g_kr[i, idx], v2_flat[i * rows + idx]
        fl = idx + (i - 1) * rows  # top of each popping row's stack
        while True:
            fl = prev_flat[fl]  # pop
            ns = (gi - g_flat[fl]) / (qi - v2_flat[fl])
            s[idx] = ns
            prev[i, idx] = fl
            keep = ns <= z_flat[fl]
            if not keep.any():
                break
            idx, fl, gi, qi = idx[keep], fl[keep], gi[keep], qi[keep]
    # an element is dead iff a later element's link jumps over it (a stack never re-pushes)
    below = torch.from_numpy(prev // rows).flip(0).cummin(0).values.flip(0).numpy()
    living = np.empty((k_max, rows), dtype=bool)
    living[-1] = True
    np.greater_equal(below[1:], np.arange(k_max - 1)[:, None], out=living[:-1])
    living = living.T & (np.arange(k_max)[None, :] < np.repeat(counts, h)[:, None])
    rr, kk = np.nonzero(living)  # row by row, living elements by ascending breakpoint
    fl = kk * rows + rr
    start = np.clip(np.ceil(z_flat[fl]), 0, w).astype(np.int64)  # the first holds -inf
    jl = colf_kr.reshape(-1)[fl]
    val = jl * 4294967296.0 + (g_flat[fl] - jl * jl)
    diff = val.copy()
    diff[1:] -= val[:-1]
    first = np.ones(rr.size, dtype=bool)
    np.not_equal(rr[1:], rr[:-1], out=first[1:])
    diff[first] = val[first]
    keep = start < w  # segments starting past the row (trailing in it) never apply
    enc = np.bincount((rr * w + start)[keep], weights=diff[keep], minlength=rows * w).reshape(rows, w)
    torch.from_numpy(enc).cumsum_(1)
    # decode in place (few fresh full-size arrays: each costs its page faults)
    j = enc * 2.0**-32
    np.floor(j, out=j)
    tmp = j * 4294967296.0
    enc -= tmp  # f at the nearest feature column
    np.subtract(j, np.arange(w, dtype=np.float64), out=j)
    j *= j
    enc += j
    out = enc.reshape(n, h, w)
    if n == 1:
        return out
    res = np.empty_like(out)
    res[order] = out
    return res


def _edt_sq_cpu(fg: np.ndarray) -> np.ndarray:
    """:func:`_edt_sq` of an (N, H, W) bool array, each map along its shorter feature axis."""
    n, h, w = fg.shape
    swap = fg.any(2).sum(1) < fg.any(1).sum(1)
    if n == 1:
        return _edt_rows_cpu(fg[:, :, :].transpose(0, 2, 1)).transpose(0, 2, 1) if swap[0] else _edt_rows_cpu(fg)
    out = np.empty((n, h, w))
    if not swap.all():
        out[~swap] = _edt_rows_cpu(fg[~swap])
    if swap.any():
        out[swap] = _edt_rows_cpu(fg[swap].transpose(0, 2, 1)).transpose(0, 2, 1)
    return out


def _edt_sq(fg: torch.Tensor) -> torch.Tensor:
    """Exact squared Euclidean distance of every pixel to the nearest ``True`` pixel of its map,
    for an (N, H, W) bool batch in which every map has one: (N, H, W) float64 (integers).
    Separable: per-column distances, then the lower envelope along rows. The envelope loop
    runs over the columns holding features, so the axes are swapped when that makes it shorter."""
    if fg.device.type == "cpu":
        return torch.from_numpy(_edt_sq_cpu(fg.numpy()))
    n_cols = int(fg.any(1).sum(1).max())
    n_rows = int(fg.any(2).sum(1).max())
    if n_rows < n_cols:  # distances do not depend on the order of the passes
        return _edt_sq(fg.transpose(1, 2).contiguous()).transpose(1, 2)
    return _row_transform(_column_distance(fg), fg.any(1))


# --------------------------------------------------------------------------------------------
# per-image statistics from one histogram
# --------------------------------------------------------------------------------------------


def _lut(pred_u8: torch.Tensor) -> torch.Tensor:
    """PySODMetrics' prepare_data as a per-image lookup table: (N, 256) float64, entry v is the
    normalised value of a pixel whose uint8 value is v.

    ``pred / 255`` then per-image min-max, with the same float64 operations numpy does on every
    pixel, so the table holds bit-identical values (and ``floor(lut * 255)`` the same bins)."""
    flat = pred_u8.flatten(1)
    mn = flat.amin(1).double().view(-1, 1) / 255
    mx = flat.amax(1).double().view(-1, 1) / 255
    v = torch.arange(256, device=pred_u8.device, dtype=torch.float64).view(1, -1) / 255
    varying = mx != mn
    return torch.where(varying, (v - mn) / torch.where(varying, mx - mn, torch.ones_like(mx)), v)


def _centroid(gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per image: foreground pixel count and PySODMetrics' 1-based rounded centroid (cy, cx)."""
    n, h, w = gt.shape
    dev = gt.device
    row_cnt = gt.sum(2)  # (N, H) int64
    col_cnt = gt.sum(1)  # (N, W)
    n_fg = row_cnt.sum(1)
    # sums of integer coordinates are exact in float64; round() is half-to-even like numpy's
    cy = (row_cnt * torch.arange(h, device=dev)).sum(1).double() / n_fg.clamp_min(1)
    cx = (col_cnt * torch.arange(w, device=dev)).sum(1).double() / n_fg.clamp_min(1)
    cy = torch.where(n_fg > 0, cy.round(), torch.full_like(cy, round(h / 2))).long() + 1
    cx = torch.where(n_fg > 0, cx.round(), torch.full_like(cx, round(w / 2))).long() + 1
    return n_fg, cy, cx


def _quadrant_histogram(pred_u8: torch.Tensor, gt: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor) -> torch.Tensor:
    """Counts (N, 4, 2, 256) of pixels per S-measure quadrant (lt, rt, lb, rb: split at the
    1-based centroid), gt value and uint8 prediction value: one bincount for the whole batch.
    Every per-image quantity but the weighted F-measure's is a function of these counts."""
    n, h, w = pred_u8.shape
    dev = pred_u8.device
    rows = (torch.arange(h, device=dev).view(1, h, 1) >= cy.view(-1, 1, 1)).to(torch.int32) * 1024
    rows = rows + (torch.arange(n, device=dev, dtype=torch.int32) * 2048).view(-1, 1, 1)
    cols = (torch.arange(w, device=dev).view(1, 1, w) >= cx.view(-1, 1, 1)).to(torch.int32) * 512
    key = pred_u8.to(torch.int32)
    key.add_(gt.to(torch.int32), alpha=256)
    key.add_(rows).add_(cols)
    return torch.bincount(key.flatten(), minlength=2048 * n).view(n, 4, 2, 256)


def _ge_counts(hist: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """hist (N, 2, 256) over uint8 values, levels (N, 256) in 0..255: per image and gt class the
    number of pixels with ``level >= t`` for t = 0..255, (N, 2, 256) float64."""
    binned = torch.zeros_like(hist).scatter_add_(2, levels.unsqueeze(1).expand_as(hist), hist)
    return binned.flip(-1).cumsum(-1).flip(-1)


def _adaptive(lut: torch.Tensor, hist: torch.Tensor, n_fg: torch.Tensor, size: torch.Tensor):
    """Adaptive F and E of the threshold ``min(2 * mean(pred), 1)``, from the histogram."""
    mean = (hist.sum(1) * lut).sum(1) / size
    thr = (2 * mean).clamp_max(1).view(-1, 1)
    sel = (lut >= thr).double()
    fg_fg = (hist[:, 1] * sel).sum(1)
    fg_bg = (hist[:, 0] * sel).sum(1)
    nfg = n_fg.double()
    pre = fg_fg / (fg_fg + fg_bg).clamp_min(1)
    rec = fg_fg / nfg.clamp_min(1)
    den = torch.where(fg_fg == 0, torch.ones_like(pre), _F_BETA2 * pre + rec)
    adp_f = torch.where(fg_fg == 0, torch.zeros_like(pre), (1 + _F_BETA2) * pre * rec / den)
    adp_e = _emeasure_from_counts(fg_fg.view(-1, 1), fg_bg.view(-1, 1), n_fg, size)[:, 0]
    return adp_f, adp_e


def _smeasure_from_hist(lut, qhist, n_fg, cy, cx, h, w) -> torch.Tensor:
    """Structure measure (Fan et al. 2017), alpha = 0.5, from the quadrant histogram."""
    size = h * w
    hist = qhist.sum(1)  # (N, 2, 256)
    nfg = n_fg.double()
    y = nfg / size
    mean_pred = (hist.sum(1) * lut).sum(1) / size

    # ---- object term: foreground pixels of pred, background pixels of 1 - pred
    fg, bg = hist[:, 1], hist[:, 0]
    n_bg = size - nfg
    fg_sum = (fg * lut).sum(1)
    fg_mean = (fg_sum / nfg.clamp_min(1)).view(-1, 1)
    fg_dev = (fg * (lut - fg_mean) ** 2).sum(1)
    inv = 1 - lut
    bg_sum = (bg * inv).sum(1)
    bg_mean = (bg_sum / n_bg.clamp_min(1)).view(-1, 1)
    bg_dev = (bg * (inv - bg_mean) ** 2).sum(1)
    obj = _s_object(fg_sum, fg_dev, nfg) * y + _s_object(bg_sum, bg_dev, n_bg) * (1 - y)

    # ---- region term: four quadrants split at the (1-based, MATLAB) foreground centroid
    cyf, cxf = cy.double(), cx.double()
    w_lt = cxf * cyf / size
    w_rt = cyf * (w - cxf) / size
    w_lb = (h - cyf) * cxf / size
    weights = torch.stack([w_lt, w_rt, w_lb, 1 - w_lt - w_rt - w_lb], 1)  # (N, 4)

    both = qhist.sum(2)  # (N, 4, 256) pixels per quadrant and value
    count = both.sum(2)  # (N, 4)
    safe = count.clamp_min(1)
    lut4 = lut.unsqueeze(1)  # (N, 1, 256)
    # Means are taken relative to a value present in the quadrant so that a constant quadrant
    # has exactly zero deviation, as numpy's pairwise mean gives: the "alpha == 0 and beta == 0
    # -> score 1" branch of ssim depends on that exactness.
    ref = lut.gather(1, (both > 0).to(torch.uint8).argmax(2))  # (N, 4): first value present
    x = ref + (both * (lut4 - ref.unsqueeze(2))).sum(2) / safe
    q_fg = qhist[:, :, 1].sum(2)
    yq = q_fg / safe
    dx = lut4 - x.unsqueeze(2)  # (N, 4, 256)
    denom = count - 1 + EPS
    sigma_x = (both * dx * dx).sum(2) / denom
    sigma_y = (q_fg * (1 - yq) ** 2 + (count - q_fg) * yq**2) / denom
    sigma_xy = ((qhist[:, :, 1] * dx).sum(2) * (1 - yq) - (qhist[:, :, 0] * dx).sum(2) * yq) / denom
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


# --------------------------------------------------------------------------------------------
# the ignite metric
# --------------------------------------------------------------------------------------------

#: maps whose histogram statistics wait to be computed in one batch (a few MB of summaries)
_PENDING_MAPS = 256

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
        from ignite_r3net.metrics.interim import SaliencyMetrics

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
        device: str | torch.device = "cpu",
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
        # per-map histogram summaries not yet folded into the sums (see _flush)
        self._pending: list[tuple[torch.Tensor, ...]] = []
        self._pending_maps = 0

    @staticmethod
    def _as_list(maps: Maps) -> list[torch.Tensor]:
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
    def update(self, output: tuple[Maps, Maps]) -> None:
        preds = [_to_uint8_pred(p.detach()).to(self._device) for p in self._as_list(output[0])]
        gts = [_check_gt(g.detach()).to(self._device) for g in self._as_list(output[1])]
        if len(preds) != len(gts):
            raise ValueError(f"got {len(preds)} predictions for {len(gts)} ground truths")
        for p, g in zip(preds, gts):
            if p.shape != g.shape:
                raise ValueError(f"prediction shape {tuple(p.shape)} != ground truth shape {tuple(g.shape)}")
        for pred_u8, gt_u8 in _group_by_size(preds, gts):
            # chunks of ~0.5 M pixels on an accelerator: the distance transform's loop runs as
            # long as the chunk's map with most feature lines and its per-step cost grows with the
            # rows. ~2 M on the CPU, where the weighted F-measure goes map by map anyway and the
            # histogram statistics are cheaper batched
            budget = (1 << 21) if pred_u8.device.type == "cpu" else (1 << 19)
            step = max(1, budget // pred_u8[0].numel())
            for i in range(0, pred_u8.shape[0], step):
                self._update_batch(pred_u8[i : i + step], gt_u8[i : i + step])

    def _update_batch(self, pred_u8: torch.Tensor, gt_u8: torch.Tensor) -> None:
        """Score what needs the pixels now (weighted F; the r3net protocol's MAE and P/R) and keep
        each map's histogram summary for :meth:`_flush`."""
        n, h, w = pred_u8.shape
        gt = gt_u8 > 128
        lut = _lut(pred_u8)  # the normalised value of every uint8 level, per image
        n_fg, cy, cx = _centroid(gt)
        qhist = _quadrant_histogram(pred_u8, gt, cy, cx).double()  # (N, 4, 2, 256)
        hist = qhist.sum(1)  # (N, 2, 256): gt background / foreground counts per uint8 value
        if self.protocol == "r3net":
            p = pred_u8.double() / 255
            g = gt_u8.double() / 255
            self._sum_mae += _exact((p - g).abs().flatten(1).mean(1)).sum()
            hard = g > 0.5
            # pred/255 > t/255  <=>  pred_u8 > t: count of values >= t + 1
            r_tp, r_fp = _hist_counts(pred_u8, hard)
            zero = torch.zeros_like(r_tp[:, :1])
            r_tp = torch.cat([r_tp[:, 1:], zero], 1).double()
            r_pos = r_tp + torch.cat([r_fp[:, 1:], zero], 1).double()
            t = hard.flatten(1).sum(1, keepdim=True).double()
            self._sum_precision += _exact((r_tp + _R3NET_EPS) / (r_pos + _R3NET_EPS)).sum(0)
            self._sum_recall += _exact((r_tp + _R3NET_EPS) / (t + _R3NET_EPS)).sum(0)
        self._sum_wf += _exact(_weighted_fmeasure_maps(pred_u8, gt, lut, hist)).sum()
        self._num_images += n
        shape = torch.tensor([[h, w]], dtype=torch.float64, device=lut.device).expand(n, 2)
        self._pending.append((lut, qhist, hist, n_fg, cy, cx, shape))
        self._pending_maps += n
        if self._pending_maps >= _PENDING_MAPS:
            self._flush()

    def _flush(self) -> None:
        """Add the statistics that follow from the maps' histograms, for all pending maps in one
        batched pass (per-image values are rounded by ``_exact``, so when this runs does not change
        a bit of the sums)."""
        if not self._pending:
            return
        lut, qhist, hist, n_fg, cy, cx, shape = (torch.cat(parts) for parts in zip(*self._pending))
        self._pending, self._pending_maps = [], 0
        h, w = shape[:, 0], shape[:, 1]
        size = h * w
        # floor == numpy's astype(uint8) truncation PySODMetrics uses to bin the normalised map
        # (levels outside [min, max] of an image hold no pixel; clamping keeps them indexable)
        ge = _ge_counts(hist, (lut * 255).floor().clamp(0, 255).long())
        tp, fp = ge[:, 1], ge[:, 0]
        precision, recall, fm = _fmeasure(tp, fp, n_fg)
        if self.protocol == "standard":
            # |pred - gt| is pred on the background and 1 - pred on the foreground
            self._sum_mae += _exact(((hist[:, 0] * lut).sum(1) + (hist[:, 1] * (1 - lut)).sum(1)) / size).sum()
            self._sum_precision += _exact(precision).sum(0)
            self._sum_recall += _exact(recall).sum(0)
        self._sum_fm += _exact(fm).sum(0)
        adp_f, adp_e = _adaptive(lut, hist, n_fg, size)
        self._sum_adp_f += _exact(adp_f).sum()
        self._sum_em += _exact(_emeasure_from_counts(tp, fp, n_fg, size)).sum(0)
        self._sum_adp_e += _exact(adp_e).sum()
        self._sum_sm += _exact(_smeasure_from_hist(lut, qhist, n_fg, cy, cx, h, w)).sum()

    def state_dict(self):  # noqa: D102 - the sums must include the pending maps
        self._flush()
        return super().state_dict()

    def load_state_dict(self, state_dict) -> None:  # noqa: D102 - the loaded sums replace everything
        self._pending, self._pending_maps = [], 0
        super().load_state_dict(state_dict)

    def compute(self) -> dict[str, float]:
        """The nine scores, averaged over every image seen by every process."""
        self._flush()
        return self._reduced_scores()

    @sync_all_reduce(*_ACCUMULATORS)
    def _reduced_scores(self) -> dict[str, float]:
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

    def pr_curve(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean precision and recall over images, each of 256 values indexed by threshold t:
        a pixel is positive when ``floor(pred * 255) >= t`` (standard, pred normalised) or
        ``pred_u8 > t`` (r3net)."""
        self._flush()
        return self._reduced_pr_curve()

    @sync_all_reduce("_sum_precision", "_sum_recall", "_num_images")
    def _reduced_pr_curve(self) -> tuple[torch.Tensor, torch.Tensor]:
        count = float(self._num_images)
        if count == 0:
            raise NotComputableError("SaliencyMetrics must have at least one example before it can be computed.")
        return self._sum_precision / count, self._sum_recall / count
