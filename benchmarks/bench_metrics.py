"""SaliencyMetrics versus PySODMetrics on the same maps: throughput on one CPU thread, and agreement.

Usage::

    python benchmarks/bench_metrics.py [--n-maps 40] [--size 300 400] [--seed 0] [--json FILE]

or, from Python, ``bench_metrics()`` which returns ``{"pysodmetrics_images_per_s",
"ours_images_per_s", "speedup", "max_abs_diff", ...}``.

Both sides score the same generated uint8 maps (smooth soft predictions around a salient blob;
ground-truth masks with one or two irregular objects, some of them tiny) in the same process,
each timed best-of-3 after a warm-up (the three variants alternate), with torch and numpy /
OpenBLAS limited to one thread (scipy.ndimage, which ours uses for the weighted F-measure, is
single-threaded).
PySODMetrics runs its five metric classes (``MAE``, ``Fmeasure``, ``Smeasure``, ``Emeasure``,
``WeightedFmeasure``) map by map, as its API does; ours runs one ``SaliencyMetrics`` whose
``update`` receives the maps as one batch (``ours_per_map_images_per_s`` reports one map per
``update`` as well).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before numpy / torch are imported: one thread for every pool
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import argparse
import contextlib
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ignite_r3net.metrics.keys import METRIC_KEYS
from ignite_r3net.metrics.saliency import SaliencyMetrics

__all__ = ["bench_metrics", "make_maps"]


def _smooth(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    coarse = torch.from_numpy(rng.random((1, 1, cells, cells)))
    return F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=True)[0, 0].numpy()


def _blob(rng: np.random.Generator, h: int, w: int, cy: float, cx: float, ry: float, rx: float) -> np.ndarray:
    """An ellipse with a wobbly outline (random low-frequency harmonics of the radius)."""
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    dy, dx = (yy - cy) / ry, (xx - cx) / rx
    theta = np.arctan2(dy, dx)
    wobble = 1 + sum(rng.uniform(-0.12, 0.12) * np.cos(k * theta + rng.uniform(0, 2 * np.pi)) for k in (2, 3, 5))
    return np.hypot(dy, dx) <= wobble


def make_maps(
    n_maps: int = 40, size: tuple[int, int] = (300, 400), seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_maps`` realistic (pred, gt) uint8 pairs: every 8th has a tiny object (a few pixels)."""
    rng = np.random.default_rng(seed)
    h, w = size
    maps = []
    for i in range(n_maps):
        gt = np.zeros((h, w), bool)
        if i % 8 == 7:  # tiny object(s)
            for _ in range(rng.integers(1, 3)):
                cy, cx = rng.uniform(0.1, 0.9) * h, rng.uniform(0.1, 0.9) * w
                gt |= _blob(rng, h, w, cy, cx, rng.uniform(1, 4), rng.uniform(1, 4))
        else:
            for _ in range(rng.integers(1, 3)):
                cy, cx = rng.uniform(0.25, 0.75) * h, rng.uniform(0.2, 0.8) * w
                ry, rx = rng.uniform(0.08, 0.3) * h, rng.uniform(0.06, 0.25) * w
                gt |= _blob(rng, h, w, cy, cx, ry, rx)
        # a soft prediction: the object blurred and shifted a little, plus smooth clutter
        soft = torch.from_numpy(gt.astype(np.float64))[None, None]
        k = int(rng.integers(3, 8)) * 2 + 1
        soft = F.avg_pool2d(F.pad(soft, (k // 2,) * 4, mode="replicate"), k, stride=1)[0, 0].numpy()
        soft = np.roll(soft, (int(rng.integers(-6, 7)), int(rng.integers(-6, 7))), (0, 1))
        pred = 0.75 * soft + 0.35 * _smooth(rng, h, w, int(rng.integers(3, 7))) ** 2
        pred = np.clip(pred * rng.uniform(0.7, 1.0), 0, 1)
        maps.append((np.round(pred * 255).astype(np.uint8), gt.astype(np.uint8) * 255))
    return maps


def _pysod(maps) -> dict[str, float]:
    import py_sod_metrics as psm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Fmeasure's deprecation warning
        mae, fm, sm, em, wfm = psm.MAE(), psm.Fmeasure(), psm.Smeasure(), psm.Emeasure(), psm.WeightedFmeasure()
        for pred, gt in maps:
            for m in (mae, fm, sm, em, wfm):
                m.step(pred=pred, gt=gt)
        f, e = fm.get_results(), em.get_results()
    return {
        "mae": float(mae.get_results()["mae"]),
        "maxF": float(f["fm"]["curve"].max()),
        "meanF": float(f["fm"]["curve"].mean()),
        "adpF": float(f["fm"]["adp"]),
        "Sm": float(sm.get_results()["sm"]),
        "maxE": float(e["em"]["curve"].max()),
        "meanE": float(e["em"]["curve"].mean()),
        "adpE": float(e["em"]["adp"]),
        "wF": float(wfm.get_results()["wfm"]),
    }


def _ours(preds: list[torch.Tensor], gts: list[torch.Tensor], per_map: bool = False) -> dict[str, float]:
    metric = SaliencyMetrics()
    if per_map:
        for p, g in zip(preds, gts):
            metric.update((p, g))
    else:
        metric.update((preds, gts))
    return metric.compute()


def _best_of(fns: dict[str, Callable[[], Any]], repeats: int = 3) -> dict[str, tuple[float, Any]]:
    """Each function's best time and its result: one warm-up each, then ``repeats`` rounds that
    alternate the functions (ABCABC...), so that a busy spell on a shared machine hits all of them."""
    out = {name: fn() for name, fn in fns.items()}  # warm-up
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: (best[name], out[name]) for name in fns}


@contextlib.contextmanager
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # env vars (set when run as a script) are all we have
            limits = contextlib.nullcontext()
        else:
            limits = threadpool_limits(limits=1)
        with limits:
            yield
    finally:
        torch.set_num_threads(old)


def bench_metrics(n_maps: int = 40, size=(300, 400), seed: int = 0) -> dict:
    """Time PySODMetrics and SaliencyMetrics on the same ``n_maps`` maps of ``size`` (H, W),
    one CPU thread each, best of 3 after a warm-up; check they agree.

    Returns images/s of both, ``speedup`` (ours / PySODMetrics), ``max_abs_diff`` over the nine
    scores, the scores themselves and ours with one map per ``update``."""
    try:
        import py_sod_metrics  # noqa: F401
    except ImportError as e:
        raise RuntimeError("bench_metrics compares against PySODMetrics: pip install pysodmetrics") from e
    maps = make_maps(n_maps, tuple(size), seed)
    preds = [torch.from_numpy(p) for p, _ in maps]
    gts = [torch.from_numpy(g) for _, g in maps]
    with _one_thread():
        timed = _best_of(
            {
                "pysodmetrics": lambda: _pysod(maps),
                "ours": lambda: _ours(preds, gts),
                "ours_per_map": lambda: _ours(preds, gts, per_map=True),
            }
        )
    (t_ref, ref), (t_ours, got), (t_single, got_single) = timed.values()
    diff = max(abs(got[k] - ref[k]) for k in METRIC_KEYS)
    diff_single = max(abs(got_single[k] - ref[k]) for k in METRIC_KEYS)
    if not diff <= 1e-6 or not diff_single <= 1e-6:
        raise AssertionError(f"SaliencyMetrics disagrees with PySODMetrics: {got} vs {ref}")
    return {
        "pysodmetrics_images_per_s": n_maps / t_ref,
        "ours_images_per_s": n_maps / t_ours,
        "speedup": t_ref / t_ours,
        "max_abs_diff": diff,
        "ours_per_map_images_per_s": n_maps / t_single,
        "speedup_per_map": t_ref / t_single,
        "max_abs_diff_per_map": diff_single,
        "n_maps": n_maps,
        "size": list(size),
        "threads": 1,
        "pysodmetrics": ref,
        "ours": got,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-maps", type=int, default=40)
    parser.add_argument("--size", type=int, nargs=2, default=(300, 400), metavar=("H", "W"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the result dict to this file")
    args = parser.parse_args(argv)
    res = bench_metrics(args.n_maps, tuple(args.size), args.seed)
    print(
        f"metrics {args.n_maps} maps {args.size[0]}x{args.size[1]}, 1 thread: "
        f"PySODMetrics {res['pysodmetrics_images_per_s']:.1f} img/s, "
        f"ours {res['ours_images_per_s']:.1f} img/s batched ({res['speedup']:.2f}x), "
        f"{res['ours_per_map_images_per_s']:.1f} img/s one map per update ({res['speedup_per_map']:.2f}x), "
        f"max |diff| {res['max_abs_diff']:.2e}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
