"""Weighted F-measure (Margolin et al., CVPR 2014), beta^2 = 1: PySODMetrics' ``WeightedFmeasure.cal_wfm``
(after the MATLAB code), for a normalised ``pred`` and a bool ``gt`` with a foreground: ``Dst, Idxt =
distance_transform_edt(~gt, return_indices=True)``; ``E = |pred - gt|``; ``Et``: ``E`` with each background
pixel taking its nearest foreground pixel's; ``EA``: ``Et`` convolved with ``fspecial('gaussian', 7, 5)``
(zeros outside); ``Ew = min(E, EA)`` on the foreground, ``E * (2 - 0.5 ** (Dst / 5))`` on the background;
``R = 1 - mean(Ew[gt])``, ``P = TPw / (TPw + FPw + eps)`` with ``TPw = sum(gt) - sum(Ew[gt])``,
``FPw = sum(Ew[~gt])``; the score is ``2 R P / (R + P + eps)``.

The same scipy call gives PySODMetrics' own nearest pixels, ties included (OpenCV's faster transform gives
no exact indices); the rest is restricted to where it matters. ``EA`` is read on the foreground only,
whose 7x7 windows stay within 3 pixels of it: ``E``, ``Et``, ``EA`` are computed on the foreground's
bounding box grown by 3 (zeros padded where it meets the map's edge, as scipy's ``mode="constant"``). On
the background ``E = pred``, so ``FPw = 2 sum(pred) - sum(pred * 0.5 ** (Dst / 5))`` there: one full-map
dot product with the decay, whose distances come exactly from the indices.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

EPS = float(np.spacing(1))  # the eps PySODMetrics and the MATLAB code add to denominators
BETA2 = 1.0  # beta^2 of the weighted F-measure
_REACH = 3  # half the Gaussian window: how far a foreground pixel's EA reads Et


def gaussian_taps(size: int = 7, sigma: float = 5.0) -> np.ndarray:
    """The 1-D factor of MATLAB's ``fspecial('gaussian', size, sigma)``, whose outer product is the
    kernel up to float64 rounding (fspecial's zeroing below ``eps * max`` never triggers for 7, 5)."""
    x = np.arange(size) - (size - 1) / 2
    taps = np.exp(-(x * x) / (2 * sigma * sigma))
    return taps / taps.sum()


def foreground_box(gt: np.ndarray, margin: int) -> tuple[slice, slice]:
    """Rows and columns of the bounding box of ``gt``'s foreground grown by ``margin``, within the map."""
    rows, cols = np.flatnonzero(gt.any(1)), np.flatnonzero(gt.any(0))
    h, w = gt.shape
    return (
        slice(max(rows[0] - margin, 0), min(rows[-1] + margin + 1, h)),
        slice(max(cols[0] - margin, 0), min(cols[-1] + margin + 1, w)),
    )


def squared_distances(nearest: np.ndarray) -> np.ndarray:
    """Squared distances (int) of every pixel to the pixel ``nearest`` (2, H, W) points it to."""
    h, w = nearest.shape[1:]
    dr = nearest[0] - np.arange(h, dtype=nearest.dtype)[:, None]
    dc = nearest[1] - np.arange(w, dtype=nearest.dtype)[None, :]
    dr *= dr
    dc *= dc
    dr += dc
    return dr


def weighted_fmeasure(pred: np.ndarray, gt: np.ndarray) -> float:
    """Weighted F-measure of one map: ``pred`` (H, W) float64 normalised to [0, 1], ``gt`` (H, W)
    bool. 0 for an empty ``gt``, as PySODMetrics."""
    if not gt.any():
        return 0.0
    nearest = ndimage.distance_transform_edt(~gt, return_distances=False, return_indices=True)
    rows, cols = foreground_box(gt, _REACH)
    fg = gt[rows, cols]
    box_pred = pred[rows, cols]
    err = np.where(fg, 1 - box_pred, box_pred)
    # Et: every pixel of the box takes E of its nearest foreground pixel (itself on the foreground),
    # which lies in the box
    err_t = err[nearest[0, rows, cols] - rows.start, nearest[1, rows, cols] - cols.start]
    taps = gaussian_taps()
    ea = ndimage.correlate1d(err_t, taps, axis=0, mode="constant")  # the kernel is symmetric:
    ea = ndimage.correlate1d(ea, taps, axis=1, mode="constant")  # correlation == convolution
    n_fg = float(np.count_nonzero(fg))
    fg_ew = float(np.minimum(err, ea)[fg].sum())  # sum of Ew over the foreground
    fg_pred = float(box_pred[fg].sum())
    bg_pred = float(pred.sum()) - fg_pred

    decay = np.sqrt(squared_distances(nearest), dtype=np.float64)
    decay *= math.log(0.5) / 5
    np.exp(decay, out=decay)  # 0.5 ** (Dst / 5), as PySODMetrics computes it; 1 on the foreground
    bg_decay = float(np.dot(pred.ravel(), decay.ravel())) - fg_pred

    tpw = n_fg - fg_ew
    fpw = 2 * bg_pred - bg_decay
    recall = 1 - fg_ew / n_fg
    precision = tpw / (tpw + fpw + EPS)
    return (1 + BETA2) * recall * precision / (recall + BETA2 * precision + EPS)
