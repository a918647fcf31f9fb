"""SaliencyMetrics against PySODMetrics (the reference implementation) and by hand."""

import math
import warnings

import numpy as np
import pytest
import torch
from ignite.exceptions import NotComputableError

from ignite_r3net.metrics.interim import METRIC_KEYS, SaliencyMetrics

py_sod_metrics = pytest.importorskip("py_sod_metrics")
ndimage = pytest.importorskip("scipy.ndimage")

TIGHT = ("mae", "maxF", "meanF", "adpF")  # 1e-6; the rest 1e-4


def _smooth(rng, h, w, cells=5):
    """Random smooth map in [0, 1]: bilinear upsampling of a coarse random grid."""
    coarse = torch.from_numpy(rng.random((1, 1, cells, cells)))
    return torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=True)[0, 0].numpy()


def _u8(x):
    return np.clip(np.round(x * 255), 0, 255).astype(np.uint8)


def _blob(h, w, cy, cx, r):
    yy, xx = np.mgrid[:h, :w]
    return (((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r).astype(np.uint8) * 255


def make_cases(seed=0):
    """~40 (pred, gt) uint8 pairs covering the edge cases and ordinary maps."""
    rng = np.random.default_rng(seed)
    cases = []
    h, w = 37, 53
    obj = _blob(h, w, 15, 20, 9)
    smooth = _u8(_smooth(rng, h, w))
    cases += [
        (smooth, np.zeros((h, w), np.uint8)),  # empty gt
        (smooth, np.full((h, w), 255, np.uint8)),  # full gt
        (np.zeros((h, w), np.uint8), np.zeros((h, w), np.uint8)),
        (np.full((h, w), 255, np.uint8), np.full((h, w), 255, np.uint8)),
        (np.zeros((h, w), np.uint8), obj),  # constant predictions
        (np.full((h, w), 255, np.uint8), obj),
        (np.full((h, w), 128, np.uint8), obj),
        (np.full((h, w), 77, np.uint8), obj),
        (obj.copy(), obj),  # perfect
        (255 - obj, obj),  # inverted
    ]
    # tiny objects of 1-3 px, away from the last row / column (see the NaN test below)
    for pts in ([(10, 10)], [(5, 30), (5, 31)], [(20, 7), (21, 7), (21, 8)], [(0, 0)]):
        gt = np.zeros((h, w), np.uint8)
        for y, x in pts:
            gt[y, x] = 255
        cases.append((_u8(_smooth(rng, h, w)), gt))
        near = np.zeros((h, w), np.uint8)
        for y, x in pts:
            near[y, min(x + 1, w - 2)] = 200
        cases.append((near, gt))
    # ordinary maps at several sizes (odd ones included)
    for hh, ww in ((37, 53), (48, 64), (61, 45), (80, 100)):
        for _ in range(3):
            gt = (_smooth(rng, hh, ww, 4) > 0.6).astype(np.uint8) * 255
            if not gt.any() or gt.all():
                gt = _blob(hh, ww, hh // 2, ww // 3, min(hh, ww) // 4)
            noisy = 0.6 * gt / 255 + 0.4 * _smooth(rng, hh, ww, 7)
            cases.append((_u8(noisy), gt))
        # binary prediction, soft gt, random-noise prediction
        gt = _blob(hh, ww, hh // 3, ww // 2, min(hh, ww) // 3)
        cases.append(((_smooth(rng, hh, ww, 6) > 0.5).astype(np.uint8) * 255, gt))
        soft = _u8(_smooth(rng, hh, ww, 3))
        cases.append((_u8(_smooth(rng, hh, ww, 6)), soft))
        cases.append((rng.integers(0, 256, (hh, ww), dtype=np.uint8), gt))
    # constant prediction over a constant-gt quadrant: ssim's 0/0 branch hinges on numpy's
    # rounding of the quadrant mean (249/255 over a 15x6 slice of 30x12 does not round back)
    gt = np.full((30, 12), 255, np.uint8)
    gt[25:, 8:] = 0
    cases.append((np.full((30, 12), 249, np.uint8), gt))
    cases.append((np.full((30, 12), 128, np.uint8), gt))
    # a small range of values: the min-max normalisation stretches it
    cases.append((_u8(0.3 + 0.1 * _smooth(rng, h, w)), obj))
    return cases


def reference(cases):
    """PySODMetrics on the same maps, as the keys of SaliencyMetrics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Fmeasure's deprecation warning
        mae, fm, sm = py_sod_metrics.MAE(), py_sod_metrics.Fmeasure(), py_sod_metrics.Smeasure()
        em, wfm = py_sod_metrics.Emeasure(), py_sod_metrics.WeightedFmeasure()
        for pred, gt in cases:
            for m in (mae, fm, sm, em, wfm):
                m.step(pred=pred, gt=gt)
        f, e = fm.get_results(), em.get_results()
    return {
        "mae": mae.get_results()["mae"],
        "maxF": f["fm"]["curve"].max(),
        "meanF": f["fm"]["curve"].mean(),
        "adpF": f["fm"]["adp"],
        "Sm": sm.get_results()["sm"],
        "maxE": e["em"]["curve"].max(),
        "meanE": e["em"]["curve"].mean(),
        "adpE": e["em"]["adp"],
        "wF": wfm.get_results()["wfm"],
    }, f["pr"]


def ours(cases, **kw):
    metric = SaliencyMetrics(**kw)
    for pred, gt in cases:
        metric.update(([torch.from_numpy(pred)], [torch.from_numpy(gt)]))
    return metric


def assert_close(got, want, context=""):
    assert set(got) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        tol = 1e-6 if key in TIGHT else 1e-4
        assert abs(got[key] - want[key]) <= tol, f"{context}{key}: ours {got[key]!r} vs PySODMetrics {want[key]!r}"


CASES = make_cases()


@pytest.fixture(params=["numpy", "torch"])
def wf_path(request, monkeypatch):
    """The two ways the weighted F-measure is computed: CPU maps in numpy (the default) and the
    batched torch path that accelerators take (forced here on CPU tensors)."""
    from ignite_r3net.metrics import interim as M

    if request.param == "torch":
        monkeypatch.setattr(M, "_CPU_WF", False)
    return request.param


def test_agrees_with_pysodmetrics_over_the_set(wf_path):
    metric = ours(CASES)
    want, pr = reference(CASES)
    assert_close(metric.compute(), want)
    precision, recall = metric.pr_curve()
    # PySODMetrics orders its curves from threshold 255 down to 0
    np.testing.assert_allclose(precision.numpy(), pr["p"][::-1], atol=1e-12)
    np.testing.assert_allclose(recall.numpy(), pr["r"][::-1], atol=1e-12)


@pytest.mark.parametrize("index", range(len(CASES)))
def test_agrees_with_pysodmetrics_per_image(index):
    case = [CASES[index]]
    assert_close(ours(case).compute(), reference(case)[0], context=f"case {index}: ")


def test_weighted_fmeasure_paths_agree_per_image():
    """Per map, the numpy/C path and the torch path give the same weighted F-measure (1e-6:
    float64 versus float32 error maps); objects touching the border included."""
    from ignite_r3net.metrics import interim as M

    cases = list(CASES)
    rng = np.random.default_rng(5)
    for h, w in ((40, 60), (33, 21)):
        gt = np.zeros((h, w), np.uint8)
        gt[: h // 2, w // 3 :] = 255  # touches the top and right borders
        cases.append((_u8(_smooth(rng, h, w)), gt))
    for pred, gt in cases:
        p = torch.from_numpy(pred)[None]
        g = torch.from_numpy(gt)[None] > 128
        lut = M._lut(p)
        n_fg, cy, cx = M._centroid(g)
        hist = M._quadrant_histogram(p, g, cy, cx).double().sum(1)
        batched = float(M._weighted_fmeasure(p, g, lut, hist)[0])
        cpu = M._weighted_fmeasure_cpu(pred, gt > 128, lut[0].numpy(), hist[0].numpy())
        assert cpu == pytest.approx(batched, abs=1e-6)


def test_centroid_on_last_column_is_finite_where_pysodmetrics_gives_nan():
    gt = np.zeros((20, 30), np.uint8)
    gt[5:9, 29] = 255
    pred = np.zeros_like(gt)
    pred[4:10, 27:30] = 180
    got = ours([(pred, gt)]).compute()
    want = reference([(pred, gt)])[0]
    assert math.isnan(want["Sm"]) and math.isfinite(got["Sm"])
    # the region term of the empty quadrant has weight 0: with it dropped the scores agree
    want_rest = {k: v for k, v in want.items() if k != "Sm"}
    assert all(abs(got[k] - v) <= 1e-4 for k, v in want_rest.items())


def test_squared_distance_transform_matches_scipy_on_cpu_and_torch_paths():
    from ignite_r3net.metrics import interim as M

    rng = np.random.default_rng(2)
    batches = []
    for h, w in [(1, 1), (1, 7), (9, 1), (23, 31), (40, 17)]:
        for p in (0.002, 0.02, 0.2, 0.7, 1.0):
            batch = rng.random((3, h, w)) < p
            for m in batch:  # every map needs a feature pixel
                m[rng.integers(h), rng.integers(w)] = True
            batches.append(batch)
    grid = np.zeros((2, 21, 21), bool)
    grid[:, ::4, ::4] = True  # many exact ties between parabolas
    grid[1, 3, 5] = True
    batches.append(grid)
    for batch in batches:
        want = np.stack([ndimage.distance_transform_edt(~m) ** 2 for m in batch]).round()
        fg = torch.from_numpy(batch)
        np.testing.assert_array_equal(M._edt_sq(fg).numpy(), want)  # numpy path
        torch_path = M._row_transform(M._column_distance(fg), fg.any(1))
        np.testing.assert_array_equal(torch_path.numpy(), want)
        for i in range(len(batch)):  # one map at a time, as the CPU path calls it
            np.testing.assert_array_equal(M._edt_sq(fg[i : i + 1]).numpy(), want[i : i + 1])


def test_pending_maps_are_folded_in_before_compute_state_dict_and_flush_limit(monkeypatch):
    """Histogram statistics are computed in batches: results must not depend on when that happens,
    and a saved state must include maps not yet folded in."""
    from ignite_r3net.metrics import interim as M

    same = [c for c in CASES if c[0].shape == (37, 53)]
    want = ours(same).compute()
    monkeypatch.setattr(M, "_PENDING_MAPS", 3)  # flushes in the middle of the updates
    assert ours(same).compute() == want
    monkeypatch.setattr(M, "_PENDING_MAPS", 10**6)
    first = ours(same[:4])
    state = first.state_dict()
    resumed = SaliencyMetrics()
    resumed.update(([torch.from_numpy(same[-1][0])], [torch.from_numpy(same[-1][1])]))  # dropped by the load
    resumed.load_state_dict(state)
    for pred, gt in same[4:]:
        resumed.update(([torch.from_numpy(pred)], [torch.from_numpy(gt)]))
    assert resumed.compute() == want


def test_batched_update_equals_per_image_updates():
    same = [c for c in CASES if c[0].shape == (37, 53)]
    single = ours(same)
    batched = SaliencyMetrics()
    preds = torch.from_numpy(np.stack([p for p, _ in same]))
    gts = torch.from_numpy(np.stack([g for _, g in same]))
    batched.update((preds[:5], gts[:5]))
    batched.update((preds[5:], gts[5:]))
    a, b = single.compute(), batched.compute()
    for key in METRIC_KEYS:
        assert a[key] == b[key], key  # exact: per-image values are summed exactly (metrics._exact)
    # a mixed-size list is grouped by size and gives the same numbers as well
    mixed = SaliencyMetrics()
    mixed.update(([torch.from_numpy(p) for p, _ in CASES], [torch.from_numpy(g) for _, g in CASES]))
    c, d = ours(CASES).compute(), mixed.compute()
    for key in METRIC_KEYS:
        assert c[key] == d[key], key


def test_float_predictions_score_as_their_saved_uint8_maps():
    pred, gt = CASES[-3]
    as_float = SaliencyMetrics()
    as_float.update(([torch.from_numpy(pred).double() / 255], [torch.from_numpy(gt)]))
    assert as_float.compute() == ours([(pred, gt)]).compute()


def test_r3net_protocol_by_hand():
    # 1x4 maps. gt soft: [255, 200, 100, 0] -> hard (>0.5 of 255): [1, 1, 0, 0]
    pred = np.array([[255, 100, 100, 0]], np.uint8)
    gt = np.array([[255, 200, 100, 0]], np.uint8)
    # image 2: gt [0, 0, 255, 255] hard [0, 0, 1, 1], pred [0, 50, 255, 255]
    pred2 = np.array([[0, 50, 255, 255]], np.uint8)
    gt2 = np.array([[0, 0, 255, 255]], np.uint8)
    metric = ours([(pred, gt), (pred2, gt2)], protocol="r3net")
    got = metric.compute()

    mae1 = (0 + 100 / 255 + 0 + 0) / 4  # no min-max normalisation, soft gt
    mae2 = (0 + 50 / 255 + 0 + 0) / 4
    assert got["mae"] == pytest.approx(
        (mae1 + mae2) / 2, abs=1e-9
    )  # per-image values are rounded to 2**-32 (metrics._exact)

    eps = 1e-4

    def pr(tp, p, t):
        return (tp + eps) / (p + eps), (tp + eps) / (t + eps)

    # positives are pred > t. Image 1: t < 100: {255,100,100} tp=2 p=3; 100 <= t < 255: {255} tp=1 p=1;
    # t = 255: none. Image 2: t < 50: tp=2 p=3; 50 <= t < 255: tp=2 p=2; t = 255: none.
    def curve(t):
        a = pr(2, 3, 2) if t < 100 else pr(1, 1, 2) if t < 255 else pr(0, 0, 2)
        b = pr(2, 3, 2) if t < 50 else pr(2, 2, 2) if t < 255 else pr(0, 0, 2)
        return (a[0] + b[0]) / 2, (a[1] + b[1]) / 2

    best = max(1.3 * p * r / (0.3 * p + r) for p, r in map(curve, range(256)))
    assert got["maxF"] == pytest.approx(best, abs=1e-9)  # per-image values are rounded to 2**-32 (metrics._exact)
    precision, recall = metric.pr_curve()
    assert precision[150].item() == pytest.approx(
        curve(150)[0], abs=1e-9
    )  # per-image values are rounded to 2**-32 (metrics._exact)
    assert recall[150].item() == pytest.approx(
        curve(150)[1], abs=1e-9
    )  # per-image values are rounded to 2**-32 (metrics._exact)
    # the other keys keep their standard definitions
    standard = ours([(pred, gt), (pred2, gt2)]).compute()
    for key in ("meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF"):
        assert got[key] == standard[key]


def test_reset_and_not_computable():
    metric = SaliencyMetrics()
    with pytest.raises(NotComputableError):
        metric.compute()
    with pytest.raises(NotComputableError):
        metric.pr_curve()
    pred, gt = CASES[-1]
    metric.update((torch.from_numpy(pred), torch.from_numpy(gt)))
    first = metric.compute()
    metric.update((torch.from_numpy(CASES[0][0]), torch.from_numpy(CASES[0][1])))
    assert metric.compute() != first
    metric.reset()
    with pytest.raises(NotComputableError):
        metric.compute()
    metric.update((torch.from_numpy(pred), torch.from_numpy(gt)))
    assert metric.compute() == first


def test_bad_protocol_and_shapes():
    with pytest.raises(ValueError):
        SaliencyMetrics(protocol="matlab")
    with pytest.raises(ValueError):
        SaliencyMetrics().update((torch.zeros(4, 5, dtype=torch.uint8), torch.zeros(5, 4, dtype=torch.uint8)))
