"""Pair listing, header checks and decoding of awkward files."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile, ImageOps

from ignite_r3net.data.checks import assert_dataset_ok, check_dataset
from ignite_r3net.data.decode import load_image, load_mask
from ignite_r3net.data.folder import list_pairs
from ignite_r3net.errors import DataError


def _rgb(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Blocky content so lossy JPEG stays close to the source.
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    return np.kron(small, np.ones((8, 8, 1), np.uint8))[:h, :w]


def _mask(h: int = 24, w: int = 32) -> np.ndarray:
    m = np.zeros((h, w), np.uint8)
    m[h // 4 : 3 * h // 4, w // 4 : w // 2] = 255
    return m


def _save(path: Path, array: np.ndarray, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **kw)
    return path


def _flat_pair(folder: Path, stem: str, h: int = 24, w: int = 32) -> None:
    _save(folder / f"{stem}.jpg", _rgb(h, w), quality=95)
    _save(folder / f"{stem}.png", _mask(h, w))


# ------------------------------------------------------------------------------------------ listing


def test_list_pairs_flat_layout_sorted(tmp_path: Path) -> None:
    for stem in ["b", "a", "c"]:
        _flat_pair(tmp_path, stem)
    (tmp_path / "notes.txt").write_text("ignored")
    pairs = list_pairs(tmp_path)
    assert [(i.name, m.name) for i, m in pairs] == [("a.jpg", "a.png"), ("b.jpg", "b.png"), ("c.jpg", "c.png")]


@pytest.mark.parametrize(
    "image_dir,mask_dir",
    [("images", "masks"), ("Imgs", "GT"), ("DUTS-TR-Image", "DUTS-TR-Mask"), ("image", "mask"), ("img", "gt")],
)
def test_list_pairs_split_layout(tmp_path: Path, image_dir: str, mask_dir: str) -> None:
    for stem in ["x2", "x1"]:
        _save(tmp_path / image_dir / f"{stem}.jpg", _rgb())
        _save(tmp_path / mask_dir / f"{stem}.png", _mask())
    pairs = list_pairs(tmp_path)
    assert [p[0].parent.name for p in pairs] == [image_dir] * 2
    assert [p[1].parent.name for p in pairs] == [mask_dir] * 2
    assert [p[0].stem for p in pairs] == ["x1", "x2"]


def test_list_pairs_reports_every_unmatched_file(tmp_path: Path) -> None:
    _flat_pair(tmp_path, "ok")
    _save(tmp_path / "lonely1.jpg", _rgb())
    _save(tmp_path / "lonely2.jpg", _rgb())
    _save(tmp_path / "orphan.png", _mask())
    with pytest.raises(DataError) as err:
        list_pairs(tmp_path)
    message = str(err.value)
    for name in ["lonely1.jpg", "lonely2.jpg", "orphan.png"]:
        assert name in message
    assert len(err.value.problems) == 3


def test_list_pairs_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        list_pairs(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty"):
        list_pairs(tmp_path / "empty")


def test_non_ascii_names(tmp_path: Path) -> None:
    folder = tmp_path / "données"
    _flat_pair(folder, "狗 é ñ", 20, 28)
    pairs = list_pairs(folder)
    assert pairs[0][0].stem == "狗 é ñ"
    assert load_image(pairs[0][0]).shape == (3, 20, 28)
    assert load_mask(pairs[0][1]).shape == (1, 20, 28)
    assert check_dataset(folder) == []


# ------------------------------------------------------------------------------------------ checks


def _jpeg_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _png_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _bad_image_without_mask(d: Path) -> None:
    _save(d / "solo.jpg", _rgb())


def _bad_mask_without_image(d: Path) -> None:
    _save(d / "solo.png", _mask())


def _bad_size_mismatch(d: Path) -> None:
    _save(d / "solo.jpg", _rgb(24, 32))
    _save(d / "solo.png", _mask(24, 30))


def _bad_truncated_jpeg(d: Path) -> None:
    data = _jpeg_bytes(_rgb(64, 64))
    (d / "solo.jpg").write_bytes(data[: len(data) * 2 // 3])
    _save(d / "solo.png", _mask(64, 64))


def _bad_truncated_png(d: Path) -> None:
    _save(d / "solo.jpg", _rgb(64, 64))
    data = _png_bytes(np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8))
    (d / "solo.png").write_bytes(data[: len(data) // 2])


def _bad_not_an_image(d: Path) -> None:
    (d / "solo.jpg").write_text("this is not a picture")
    _save(d / "solo.png", _mask())


def _bad_empty_file(d: Path) -> None:
    (d / "solo.jpg").write_bytes(b"")
    _save(d / "solo.png", _mask())


@pytest.mark.parametrize(
    "make,expected",
    [
        (_bad_image_without_mask, "image without mask"),
        (_bad_mask_without_image, "mask without image"),
        (_bad_size_mismatch, "size mismatch"),
        (_bad_truncated_jpeg, "truncated"),
        (_bad_truncated_png, "truncated"),
        (_bad_not_an_image, "not an image"),
        (_bad_empty_file, "empty file"),
    ],
)
def test_check_dataset_finds_problem(tmp_path: Path, make, expected: str) -> None:
    _flat_pair(tmp_path, "good")
    make(tmp_path)
    problems = check_dataset(tmp_path)
    assert len(problems) == 1, problems
    assert expected in problems[0] and "solo" in problems[0]
    with pytest.raises(DataError, match="solo"):
        assert_dataset_ok(tmp_path)


def test_check_dataset_empty_folder(tmp_path: Path) -> None:
    problems = check_dataset(tmp_path)
    assert len(problems) == 1 and "empty" in problems[0]


def test_check_dataset_lists_all_problems_at_once(tmp_path: Path) -> None:
    _flat_pair(tmp_path, "good")
    _bad_size_mismatch(tmp_path)
    _save(tmp_path / "other.jpg", _rgb())
    (tmp_path / "junk.jpg").write_text("nope")
    _save(tmp_path / "junk.png", _mask())
    problems = check_dataset(tmp_path)
    assert len(problems) == 3
    with pytest.raises(DataError) as err:
        assert_dataset_ok(tmp_path)
    assert all(name in str(err.value) for name in ["solo", "other.jpg", "junk.jpg"])


def test_assert_dataset_ok_crop_larger_than_every_image(tmp_path: Path) -> None:
    _flat_pair(tmp_path, "a", 24, 32)
    _flat_pair(tmp_path, "b", 40, 20)
    assert_dataset_ok(tmp_path, min_size=24)  # "a" fits
    with pytest.raises(DataError, match=r"crop 33 is larger than every image .* \(largest is 20x40\)"):
        assert_dataset_ok(tmp_path, min_size=33)


def test_check_dataset_reads_headers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's check-data reads headers only (a data set of 10,000 pairs is checked in seconds):
    no image or mask is decoded, and the problems that need more than a header (a JPEG without its
    end marker, a PNG cut short) are still found."""
    for i in range(20):
        _flat_pair(tmp_path, f"{i:02d}", 24 + i, 32)
    _bad_truncated_jpeg(tmp_path)
    decoded = []

    def no_decoding(image: Image.Image) -> None:
        decoded.append(image.filename)
        raise AssertionError(f"decoded {image.filename}")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    problems = check_dataset(tmp_path)
    assert len(problems) == 1 and "truncated JPEG" in problems[0] and "solo.jpg" in problems[0], problems
    (tmp_path / "solo.jpg").unlink()
    (tmp_path / "solo.png").unlink()
    _bad_truncated_png(tmp_path)
    problems = check_dataset(tmp_path)
    assert len(problems) == 1 and "truncated" in problems[0] and "solo.png" in problems[0], problems
    assert decoded == []


