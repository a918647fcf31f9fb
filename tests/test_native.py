"""The optional C kernels (ignite_r3net._native) against the torch / numpy paths they replace.

The distance transform is checked against scipy in test_metrics.py; here: the rotation +
normalisation kernel, the crop kernel, and the reuse of output buffers.
"""

import numpy as np
import pytest
import torch

from ignite_r3net import native
from ignite_r3net.data.transforms import JointCropFlip, _affine_stats, device_augment



def test_kernels_are_built() -> None:
    # setup.py compiles them where a C compiler is present (CI has one); without them every caller
    # still works, slower, so a silent build failure must show up here
    assert native.available(), "ignite_r3net._native is not built: pip install -e . needs a C compiler"


def _nearest_reference(masks, angles):
    """Nearest-neighbour rotation of uint8 masks in float64 (value / 255, zeros outside), and
    where its rounding is decided by more than 1e-3 of a pixel."""
    n, _, h, w = masks.shape
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((n, 1, h, w))
    decided = np.zeros((n, 1, h, w), bool)
    for i, angle in enumerate(angles.tolist()):
        t = -np.deg2rad(angle)
        xx, yy = x + 0.5 - w / 2, y + 0.5 - h / 2
        ix = np.cos(t) * xx + np.sin(t) * yy + w / 2 - 0.5
        iy = -np.sin(t) * xx + np.cos(t) * yy + h / 2 - 0.5
        mx, my = np.rint(ix).astype(int), np.rint(iy).astype(int)
        inside = (mx >= 0) & (mx < w) & (my >= 0) & (my < h)
        src = masks[i, 0].numpy()
        out[i, 0][inside] = src[my[inside], mx[inside]] / 255
        decided[i, 0] = (np.abs(np.abs(ix - np.floor(ix)) - 0.5) > 1e-3) & (np.abs(np.abs(iy - np.floor(iy)) - 0.5) > 1e-3)
    return torch.from_numpy(out).float(), torch.from_numpy(decided)


def _torch_path(monkeypatch, images, masks, angles, **kw):
    with monkeypatch.context() as m:
        m.setenv("IGNITE_R3NET_NATIVE", "0")
        return device_augment(images, masks, angles, **kw)


# angles inside the vector code's window (|a| < 16), beyond it (scalar code) and past 90 degrees
ANGLES = [0.0, 0.37, -7.3, 9.99, -10.0, 15.5, 25.0, -45.0, 120.0]


