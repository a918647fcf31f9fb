"""SaliencyMetrics against PySODMetrics (the reference implementation) and by hand."""

import math
import warnings

import numpy as np
import py_sod_metrics
import pytest
import torch
from ignite.exceptions import NotComputableError

from ignite_r3net.metrics.keys import METRIC_KEYS
from ignite_r3net.metrics.saliency import SaliencyMetrics, weighted_fmeasure

# Per-image values are rounded to multiples of 2**-32 (2.3e-10) so that sums over images are exact
# in any order: ours and PySODMetrics' differ by at most about 1.2e-10 on every metric.
AGREEMENT = 1e-9


def _smooth(rng, h, w, cells=5):
    """Random smooth map in [0, 1]: bilinear upsampling of a coarse random grid."""
    coarse = torch.from_numpy(rng.random((1, 1, cells, cells)))
    return torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=True)[0, 0].numpy()


def _u8(x):
    return np.clip(np.round(x * 255), 0, 255).astype(np.uint8)


def _blob(h, w, cy, cx, r):
    yy, xx = np.mgrid[:h, :w]
    return (((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r).astype(np.uint8) * 255


# a full gt but for its bottom-right corner: constant over three S-measure quadrants
_CONSTANT_QUADRANT_GT = np.full((30, 12), 255, np.uint8)
_CONSTANT_QUADRANT_GT[25:, 8:] = 0


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
    # constant prediction over constant-gt quadrants whose numpy mean rounds back to the value
    # (where it does not, see test_constant_quadrant_scores_its_exact_value)
    cases.append((np.full((30, 12), 128, np.uint8), _CONSTANT_QUADRANT_GT))
    # a small range of values: the min-max normalisation stretches it
    cases.append((_u8(0.3 + 0.1 * _smooth(rng, h, w)), obj))
    return cases


def reference(cases, smeasure=None):
    """PySODMetrics on the same maps, as the keys of SaliencyMetrics (and its P / R / F curves, from
    threshold 255 down to 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Fmeasure's deprecation warning
        mae, fm = py_sod_metrics.MAE(), py_sod_metrics.Fmeasure()
        sm = (smeasure or py_sod_metrics.Smeasure)()
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
    }, {**f["pr"], "f": f["fm"]["curve"]}


def ours(cases, **kw):
    metric = SaliencyMetrics(**kw)
    for pred, gt in cases:
        metric.update(([torch.from_numpy(pred)], [torch.from_numpy(gt)]))
    return metric


def assert_close(got, want, context=""):
    assert set(got) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        assert abs(got[key] - want[key]) <= AGREEMENT, (
            f"{context}{key}: ours {got[key]!r} vs PySODMetrics {want[key]!r}"
        )


CASES = make_cases()


def test_agrees_with_pysodmetrics_over_the_set():
    metric = ours(CASES)
    want, curves = reference(CASES)
    assert_close(metric.compute(), want)
    got = metric.curves()
    assert set(got) == {"precision", "recall", "fmeasure"}
    # PySODMetrics orders its curves from threshold 255 down to 0
    for key, theirs in (("precision", "p"), ("recall", "r"), ("fmeasure", "f")):
        np.testing.assert_allclose(got[key].numpy(), curves[theirs][::-1], atol=1e-9, err_msg=key)
    precision, recall = metric.pr_curve()
    assert torch.equal(precision, got["precision"]) and torch.equal(recall, got["recall"])


@pytest.mark.parametrize("index", range(len(CASES)))
def test_agrees_with_pysodmetrics_per_image(index):
    case = [CASES[index]]
    assert_close(ours(case).compute(), reference(case)[0], context=f"case {index}: ")


def test_per_image_scores_are_each_image_alone_and_average_to_the_set():
    """Each row equals PySODMetrics on that image alone; the set's score is the mean of a column for
    every metric but maxF and maxE (maxima of the mean curves)."""
    names = [f"img{i:02d}" for i in range(len(CASES))]
    metric = SaliencyMetrics(per_image=True)
    for i in reversed(range(len(CASES))):  # out of name order: rows come back sorted
        pred, gt = CASES[i]
        metric.update(([torch.from_numpy(pred)], [torch.from_numpy(gt)], [names[i]]))
    rows = metric.per_image_scores()
    assert [name for name, _ in rows] == names
    for name, scores in rows:
        assert_close(scores, reference([CASES[int(name[3:])]])[0], context=f"{name}: ")
    totals = metric.compute()
    for key in ("mae", "meanF", "adpF", "Sm", "meanE", "adpE", "wF"):
        assert np.mean([scores[key] for _, scores in rows]) == pytest.approx(totals[key], abs=1e-12), key
    for key in ("maxF", "maxE"):  # a mean of maxima is at least the maximum of the mean curve
        assert np.mean([scores[key] for _, scores in rows]) >= totals[key]


def test_per_image_scores_of_two_ranks_are_gathered(monkeypatch):
    import ignite.distributed as idist

    def scored(indices):
        metric = SaliencyMetrics(per_image=True)
        batch = [CASES[i] for i in indices if CASES[i][0].shape == CASES[indices[0]][0].shape]
        metric.update(
            (
                torch.stack([torch.from_numpy(p) for p, _ in batch]),  # one (N, H, W) batch
                torch.stack([torch.from_numpy(g) for _, g in batch]),
                [f"n{i:02d}" for i in indices[: len(batch)]],
            )
        )
        return metric

    rank0, rank1 = scored(list(range(0, 10, 2))), scored(list(range(1, 10, 2)))
    theirs = rank1.per_image_scores()
    monkeypatch.setattr(idist, "get_world_size", lambda: 2)
    monkeypatch.setattr(idist, "all_gather", lambda mine: [mine, theirs])
    rows = rank0.per_image_scores()
    assert [name for name, _ in rows] == [f"n{i:02d}" for i in range(10)]
    with pytest.raises(ValueError, match="one name per map"):
        rank0.update(([torch.from_numpy(CASES[0][0])], [torch.from_numpy(CASES[0][1])]))
    with pytest.raises(RuntimeError, match="per_image=True"):
        SaliencyMetrics().per_image_scores()


class _ExactConstantSsim(py_sod_metrics.Smeasure):
    """PySODMetrics' S-measure with ssim's alpha = beta = 0 branch taken wherever pred and gt are both
    constant over the quadrant (instead of wherever numpy's mean happens to round back)."""

    def ssim(self, pred, gt):
        if pred.size and pred.min() == pred.max() and gt.min() == gt.max():
            return 1
        return super().ssim(pred, gt)


def test_constant_quadrant_scores_its_exact_value():
    """The documented deviation (metrics/histogram.py, smeasure): pred and gt are constant over three of this
    map's 15x6 quadrants, and numpy's mean of 249/255 over such a slice does not round back to
    249/255, so PySODMetrics scores each of them 0 where the exact value is 1."""
    case = [(np.full((30, 12), 249, np.uint8), _CONSTANT_QUADRANT_GT)]
    got = ours(case).compute()
    plain, exact = reference(case)[0], reference(case, smeasure=_ExactConstantSsim)[0]
    # three quadrants of weight 1/4 each, in the region term of weight 1/2
    assert got["Sm"] - plain["Sm"] == pytest.approx(0.5 * 3 / 4, abs=1e-9)
    assert_close(got, exact)


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
    assert all(abs(got[k] - v) <= AGREEMENT for k, v in want_rest.items())


def _weighted_f_cases():
    """(pred, gt) pairs for the weighted F-measure's bounding-box restriction."""
    rng = np.random.default_rng(11)
    h, w = 29, 41
    masks = []
    for step_r, step_c in ((4, 4), (3, 5), (6, 2)):  # lattices: many equidistant nearest pixels
        m = np.zeros((h, w), bool)
        m[2::step_r, 3::step_c] = True
        masks.append(m)
    m = np.zeros((h, w), bool)
    m[10, 10] = m[10, 16] = m[16, 10] = m[16, 16] = True  # ties at the centre and the edges' midpoints
    masks.append(m)
    for r, c in ((14, 20), (0, 0), (h - 1, w - 1), (0, 25), (17, w - 1)):  # one pixel: inside, corners, edges
        m = np.zeros((h, w), bool)
        m[r, c] = True
        masks.append(m)
    m = np.zeros((h, w), bool)
    m[: h // 2, w // 3 :] = True  # touches the top and right borders
    masks.append(m)
    m = np.zeros((h, w), bool)
    m[3:5, 2:6] = m[22:27, 30:38] = True  # two far-apart objects: the box spans both
    masks.append(m)
    m = np.zeros((h, w), bool)
    m[:, 20] = True  # a line from border to border
    masks.append(m)
    masks += [rng.random((h, w)) < p for p in (0.01, 0.1, 0.5)]
    masks.append(np.ones((h, w), bool))  # all foreground
    cases = []
    for m in masks:
        gt = m.astype(np.uint8) * 255
        cases.append((_u8(_smooth(rng, h, w)), gt))
        cases.append((rng.integers(0, 256, (h, w), dtype=np.uint8), gt))  # errors differ between ties
    return cases


def test_weighted_fmeasure_on_the_foreground_box_equals_the_full_map():
    """Our weighted F-measure works on the foreground's bounding box (grown by 3) but for the distance
    transform: it gives PySODMetrics' full-map numbers up to float64 summation order."""
    for i, (pred, gt) in enumerate(_weighted_f_cases()):
        p = pred / 255
        if p.max() != p.min():
            p = (p - p.min()) / (p.max() - p.min())
        want = py_sod_metrics.WeightedFmeasure().cal_wfm(p, gt > 128)
        assert weighted_fmeasure(p, gt > 128) == pytest.approx(want, abs=1e-12), i
    assert weighted_fmeasure(np.full((5, 7), 0.5), np.zeros((5, 7), bool)) == 0.0  # empty gt, as PySODMetrics


def test_two_processes_equal_one_bit_for_bit(monkeypatch):
    """Maps split across two metric instances (batched on one, one by one on the other) whose sums
    are all-reduced give bit for bit the numbers of one instance."""
    import ignite.distributed as idist

    one = ours(CASES)
    want, want_curves = one.compute(), one.curves()
    rank0 = SaliencyMetrics()
    rank0.update(([torch.from_numpy(p) for p, _ in CASES[1::2]], [torch.from_numpy(g) for _, g in CASES[1::2]]))
    rank1 = ours(CASES[0::2])
    rank1.state_dict()  # folds its pending maps in
    calls = []

    def all_reduce(tensor, op="SUM", group=None):
        calls.append(op)
        return tensor + rank1._sums

    monkeypatch.setattr(idist, "get_world_size", lambda: 2)
    monkeypatch.setattr(idist, "all_reduce", all_reduce)
    assert rank0.compute() == want
    got_curves = rank0.curves()
    assert len(calls) == 2  # one collective for compute, one for curves
    assert all(torch.equal(got_curves[k], want_curves[k]) for k in want_curves)


def test_pending_maps_are_folded_in_before_compute_state_dict_and_flush_limit(monkeypatch):
    """Histogram statistics are computed in batches: results must not depend on when that happens,
    and a saved state must include maps not yet folded in."""
    same = [c for c in CASES if c[0].shape == (37, 53)]
    want = ours(same).compute()
    monkeypatch.setattr(SaliencyMetrics, "_PENDING_MAPS", 3)  # flushes in the middle of the updates
    assert ours(same).compute() == want
    monkeypatch.setattr(SaliencyMetrics, "_PENDING_MAPS", 10**6)
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
    assert single.compute() == batched.compute()  # exact: per-image values are summed exactly
    # a mixed-size list is grouped by size and gives the same numbers as well
    mixed = SaliencyMetrics()
    mixed.update(([torch.from_numpy(p) for p, _ in CASES], [torch.from_numpy(g) for _, g in CASES]))
    assert ours(CASES).compute() == mixed.compute()


def test_float_predictions_score_as_their_saved_uint8_maps():
    pred, gt = CASES[-1]
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
    exact = 1e-9  # per-image values are rounded to multiples of 2**-32

    mae1 = (0 + 100 / 255 + 0 + 0) / 4  # no min-max normalisation, soft gt
    mae2 = (0 + 50 / 255 + 0 + 0) / 4
    assert got["mae"] == pytest.approx((mae1 + mae2) / 2, abs=exact)

    eps = 1e-4

    def pr(tp, p, t):
        return (tp + eps) / (p + eps), (tp + eps) / (t + eps)

    # positives are pred > t. Image 1: t < 100: {255,100,100} tp=2 p=3; 100 <= t < 255: {255} tp=1 p=1;
    # t = 255: none. Image 2: t < 50: tp=2 p=3; 50 <= t < 255: tp=2 p=2; t = 255: none.
    def curve(t):
        a = pr(2, 3, 2) if t < 100 else pr(1, 1, 2) if t < 255 else pr(0, 0, 2)
        b = pr(2, 3, 2) if t < 50 else pr(2, 2, 2) if t < 255 else pr(0, 0, 2)
        return (a[0] + b[0]) / 2, (a[1] + b[1]) / 2

    f_curve = [1.3 * p * r / (0.3 * p + r) for p, r in map(curve, range(256))]
    assert got["maxF"] == pytest.approx(max(f_curve), abs=exact)
    curves = metric.curves()
    assert curves["precision"][150].item() == pytest.approx(curve(150)[0], abs=exact)
    assert curves["recall"][150].item() == pytest.approx(curve(150)[1], abs=exact)
    np.testing.assert_allclose(curves["fmeasure"].numpy(), f_curve, atol=exact)
    # per image: its own MAE, and max F of its own precision and recall
    per_image = SaliencyMetrics(protocol="r3net", per_image=True)
    for name, (p, g) in (("b", (pred2, gt2)), ("a", (pred, gt))):
        per_image.update(([torch.from_numpy(p)], [torch.from_numpy(g)], [name]))
    (_, a), (_, b) = per_image.per_image_scores()
    assert a["mae"] == pytest.approx(mae1, abs=exact) and b["mae"] == pytest.approx(mae2, abs=exact)

    def f_max(counts):  # counts(t) -> (tp, p, t)
        return max(1.3 * p * r / (0.3 * p + r) for p, r in (pr(*counts(t)) for t in range(256)))

    assert a["maxF"] == pytest.approx(f_max(lambda t: (2, 3, 2) if t < 100 else (1, 1, 2) if t < 255 else (0, 0, 2)))
    assert b["maxF"] == pytest.approx(f_max(lambda t: (2, 3, 2) if t < 50 else (2, 2, 2) if t < 255 else (0, 0, 2)))
    # the other keys keep their standard definitions
    standard = ours([(pred, gt), (pred2, gt2)]).compute()
    for key in ("meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF"):
        assert got[key] == standard[key]


def test_reset_and_not_computable():
    metric = SaliencyMetrics()
    for method in (metric.compute, metric.pr_curve, metric.curves):
        with pytest.raises(NotComputableError):
            method()
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
