"""The ignite ``Metric`` that scores saliency maps, :class:`SaliencyMetrics`, and the weighted F-measure it
computes on the CPU."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate
from types import MappingProxyType
from typing import cast

import ignite.distributed as idist
import numpy as np
import torch
from ignite.exceptions import NotComputableError
from ignite.metrics import Metric
from ignite.metrics.metric import reinit__is_reduced, sync_all_reduce

from . import histogram
from .keys import METRIC_KEYS, ImageScores

Maps = torch.Tensor | Sequence[torch.Tensor]

# Per-image values summed into one float64 vector: name -> length (256: one per threshold t).
_SLOTS = dict(mae=1, precision=256, recall=256, fmeasure=256, adpF=1, emeasure=256, adpE=1, Sm=1, wF=1, images=1)
_OFFSETS = MappingProxyType(  # name -> its slice of the sums vector
    {name: slice(end - n, end) for (name, n), end in zip(_SLOTS.items(), accumulate(_SLOTS.values()))}
)

_QUANTUM = 2.0**32
_CHUNK_PIXELS = 1 << 21  # maps scored together: ~2 M pixels keep the int32 histogram keys at 8 MB
WF_BETA2 = 1.0  # beta^2 of the weighted F-measure
_REACH = 3  # half the Gaussian window: how far a foreground pixel's EA reads Et
# one axis of MATLAB's fspecial('gaussian', 7, 5), whose zeroing of tiny values never triggers for 7, 5
_TAPS = np.exp(-((np.arange(7) - 3.0) ** 2) / (2 * 5.0 * 5.0))
_TAPS /= _TAPS.sum()


def _exact(per_image: torch.Tensor) -> torch.Tensor:
    """Per-image values rounded to multiples of 2**-32 (moved by 1.2e-10 at most): their float64 sums are exact
    up to 2**21 images, so no order of additions (batches, ranks, all-reduce) changes a bit of the result."""
    return torch.round(per_image.double() * _QUANTUM) / _QUANTUM


def _to_uint8_pred(p: torch.Tensor) -> torch.Tensor:
    """Float maps in [0, 1] as the uint8 map one would save (``round(p * 255)``); uint8 unchanged."""
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


def _as_list(maps: Maps) -> list[torch.Tensor]:
    """(H, W), (N, H, W), (N, 1, H, W) or a sequence of (H, W) / (1, H, W) maps -> list of (H, W)."""
    if isinstance(maps, torch.Tensor):
        if maps.dim() == 2:
            return [maps]
        if maps.dim() == 4 and maps.shape[1] == 1:  # (N, 1, H, W) from a model or loader
            maps = maps[:, 0]
        if maps.dim() != 3:
            raise ValueError(f"expected (H, W), (N, H, W) or (N, 1, H, W) maps, got shape {tuple(maps.shape)}")
        return list(maps.unbind(0))
    out = [m.squeeze(0) if m.dim() == 3 and m.shape[0] == 1 else m for m in maps]
    for m in out:
        if m.dim() != 2:
            raise ValueError(f"each map must be 2-D, got shape {tuple(m.shape)}")
    return out


def _batches(preds: list[torch.Tensor], gts: list[torch.Tensor]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(pred, gt) stacks of consecutive equal-size maps, of at most ~2 M pixels each."""
    start = 0
    while start < len(preds):
        step = max(1, _CHUNK_PIXELS // preds[start].numel())
        end = start + 1
        while end < len(preds) and end - start < step and preds[end].shape == preds[start].shape:
            end += 1
        yield torch.stack(preds[start:end]), torch.stack(gts[start:end])
        start = end


def _f_of(precision: torch.Tensor, recall: torch.Tensor) -> torch.Tensor:
    """F-measure from precision and recall (any shape), as the original R3Net code computes it."""
    return (1 + histogram.F_BETA2) * precision * recall / (histogram.F_BETA2 * precision + recall)


def weighted_fmeasure(pred: np.ndarray, gt: np.ndarray) -> float:
    """Weighted F-measure (Margolin et al., CVPR 2014), beta^2 = 1, of one map: ``pred`` (H, W) float64
    normalised to [0, 1], ``gt`` (H, W) bool; 0 for an empty ``gt``, as PySODMetrics.

    PySODMetrics' ``WeightedFmeasure.cal_wfm`` (after the MATLAB code), for a ``gt`` with a foreground: ``Dst, Idxt =
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
    if not gt.any():
        return 0.0
    # here, not at the module's top: scipy.ndimage takes ~0.4 s to import, and every training rank imports this
    # module (validation's metrics) whether or not the run validates
    from scipy import ndimage

    nearest = ndimage.distance_transform_edt(~gt, return_distances=False, return_indices=True)
    # the foreground's bounding box grown by _REACH (a slice past the map's end stops at it)
    fg_rows, fg_cols = np.flatnonzero(gt.any(1)), np.flatnonzero(gt.any(0))
    rows = slice(max(fg_rows[0] - _REACH, 0), fg_rows[-1] + _REACH + 1)
    cols = slice(max(fg_cols[0] - _REACH, 0), fg_cols[-1] + _REACH + 1)
    fg = gt[rows, cols]
    box_pred = pred[rows, cols]
    err = np.where(fg, 1 - box_pred, box_pred)
    # Et: each pixel of the box takes E of its nearest foreground pixel (itself on the foreground), in the box
    err_t = err[nearest[0, rows, cols] - rows.start, nearest[1, rows, cols] - cols.start]
    ea = ndimage.correlate1d(err_t, _TAPS, axis=0, mode="constant")  # the kernel is symmetric:
    ea = ndimage.correlate1d(ea, _TAPS, axis=1, mode="constant")  # correlation == convolution
    n_fg = float(np.count_nonzero(fg))
    fg_ew = float(np.minimum(err, ea)[fg].sum())  # sum of Ew over the foreground
    fg_pred = float(box_pred[fg].sum())
    bg_pred = float(pred.sum()) - fg_pred
    # Dst from the indices, exactly: squared distances in integers
    dr = nearest[0] - np.arange(gt.shape[0], dtype=nearest.dtype)[:, None]
    dc = nearest[1] - np.arange(gt.shape[1], dtype=nearest.dtype)[None, :]
    decay = np.sqrt(dr * dr + dc * dc, dtype=np.float64)
    decay *= math.log(0.5) / 5
    np.exp(decay, out=decay)  # 0.5 ** (Dst / 5), as PySODMetrics computes it; 1 on the foreground
    bg_decay = float(np.dot(pred.ravel(), decay.ravel())) - fg_pred

    tpw = n_fg - fg_ew
    fpw = 2 * bg_pred - bg_decay
    recall = 1 - fg_ew / n_fg
    precision = tpw / (tpw + fpw + histogram.EPS)
    return (1 + WF_BETA2) * recall * precision / (recall + WF_BETA2 * precision + histogram.EPS)


class SaliencyMetrics(Metric):
    """MAE, F-measure (max / mean / adaptive), S-measure, E-measure (max / mean / adaptive) and weighted
    F-measure of saliency maps, in one pass; ``attach(evaluator, "sod")`` puts :meth:`compute`'s dict in
    ``state.metrics["sod"]``. ``update`` takes ``(pred, gt)`` or ``(pred, gt, names)``: lists of 2-D tensors or
    ``(N, H, W)`` tensors, and the images' names (for ``per_image``). ``pred`` is uint8, or float in [0, 1] first
    made the uint8 map one would save (``round(p * 255)``: a tensor scores as its PNG); ``gt`` is uint8 (or bool).

    ``protocol="standard"`` equals PySODMetrics (``normalize=True``; where it differs: ``histogram.smeasure``),
    every score computed per image and averaged over images: ``maxF`` / ``maxE`` are the maxima of the mean
    curves over the 256 thresholds, ``meanF`` / ``meanE`` their means, ``adpF`` / ``adpE`` use the threshold
    ``min(2 * mean(pred), 1)`` per image. ``"r3net"`` computes ``mae`` and ``maxF`` as the original R3Net code
    (``misc.py``): precision and recall averaged over the dataset, then ``maxF = max_t 1.3 P R / (0.3 P + R)``.

    The per-image values (``_exact``) are summed into one float64 vector on ``device`` (which also computes the
    histograms), all-reduced by ``compute`` and :meth:`curves`: N processes give bit for bit the numbers of one.
    ``per_image=True`` also keeps each image's own scores for :meth:`per_image_scores` (``maxF`` / ``maxE``: of
    its own curves; r3net ``maxF``: of its own precision and recall); the data set's value is the mean of the
    images' for all but ``maxF`` and ``maxE``.
    """

    _state_dict_all_req_keys = ("_sums",)
    #: maps whose histogram statistics wait to be computed in one batch (a few MB of counts)
    _PENDING_MAPS = 256

    def __init__(
        self,
        output_transform: Callable = lambda x: x,
        device: str | torch.device = "cpu",
        protocol: str = "standard",
        per_image: bool = False,
    ) -> None:
        if protocol not in ("standard", "r3net"):
            raise ValueError(f"protocol must be 'standard' or 'r3net', got {protocol!r}")
        self.protocol, self.per_image = protocol, per_image
        super().__init__(output_transform=output_transform, device=device)

    @reinit__is_reduced
    def reset(self) -> None:
        self._sums = torch.zeros(sum(_SLOTS.values()), dtype=torch.float64, device=self._device)
        # per-map histogram statistics not yet folded into the sums (see _flush)
        self._pending: list[histogram.MapStats] = []
        # per_image: the names in update order, and per metric the values' chunks in that order
        self._names: list[str] = []
        self._columns: dict[str, list[torch.Tensor]] = {key: [] for key in METRIC_KEYS}

    @reinit__is_reduced
    def update(self, output: tuple[Maps, Maps] | tuple[Maps, Maps, Sequence[str]]) -> None:
        preds = [_to_uint8_pred(p.detach()).to(self._device) for p in _as_list(output[0])]
        gts = [_check_gt(g.detach()).to(self._device) for g in _as_list(output[1])]
        if len(preds) != len(gts):
            raise ValueError(f"got {len(preds)} predictions for {len(gts)} ground truths")
        if self.per_image:
            names = list(output[2]) if len(output) > 2 else []
            if len(names) != len(preds):
                raise ValueError(f"per_image needs one name per map: got {len(names)} for {len(preds)} maps")
            self._names.extend(names)
        for p, g in zip(preds, gts):
            if p.shape != g.shape:
                raise ValueError(f"prediction shape {tuple(p.shape)} != ground truth shape {tuple(g.shape)}")
        for pred_u8, gt_u8 in _batches(preds, gts):
            self._update_batch(pred_u8, gt_u8)

    def _add(self, name: str, per_image: torch.Tensor) -> torch.Tensor:
        """Add the per-image values of slot ``name`` to the sums; returns them as summed (rounded)."""
        exact = _exact(per_image)
        self._sums[_OFFSETS[name]] += exact.sum(0).to(self._device)
        return exact

    def _record(self, **columns: torch.Tensor) -> None:
        """Keep per-image values (``per_image``), in the order the images came."""
        if self.per_image:
            for key, values in columns.items():
                # kept on the metric's device: one copy to the host per column, in per_image_scores
                self._columns[key].append(values.detach().to(torch.float64).flatten())

    def _update_batch(self, pred_u8: torch.Tensor, gt_u8: torch.Tensor) -> None:
        """Score what needs the pixels (weighted F; r3net's MAE and P/R), keep the histograms for ``_flush``."""
        gt = gt_u8 > 128
        stats = histogram.MapStats.of(pred_u8, gt)
        if self.protocol == "r3net":
            mae = self._add("mae", histogram.r3net_mae(pred_u8, gt_u8))
            precision, recall = histogram.r3net_precision_recall(pred_u8, gt_u8)
            precision, recall = self._add("precision", precision), self._add("recall", recall)
            self._record(mae=mae, maxF=_f_of(precision, recall).max(1).values)
        # weighted F on the CPU (maps elsewhere are copied: they are small)
        preds, masks, table = pred_u8.cpu().numpy(), gt.cpu().numpy(), stats.levels.cpu().numpy()
        w_f = [weighted_fmeasure(np.take(table[i], preds[i]), masks[i]) for i in range(len(preds))]
        self._record(wF=self._add("wF", torch.tensor(w_f, dtype=torch.float64)))
        self._add("images", torch.ones(len(gt), dtype=torch.float64))
        self._pending.append(stats)
        if sum(len(p.n_fg) for p in self._pending) >= self._PENDING_MAPS:
            self._flush()

    def _flush(self) -> None:
        """Add the scores that follow from the histograms of all pending maps, in one batched pass."""
        if not self._pending:
            return
        stats = histogram.MapStats.cat(self._pending)
        self._pending = []
        tp, fp = histogram.threshold_counts(stats)
        precision, recall, fmeasure = histogram.fmeasure_curves(tp, fp, stats.n_fg)
        fmeasure = self._add("fmeasure", fmeasure)
        if self.protocol == "standard":
            self._record(mae=self._add("mae", histogram.mae(stats)), maxF=fmeasure.max(1).values)
            self._add("precision", precision)
            self._add("recall", recall)
        adp_f, adp_e = histogram.adaptive_scores(stats)
        emeasure = self._add("emeasure", histogram.emeasure(tp, fp, stats.n_fg, stats.size))
        self._record(
            meanF=fmeasure.mean(1),
            adpF=self._add("adpF", adp_f),
            maxE=emeasure.max(1).values,
            meanE=emeasure.mean(1),
            adpE=self._add("adpE", adp_e),
            Sm=self._add("Sm", histogram.smeasure(stats)),
        )

    def per_image_scores(self) -> list[ImageScores]:
        """Every image's own scores, from every process (a collective), sorted by name; needs ``per_image``."""
        if not self.per_image:
            raise RuntimeError("per_image_scores needs SaliencyMetrics(per_image=True)")
        self._flush()
        columns = {key: torch.cat(chunks).tolist() if chunks else [] for key, chunks in self._columns.items()}
        mine = [(name, {key: columns[key][i] for key in METRIC_KEYS}) for i, name in enumerate(self._names)]
        # ignite's all_gather of any other object: one list of rows per rank
        gathered = cast(list[list[ImageScores]], idist.all_gather(mine)) if idist.get_world_size() > 1 else [mine]
        return sorted((row for part in gathered for row in part), key=lambda row: row[0])

    def state_dict(self) -> OrderedDict:
        """The sums, pending maps included (ignite's per-rank layout)."""
        self._flush()
        return super().state_dict()

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Replace everything, pending maps included, by the saved sums."""
        self._pending = []
        super().load_state_dict(state_dict)

    @sync_all_reduce("_sums")
    def _means(self) -> dict[str, torch.Tensor]:
        """Every slot divided by the number of images, over every process (one all-reduce)."""
        count = float(self._sums[_OFFSETS["images"]])
        if count == 0:
            raise NotComputableError("SaliencyMetrics must have at least one example before it can be computed.")
        means = {name: self._sums[sl] / count for name, sl in _OFFSETS.items()}
        # r3net: F of the dataset-mean precision / recall curves
        r3net = self.protocol == "r3net"
        means["f_curve"] = _f_of(means["precision"], means["recall"]) if r3net else means["fmeasure"]
        return means

    def compute(self) -> dict[str, float]:
        """The nine scores, averaged over every image seen by every process."""
        self._flush()
        m = self._means()
        m |= {"maxF": m["f_curve"].max(), "meanF": m["fmeasure"].mean()}
        m |= {"maxE": m["emeasure"].max(), "meanE": m["emeasure"].mean()}
        return {key: float(m[key]) for key in METRIC_KEYS}

    def curves(self) -> dict[str, torch.Tensor]:
        """Mean precision, recall and F-measure per threshold t = 0..255 (one collective): positive is
        ``floor(pred * 255) >= t`` (standard, pred normalised) or ``pred_u8 > t`` (r3net). ``"fmeasure"``
        is the curve whose maximum is ``maxF``: the mean F curve, or F of the mean P and R (r3net)."""
        self._flush()
        m = self._means()
        return {"precision": m["precision"], "recall": m["recall"], "fmeasure": m["f_curve"]}

    def pr_curve(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`curves`' mean precision and recall, 256 values each indexed by threshold t."""
        c = self.curves()
        return c["precision"], c["recall"]