@pytest.mark.parametrize("size", [(300, 300), (37, 53), (12, 9), (64, 17)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_rotation_equals_the_grid_sample_path(monkeypatch, size, channels_last) -> None:
    h, w = size
    g = torch.Generator().manual_seed(h * 1000 + w)
    n = len(ANGLES)
    images = torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=g)
    if channels_last:  # how the decoders store pixels
        images = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    masks = (torch.rand((n, 1, h, w), generator=g) > 0.5).to(torch.uint8) * 255
    masks[0, 0, : h // 2] = 128  # a soft value
    angles = torch.tensor(ANGLES)
    want_x, want_y = _torch_path(monkeypatch, images, masks, angles)
    got_x, got_y = device_augment(images, masks, angles)
    assert got_x.shape == want_x.shape and got_x.is_contiguous() and got_y.is_contiguous()
    # horizontal weights in 1/16384 and a different summation order: far below one grey level
    # (1 / 255 on the 0..255 scale is ~0.017 after normalisation)
    assert (got_x - want_x).abs().max() < 1e-3
    # nearest sampling: the pixel the exact rotation rounds to, wherever it is not a near-tie
    # (there float32 rounding of the coordinates decides, in grid_sample as in the kernel)
    exact, decided = _nearest_reference(masks, angles)
    assert torch.equal(got_y[decided], exact[decided])
    assert (got_y != want_y).float().mean() <= 1e-3
    assert set(got_y.unique().tolist()) <= set((torch.tensor([0.0, 128.0, 255.0]) / 255).tolist())


def test_rotation_with_other_normalisation_and_channels(monkeypatch) -> None:
    images = torch.randint(0, 256, (3, 4, 40, 48), dtype=torch.uint8)
    masks = torch.randint(0, 256, (3, 2, 40, 48), dtype=torch.uint8)
    angles = torch.tensor([4.0, -12.0, 33.0])
    mean, std = (0.1, 0.2, 0.3, 0.4), (0.5, 0.6, 0.7, 0.8)
    want_x, want_y = _torch_path(monkeypatch, images, masks, angles, mean=mean, std=std)
    got_x, got_y = device_augment(images, masks, angles, mean=mean, std=std)
    assert (got_x - want_x).abs().max() < 1e-3
    assert (got_y != want_y).float().mean() <= 1e-3


@pytest.mark.parametrize("shape", [(3, 330, 349), (3, 40, 37), (1, 20, 20), (4, 33, 50)])
@pytest.mark.parametrize("flip", [False, True])
def test_crop_planar_equals_slicing(shape, flip) -> None:
    c, h, w = shape
    image = torch.randint(0, 256, (h, w, c), dtype=torch.uint8).permute(2, 0, 1)  # channels last
    for y, x, hh, ww in [(0, 0, h, w), (3, 5, h - 3, w - 6), (1, 2, min(17, h - 1), min(19, w - 2))]:
        want = image[:, y : y + hh, x : x + ww]
        want = (want.flip(-1) if flip else want).contiguous()
        got = native.crop_planar(image, y, x, hh, ww, flip)
        assert got.is_contiguous() and torch.equal(got, want), (y, x, hh, ww)


def test_crop_flip_gives_the_same_sample_with_and_without_kernels(monkeypatch) -> None:
    image = torch.randint(0, 256, (90, 101, 3), dtype=torch.uint8).permute(2, 0, 1)
    mask = torch.randint(0, 256, (1, 90, 101), dtype=torch.uint8)
    for seed in range(6):
        got = JointCropFlip(64)(image, mask, torch.Generator().manual_seed(seed))
        with monkeypatch.context() as m:
            m.setenv("IGNITE_R3NET_NATIVE", "0")
            want = JointCropFlip(64)(image, mask, torch.Generator().manual_seed(seed))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0].is_contiguous()


def test_output_buffers_are_reused_only_when_nothing_holds_them() -> None:
    scale, shift = _affine_stats((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), torch.device("cpu"))
    images = torch.randint(0, 256, (2, 3, 24, 24), dtype=torch.uint8)
    masks = torch.randint(0, 256, (2, 1, 24, 24), dtype=torch.uint8)
    angles = torch.tensor([3.0, -4.0])

    def run():
        return native.rotate_normalize(images, masks, angles, scale, shift)

    first = run()[0]
    expected = first.clone()
    second = run()[0]
    assert first.data_ptr() != second.data_ptr()  # both alive
    view = first[:, :1]
    del first
    assert run()[0].data_ptr() != view.data_ptr()  # a view keeps the buffer
    del view
    held = run()[0]
    loss = torch.nn.functional.conv2d(held, torch.ones(1, 3, 3, 3, requires_grad=True)).sum()
    ptr = held.data_ptr()
    del held
    fresh = run()[0]
    assert fresh.data_ptr() != ptr  # autograd's saved input keeps it
    loss.backward()
    assert torch.equal(fresh, expected)  # and nothing that was handed out was overwritten


def test_decay_sum_equals_numpy_and_refuses_a_short_table() -> None:
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 256, (37, 53), dtype=np.uint8)
    d2 = rng.integers(0, 500, (37, 53)).astype(np.int32)
    lut = rng.random(256)
    table = rng.random(500)
    want = float(np.dot(lut[pred.ravel()], table[d2.ravel()]))
    assert native.decay_sum(pred, d2, lut, table) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="outside the table"):
        native.decay_sum(pred, d2, lut, table[:499])


def test_a_free_output_buffer_is_handed_out_again() -> None:
    assert native._OUTPUTS.enabled, "CPython reports an unshared array's references as expected"
    scale, shift = _affine_stats((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), torch.device("cpu"))
    images = torch.randint(0, 256, (2, 3, 20, 28), dtype=torch.uint8)
    masks = torch.randint(0, 256, (2, 1, 20, 28), dtype=torch.uint8)
    angles = torch.tensor([1.0, -2.0])
    ptr = native.rotate_normalize(images, masks, angles, scale, shift)[0].data_ptr()
    assert native.rotate_normalize(images, masks, angles, scale, shift)[0].data_ptr() == ptr


def test_distance_transform_refuses_maps_whose_squared_distances_overflow_int32() -> None:
    native.check_int32_distances(32768, 32768)  # the largest square map that fits
    with pytest.raises(ValueError, match="46342 x 1 map is too large"):
        native.edt_sq(np.zeros((46342, 1), dtype=np.uint8))