# ------------------------------------------------------------------------------------------ decoding


def _exif_rotated(path: Path, display: np.ndarray) -> None:
    # Orientation 6 means "rotate 90 degrees clockwise to display": store the counter-rotated pixels.
    stored = Image.fromarray(display).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(path, quality=95, exif=exif.tobytes())


def test_odd_formats_accepted_and_decoded(tmp_path: Path) -> None:
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    rgb = _rgb(24, 32)
    sources = {
        "gray": Image.fromarray(rgb).convert("L"),
        "rgba": Image.fromarray(rgb).convert("RGBA"),
        "palette": Image.fromarray(rgb).quantize(16),
        "cmyk": Image.fromarray(rgb).convert("CMYK"),
    }
    for name, img in sources.items():
        img.save(images / (f"{name}.jpg" if name == "cmyk" else f"{name}.png"))
        _save(masks / f"{name}.png", _mask())
    display = _rgb(40, 24, seed=3)  # portrait in display orientation
    _exif_rotated(images / "exif.jpg", display)
    _save(masks / "exif.png", _mask(40, 24))
    # Mask flavours: 16-bit full range, 16-bit 0/1, 8-bit 0/1, soft 8-bit.
    m = _mask().astype(np.uint16)
    _save(images / "m16.png", rgb)
    Image.fromarray((m // 255 * 65535).astype(np.uint16)).save(masks / "m16.png")
    _save(images / "m16one.png", rgb)
    Image.fromarray((m // 255).astype(np.uint16)).save(masks / "m16one.png")
    _save(images / "m8one.png", rgb)
    _save(masks / "m8one.png", (_mask() // 255).astype(np.uint8))
    _save(images / "soft.png", rgb)
    soft = np.tile(np.linspace(0, 200, 32).astype(np.uint8), (24, 1))
    _save(masks / "soft.png", soft)

    assert check_dataset(tmp_path) == []
    pairs = dict((i.stem, (i, mk)) for i, mk in list_pairs(tmp_path))

    for name in ["gray", "rgba", "palette"]:
        expected = np.asarray(Image.open(pairs[name][0]).convert("RGB"))
        got = load_image(pairs[name][0])
        assert got.dtype == torch.uint8 and got.shape == (3, 24, 32)
        assert np.array_equal(got.permute(1, 2, 0).numpy(), expected), name
    cmyk = load_image(pairs["cmyk"][0]).permute(1, 2, 0).numpy().astype(int)
    assert np.abs(cmyk - np.asarray(Image.open(pairs["cmyk"][0]).convert("RGB")).astype(int)).mean() < 2

    exif = load_image(pairs["exif"][0])
    assert exif.shape == (3, 40, 24)
    got = exif.permute(1, 2, 0).numpy().astype(int)
    with Image.open(pairs["exif"][0]) as img:
        reference = np.asarray(ImageOps.exif_transpose(img).convert("RGB")).astype(int)
    assert np.abs(got - reference).mean() < 2
    # Lossy chroma blurs block edges; the upside-down content would differ far more.
    assert np.abs(got - display).mean() < 10 < np.abs(got - display[::-1, ::-1]).mean()

    binary = torch.from_numpy(_mask()).unsqueeze(0)
    for name in ["m16", "m16one", "m8one", "gray"]:
        got = load_mask(pairs[name][1])
        assert got.dtype == torch.uint8 and torch.equal(got, binary), name
    assert torch.equal(load_mask(pairs["soft"][1])[0], torch.from_numpy(soft))


def test_unreadable_image_error_names_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(DataError, match="cannot read image .*broken.jpg"):
        load_image(bad)


def test_a_cmyk_jpeg_is_recognised_past_an_embedded_rgb_thumbnail(tmp_path: Path, monkeypatch) -> None:
    """A CMYK JPEG goes to PIL (Adobe's inverted-ink convention) even when an RGB JPEG thumbnail sits
    in an application segment before its frame header; a plain RGB JPEG stays with torchvision."""
    from ignite_r3net.data import decode

    buf = io.BytesIO()
    Image.fromarray(_rgb(16, 16, seed=5)).save(buf, format="JPEG")
    thumbnail = buf.getvalue()
    buf = io.BytesIO()
    Image.fromarray(_rgb(24, 32)).convert("CMYK").save(buf, format="JPEG")
    cmyk = buf.getvalue()
    app15 = b"\xff\xef" + (2 + len(thumbnail)).to_bytes(2, "big") + thumbnail
    path = tmp_path / "with_thumbnail.jpg"
    path.write_bytes(cmyk[:2] + app15 + cmyk[2:])
    rgb_path = tmp_path / "rgb.jpg"
    rgb_path.write_bytes(thumbnail)

    opened = []
    pil_open = decode._pil_open
    monkeypatch.setattr(decode, "_pil_open", lambda p: opened.append(Path(p).name) or pil_open(p))
    with Image.open(path) as img:  # the header read that decides PIL's conversion
        assert img.mode == "CMYK" and img.size == (32, 24)
        expected = np.asarray(img.convert("RGB")).astype(int)
    got = load_image(path)
    assert got.shape == (3, 24, 32) and opened == ["with_thumbnail.jpg"]
    assert np.abs(got.permute(1, 2, 0).numpy().astype(int) - expected).mean() < 2
    assert load_image(rgb_path).shape == (3, 16, 16) and opened == ["with_thumbnail.jpg"]
