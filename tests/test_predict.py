"""``predict``: one map per input at its size, never outside --output; the CRF extra."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import blob_mask
from PIL import Image, ImageOps
from serve_helpers import write_photo

from ignite_r3net import cli
from ignite_r3net.evaluation.maps import output_path, safe_stem
from ignite_r3net.evaluation.predict import pixel_options
from ignite_r3net.inference import crf
from ignite_r3net.inference.foreground import refine_foreground
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.options import InferenceOptions, PredictOptions, ProcessOptions
from ignite_r3net.options.fields import is_group, is_option
from ignite_r3net.options.predict import PREDICT_NOT_PIXELS

# one torch thread per process, as the suite's child processes have (conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "best_model_1_maxF=0.1000.pt"
    torch.manual_seed(1)
    torch.save(R3Net("resnet18").state_dict(), path)
    return path


def _image(path: Path, h: int, w: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    fmt = {".jpg": "JPEG", ".bmp": "BMP"}.get(path.suffix, "PNG")  # PIL cannot tell "...png"
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, format=fmt)


def _predict(checkpoint: Path, out: Path, *inputs: Path, extra: tuple[str, ...] = ()) -> int:
    return cli.main(
        [
            "predict",
            "--checkpoint",
            str(checkpoint),
            "--output",
            str(out),
            "--workers",
            "0",
            "--input",
            *map(str, inputs),
            *extra,
        ]
    )


def test_predict_files_and_folders_at_input_size(tmp_path: Path, checkpoint: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    _image(folder / "b.jpg", 50, 70)
    _image(folder / "c.png", 64, 48)
    Image.fromarray(np.zeros((50, 70), np.uint8)).save(folder / "b.png")  # MSRA10K layout: b's mask
    (folder / "notes.txt").write_text("not an image")
    _image(tmp_path / "a.bmp", 33, 41)
    out = tmp_path / "out"
    assert _predict(checkpoint, out, tmp_path / "a.bmp", folder) == 0
    sizes = {}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [".predict"]  # the record of what is done
    for p in sorted(out.glob("*.png")):
        with Image.open(p) as im:
            assert im.mode == "L"
            sizes[p.name] = im.size
    assert sizes == {"a.png": (41, 33), "b.png": (70, 50), "c.png": (48, 64)}


def test_stems_cannot_escape_output(tmp_path: Path, checkpoint: Path) -> None:
    out = tmp_path / "out"
    for stem in ("../evil", "..", ".", "a/../../b", "x\\..\\y", ""):
        path = output_path(out, stem)
        assert path.parent == out.resolve(), stem
    assert safe_stem("../evil") == ".._evil"
    # a real file whose stem is "..": written inside --output, not as out/../.png
    inputs = tmp_path / "in"
    inputs.mkdir()
    _image(inputs / "...png", 20, 30)
    assert _predict(checkpoint, out, inputs / "...png") == 0  # given as a file: folders skip dot files
    assert [p.name for p in out.iterdir() if p.name != ".predict"] == ["_...png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_same_stem_twice_is_an_error(tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "x").mkdir()
    _image(tmp_path / "x" / "a.jpg", 20, 20)
    _image(tmp_path / "a.png", 20, 20)
    assert _predict(checkpoint, tmp_path / "out", tmp_path / "x", tmp_path / "a.png") == 2
    err = capsys.readouterr().err
    assert "would both be written" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert _predict(checkpoint, tmp_path / "out", tmp_path / "missing.jpg") == 2
    assert "does not exist" in capsys.readouterr().err


def test_crf_missing_gives_one_line(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pydensecrf", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "pydensecrf.densecrf", None)
    _image(tmp_path / "a.png", 20, 20)
    assert _predict(checkpoint, tmp_path / "out", tmp_path / "a.png", extra=("--crf",)) == 2
    assert capsys.readouterr().err.strip() == f"error: {crf.CRF_MISSING}"


def _reference_crf(image: np.ndarray, saliency: np.ndarray) -> np.ndarray:
    """The original R3Net inference's refinement (its ``misc.crf_refine``, from DSS), written out here
    with pydensecrf: a 2-label dense CRF whose unary energies are ``-log`` of the background and
    foreground probability, tempered by 1.05 and a sigmoid of the probability; a Gaussian (sxy 3,
    compat 3) and a bilateral (sxy 60, srgb 5, compat 5) kernel; one mean-field step; the
    foreground marginal times 255, truncated to uint8."""
    import pydensecrf.densecrf as dcrf

    h, w = saliency.shape
    p = saliency.astype(np.float64) / 255

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    energies = np.zeros((2, h * w), np.float32)
    energies[0] = (-np.log(1 - p + 1e-8) / (1.05 * sigmoid(1 - p))).ravel()
    energies[1] = (-np.log(p + 1e-8) / (1.05 * sigmoid(p))).ravel()
    field = dcrf.DenseCRF2D(w, h, 2)
    field.setUnaryEnergy(energies)
    field.addPairwiseGaussian(sxy=3, compat=3)
    field.addPairwiseBilateral(sxy=60, srgb=5, rgbim=np.array(image, np.uint8, order="C"), compat=5)
    marginals = np.array(field.inference(1), dtype=np.float32)
    return (marginals[1] * 255).reshape(h, w).astype(np.uint8)


def test_crf_refine_is_the_original_refinement() -> None:
    rng = np.random.default_rng(3)
    gt = blob_mask(rng, 45, 60)
    image = np.clip(gt[..., None] * 0.6 + rng.normal(60, 25, (45, 60, 3)), 0, 255).astype(np.uint8)
    saliency = np.clip(gt * 0.7 + rng.normal(40, 40, gt.shape), 0, 255).astype(np.uint8)  # a noisy map
    refined = crf.crf_refine(torch.from_numpy(image).permute(2, 0, 1), torch.from_numpy(saliency))
    expected = _reference_crf(image, saliency)
    assert refined.dtype == torch.uint8 and np.array_equal(refined.numpy(), expected)
    assert np.mean(expected != saliency) > 0.5  # the refinement changes the map
    # and for the better: closer to the object than the noisy map was
    assert np.abs(expected / 255 - gt / 255).mean() < np.abs(saliency / 255 - gt / 255).mean()


def test_predict_with_crf_writes_the_refined_maps(tmp_path: Path, spread_checkpoint: Path) -> None:
    _image(tmp_path / "a.png", 40, 52)
    assert _predict(spread_checkpoint, tmp_path / "plain", tmp_path / "a.png") == 0
    assert _predict(spread_checkpoint, tmp_path / "crf", tmp_path / "a.png", extra=("--crf",)) == 0
    image = np.asarray(Image.open(tmp_path / "a.png").convert("RGB"))
    plain = np.asarray(Image.open(tmp_path / "plain" / "a.png"))
    refined = np.asarray(Image.open(tmp_path / "crf" / "a.png"))
    assert refined.shape == (40, 52) and plain.std() > 10  # a map with structure to refine
    assert np.array_equal(refined, _reference_crf(image, plain)) and not np.array_equal(refined, plain)


def _exif_rotated_jpeg(path: Path, h: int, w: int) -> None:
    """A JPEG stored ``h`` x ``w`` whose EXIF orientation (6: rotate 90 degrees clockwise) shows it ``w`` x ``h``."""
    rng = np.random.default_rng(5)
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)  # blocks: few JPEG artefacts
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(np.kron(small, np.ones((8, 8, 1), np.uint8))[:h, :w]).save(path, exif=exif, quality=95)


def _displayed(path: Path) -> np.ndarray:
    """The image as a viewer shows it, decoded by PIL (not by the package): RGB, EXIF orientation applied."""
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def test_cutout_is_the_image_with_the_map_as_alpha(tmp_path: Path, spread_checkpoint: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    _image(photos / "flat.png", 40, 56, seed=3)
    _exif_rotated_jpeg(photos / "turned.jpg", 48, 72)
    assert _predict(spread_checkpoint, tmp_path / "maps", photos) == 0
    assert _predict(spread_checkpoint, tmp_path / "cutouts", photos, extra=("--cutout",)) == 0
    assert sorted(p.name for p in (tmp_path / "cutouts").glob("*.png")) == ["flat.png", "turned.png"]
    for stem in ("flat", "turned"):
        with Image.open(tmp_path / "cutouts" / f"{stem}.png") as im:
            assert im.mode == "RGBA"
            cutout = np.asarray(im)
        with Image.open(tmp_path / "maps" / f"{stem}.png") as im:
            saliency = np.asarray(im)
        np.testing.assert_array_equal(cutout[..., 3], saliency)  # the alpha is predict's map, bit for bit
        source = photos / ("flat.png" if stem == "flat" else "turned.jpg")
        displayed = _displayed(source)
        assert cutout.shape[:2] == displayed.shape[:2]
        if stem == "flat":  # lossless: the very pixels
            np.testing.assert_array_equal(cutout[..., :3], displayed)
        else:  # JPEG: another decoder may differ by a level or two, never by the orientation
            assert cutout.shape[:2] == (72, 48)
            assert np.abs(cutout[..., :3].astype(int) - displayed).max() <= 3
    assert len(np.unique(saliency)) > 10  # a soft alpha: the model's maps span many levels


def test_threshold_gives_a_hard_alpha_and_binary_maps(tmp_path: Path, spread_checkpoint: Path) -> None:
    _image(tmp_path / "a.png", 48, 64, seed=4)
    assert _predict(spread_checkpoint, tmp_path / "soft", tmp_path / "a.png") == 0
    threshold = 0.5
    extra = ("--threshold", str(threshold))
    assert _predict(spread_checkpoint, tmp_path / "cut", tmp_path / "a.png", extra=("--cutout", *extra)) == 0
    assert _predict(spread_checkpoint, tmp_path / "hard", tmp_path / "a.png", extra=extra) == 0
    soft = np.asarray(Image.open(tmp_path / "soft" / "a.png")).astype(np.float64)
    expected = np.where(soft / 255 >= threshold, 255, 0)
    assert 0 < (expected == 255).mean() < 1  # both kinds of pixel occur
    alpha = np.asarray(Image.open(tmp_path / "cut" / "a.png"))[..., 3]
    assert set(np.unique(alpha)) <= {0, 255}
    np.testing.assert_array_equal(alpha, expected)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "hard" / "a.png")), expected)


def test_threshold_out_of_range_is_one_line(tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    _image(tmp_path / "a.png", 20, 20)
    assert _predict(checkpoint, tmp_path / "out", tmp_path / "a.png", extra=("--cutout", "--threshold", "1.5")) == 2
    assert capsys.readouterr().err.strip() == "error: --threshold must be between 0 and 1, got 1.5"
    assert not (tmp_path / "out").exists()


def test_cutout_from_an_exported_onnx_model(tmp_path: Path, exported_onnx: Path) -> None:
    _image(tmp_path / "a.png", 40, 52, seed=6)
    common = ["predict", "--model", str(exported_onnx), "--workers", "0", "--input", str(tmp_path / "a.png")]
    assert cli.main([*common, "--output", str(tmp_path / "maps")]) == 0
    assert cli.main([*common, "--output", str(tmp_path / "cut"), "--cutout"]) == 0
    cutout = np.asarray(Image.open(tmp_path / "cut" / "a.png"))
    np.testing.assert_array_equal(cutout[..., 3], np.asarray(Image.open(tmp_path / "maps" / "a.png")))
    np.testing.assert_array_equal(cutout[..., :3], _displayed(tmp_path / "a.png"))


# ---------------------------------------------------------------------------------- at scale


def test_a_refined_cutout_keeps_the_alpha_and_refines_the_colours_on_the_run(
    tmp_path: Path, spread_checkpoint: Path
) -> None:
    _image(tmp_path / "a.png", 40, 56, seed=3)
    assert _predict(spread_checkpoint, tmp_path / "plain", tmp_path / "a.png", extra=("--cutout",)) == 0
    extra = ("--cutout", "--refine-foreground")
    assert _predict(spread_checkpoint, tmp_path / "refined", tmp_path / "a.png", extra=extra) == 0
    with Image.open(tmp_path / "plain" / "a.png") as plain, Image.open(tmp_path / "refined" / "a.png") as refined:
        assert refined.mode == plain.mode == "RGBA" and refined.size == plain.size == (56, 40)
        plain_pixels, refined_pixels = np.array(plain), np.array(refined)
    np.testing.assert_array_equal(refined_pixels[..., 3], plain_pixels[..., 3])  # the same map as alpha
    photo, alpha = torch.from_numpy(plain_pixels[..., :3]).permute(2, 0, 1), torch.from_numpy(plain_pixels[..., 3])
    expected = refine_foreground(photo.contiguous(), alpha).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(refined_pixels[..., :3], expected)
    assert (refined_pixels[..., :3] != plain_pixels[..., :3]).any()


def _over(rgb: np.ndarray, alpha: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """``rgb`` laid over a flat ``colour`` by ``alpha``, rounded as a compositor rounds 8-bit values."""
    a = alpha[..., None].astype(np.int64)
    return (a * rgb + (255 - a) * np.array(colour) + 127) // 255


def test_background_colour_and_image(tmp_path: Path, spread_checkpoint: Path) -> None:
    write_photo(tmp_path / "a.png", 56, 40, seed=3)
    Image.new("RGB", (9, 30), (0, 0, 200)).save(tmp_path / "blue.png")  # another shape: it covers the photo
    runs = {
        "refined": ("--cutout", "--refine-foreground"),
        "white": ("--cutout", "--refine-foreground", "--background", "white"),
        "blue": ("--cutout", "--background", str(tmp_path / "blue.png"), "--jpeg"),
    }
    for name, extra in runs.items():
        assert _predict(spread_checkpoint, tmp_path / name, tmp_path / "a.png", extra=extra) == 0, name
    cutout = np.asarray(Image.open(tmp_path / "refined" / "a.png")).astype(np.int64)
    with Image.open(tmp_path / "white" / "a.png") as white:
        assert white.mode == "RGB" and white.size == (56, 40)
        np.testing.assert_array_equal(np.asarray(white), _over(cutout[..., :3], cutout[..., 3], (255, 255, 255)))
    assert sorted(p.name for p in (tmp_path / "blue").iterdir() if p.is_file()) == ["a.jpg"]
    with Image.open(tmp_path / "blue" / "a.jpg") as blue:
        assert blue.format == "JPEG" and blue.mode == "RGB" and blue.size == (56, 40)
        photo = np.asarray(Image.open(tmp_path / "a.png")).astype(np.int64)
        expected, encoded = _over(photo, cutout[..., 3], (0, 0, 200)), io.BytesIO()
        Image.fromarray(expected.astype(np.uint8)).save(encoded, format="JPEG", quality=95)
        np.testing.assert_array_equal(np.asarray(blue), np.asarray(Image.open(encoded)))  # that composite as JPEG


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("missing.png", "neither a colour (a name such as white, or #RRGGBB) nor an image file"),
        ("#12345z", "neither a colour (a name such as white, or #RRGGBB) nor an image file"),
        ("notes.txt", "not a readable image: "),
    ],
)
def test_a_bad_background_is_one_line_before_any_image_is_read(
    tmp_path: Path,
    checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    value: str,
    message: str,
) -> None:
    from ignite_r3net.evaluation import predict

    (tmp_path / "notes.txt").write_text("not a picture")
    _image(tmp_path / "a.png", 20, 20)
    listed: list[object] = []
    monkeypatch.setattr(predict, "collect_inputs", lambda inputs: listed.append(inputs) or [])
    monkeypatch.chdir(tmp_path)
    extra = ("--cutout", "--background", value)
    assert _predict(checkpoint, tmp_path / "out", tmp_path / "a.png", extra=extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --background {value}: {message}") and err.count("\n") == 1, err
    assert listed == [] and not (tmp_path / "out").exists()


@pytest.mark.slow  # five runs of predict: over 1 s
def test_another_background_redoes_the_cutouts_and_the_same_keeps_them(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    images = _folder_of_images(tmp_path / "in", [(20, 30)] * 2)
    out, background = tmp_path / "out", tmp_path / "bg.png"

    def run(*extra: str) -> dict[str, tuple[int, int]]:
        assert _predict(checkpoint, out, images, extra=("--cutout", *extra)) == 0, extra
        return _file_identities(out)

    white = run("--background", "white")
    assert len(white) == 2
    capsys.readouterr()
    assert run("--background", "#FFFFFF") == white  # the same colour spelled otherwise
    assert "all 2 map(s) already in" in capsys.readouterr().out
    black = run("--background", "black")
    assert all(black[name] != white[name] for name in white)
    refined = run("--background", "black", "--refine-foreground")
    assert all(refined[name] != black[name] for name in black)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(background)
    first = run("--background", str(background))
    Image.new("RGB", (8, 8), (30, 20, 10)).save(background)  # the same file name, other pixels
    assert all(run("--background", str(background))[name] != first[name] for name in first)


def _folder_of_images(folder: Path, sizes: list[tuple[int, int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, (h, w) in enumerate(sizes):
        _image(folder / f"im{i:02d}.jpg", h, w, seed=i)
    return folder


def _count_writes(monkeypatch: pytest.MonkeyPatch, stop_after: int | None = None) -> list[str]:
    """The names of the maps ``predict`` writes from now on; with ``stop_after``, the run is
    stopped (Ctrl-C) once that many are written."""
    from ignite_r3net.evaluation import predict_worker
    from ignite_r3net.evaluation.maps import save_map as real

    written: list[str] = []

    def save_map(path, saliency):
        if stop_after is not None and len(written) == stop_after:
            raise KeyboardInterrupt
        real(path, saliency)
        written.append(Path(path).name)

    monkeypatch.setattr(predict_worker, "save_map", save_map)
    return written


def _maps(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.png"))}


def test_a_stopped_predict_continues_and_writes_every_map_once(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    images = _folder_of_images(tmp_path / "in", [(20, 30)] * 5 + [(24, 16)] * 2)
    out = tmp_path / "out"
    first = _count_writes(monkeypatch, stop_after=3)
    assert _predict(checkpoint, out, images, extra=("--batch-size", "2")) == 130
    assert len(first) == 3 and sorted(p.name for p in out.glob("*.png")) == sorted(first)
    assert not list(out.glob(".tmp-*"))  # each map appears whole or not at all
    rest = _count_writes(monkeypatch)
    assert _predict(checkpoint, out, images, extra=("--batch-size", "2")) == 0
    assert "3 of 7 map(s) already in" in capsys.readouterr().out
    assert sorted(first + rest) == [f"im{i:02d}.png" for i in range(7)]  # every map once
    # nothing left to do; --overwrite redoes them all, with the same bytes
    before = _maps(out)
    again = _count_writes(monkeypatch)
    assert _predict(checkpoint, out, images) == 0 and again == []
    assert "all 7 map(s) already in" in capsys.readouterr().out
    assert _predict(checkpoint, out, images, extra=("--overwrite",)) == 0 and len(again) == 7
    assert _maps(out) == before


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_maps_of_another_model_or_options_are_redone(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = _folder_of_images(tmp_path / "in", [(20, 30)] * 3)
    out = tmp_path / "out"
    assert _predict(checkpoint, out, images) == 0
    # the same weights in another file: the same model
    copy = tmp_path / "copy.pt"
    copy.write_bytes(checkpoint.read_bytes())
    written = _count_writes(monkeypatch)
    assert _predict(copy, out, images) == 0 and written == []
    # other weights: every map again, and the first model's record no longer vouches for them
    other = tmp_path / "other.pt"
    torch.manual_seed(2)
    torch.save(R3Net("resnet18").state_dict(), other)
    first = _count_writes(monkeypatch, stop_after=1)
    assert _predict(other, out, images) == 130 and len(first) == 1
    redone = _count_writes(monkeypatch)
    assert _predict(checkpoint, out, images) == 0 and len(redone) == 3
    # an option that changes the pixels
    amp = _count_writes(monkeypatch)
    assert _predict(checkpoint, out, images, extra=("--amp", "bf16")) == 0 and len(amp) == 3


def test_batches_give_the_maps_of_batch_one(tmp_path: Path, checkpoint: Path) -> None:
    # three sizes; 5 images of one size make batches of 4 and 1 (BatchNorm must be in eval mode:
    # in training mode a batch's statistics would change every image's map)
    images = _folder_of_images(tmp_path / "in", [(32, 48)] * 5 + [(40, 24)] * 2 + [(36, 36)])
    assert _predict(checkpoint, tmp_path / "one", images, extra=("--batch-size", "1")) == 0
    assert _predict(checkpoint, tmp_path / "four", images, extra=("--batch-size", "4")) == 0
    one, four = _maps(tmp_path / "one"), _maps(tmp_path / "four")
    assert one.keys() == four.keys() and len(one) == 8
    for name in one:
        a = np.asarray(Image.open(io.BytesIO(one[name])), dtype=np.int16)
        b = np.asarray(Image.open(io.BytesIO(four[name])), dtype=np.int16)
        assert np.abs(a - b).max() <= 1, name  # float sums in another order: one gray level at most


def test_a_bad_image_is_listed_and_the_others_written(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    images = _folder_of_images(tmp_path / "in", [(20, 30)] * 4)
    (images / "im01.jpg").write_bytes(b"\xff\xd8 not really a jpeg")  # the header cannot be read
    truncated = images / "im02.jpg"
    truncated.write_bytes(truncated.read_bytes()[:40])  # a header, and no pixels
    out = tmp_path / "out"
    assert _predict(checkpoint, out, images, extra=("--batch-size", "4")) == 1
    err = capsys.readouterr().err
    err = err[err.index("error: ") :]  # after the progress lines
    assert err.startswith("error: 2 of 4 image(s) could not be read; their maps are missing, the others were written")
    assert f"  - cannot read image {images / 'im01.jpg'}" in err and f"  - cannot read image {truncated}" in err
    assert sorted(p.name for p in out.glob("*.png")) == ["im00.png", "im03.png"]
    assert (out / ".predict" / "failed.txt").read_text().count("cannot read image") == 2
    # a rerun tries the failed images again, and only them
    assert _predict(checkpoint, out, images) == 1
    assert "2 of 4 map(s) already in" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_n_processes_give_the_maps_of_one_byte_for_byte(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    """One process (this one, one thread as the others), two spawned (--nproc 2) and two ranks of
    torchrun (which predict joins): the same maps, byte for byte, each rank writing its share."""
    import subprocess

    from helpers import REPO, cpu_env, free_port

    images = _folder_of_images(tmp_path / "in", [(32, 48)] * 6 + [(40, 24)] * 3 + [(36, 36), (28, 28)])
    outs = {name: tmp_path / name for name in ("one", "spawned", "torchrun")}
    common = ["predict", "--checkpoint", str(checkpoint), "--input", str(images), "--batch-size", "4"]
    assert cli.main([*common, "--output", str(outs["one"]), "--workers", "1"]) == 0  # no process of its own
    assert f"wrote 11 map(s) to {outs['one']}" in capsys.readouterr().out
    # this process launches the two ranks (spawned processes, as always): one process start less
    spawned = ["--nproc", "2", "--master-port", str(free_port())]
    assert cli.main([*common, "--output", str(outs["spawned"]), "--workers", "1", *spawned]) == 0
    assert f"wrote 11 map(s) to {outs['spawned']}" in capsys.readouterr().out
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = subprocess.run(
        [*torchrun, str(REPO / "run.py"), *common, "--output", str(outs["torchrun"]), "--workers", "0"],
        cwd=tmp_path,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote 11 map(s)") == 1  # rank 0 reports
    reference = _maps(outs["one"])
    assert len(reference) == 11
    for name in ("spawned", "torchrun"):
        assert _maps(outs[name]) == reference, name
        assert len(list((outs[name] / ".predict").glob("*.rank*.done"))) == 2  # both ranks wrote maps


def test_one_predict_per_output_folder(tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    from ignite_r3net.run_lock import RunLock

    images = _folder_of_images(tmp_path / "in", [(20, 30)])
    out = tmp_path / "out"
    out.mkdir()
    with RunLock(out, job="another predict"):  # held by a live process of another job
        assert _predict(checkpoint, out, images) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --output {out} is in use by another run") and err.endswith("another --output")
    assert not list(out.glob("*.png"))
    assert _predict(checkpoint, out, images) == 0 and not (out / ".run.lock").exists()  # released at the end


# the options that change a map's pixels: each is in the rerun key, every other option is in PREDICT_NOT_PIXELS
PIXEL_OPTIONS = {"cutout", "threshold", "refine_foreground", "background", "jpeg"}
PIXEL_OPTIONS |= {"backbone", "size", "max_side", "crf", "amp", "tf32"}


def _option_paths(cls: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every option of ``cls`` and of its groups, as the path of field names to it."""
    paths = []
    for f in dataclasses.fields(cls):
        if is_group(f):
            paths += _option_paths(f.default_factory, (*prefix, f.name))  # type: ignore[arg-type]
        elif is_option(f):
            paths.append((*prefix, f.name))
    return paths


def _changed(options: object, path: tuple[str, ...]) -> object:
    """``options`` with the option at ``path`` given another value of its kind."""
    field_name, *rest = path
    value = getattr(options, field_name)
    if rest:
        return dataclasses.replace(options, **{field_name: _changed(value, tuple(rest))})  # type: ignore[type-var]
    f = next(f for f in dataclasses.fields(options) if f.name == field_name)  # type: ignore[arg-type]
    choices = f.metadata["argparse"].get("choices")
    if isinstance(value, bool):
        other: object = not value
    elif choices:
        other = next(c for c in choices if c != value)
    elif isinstance(value, list):
        other = [*value, "another"]
    elif field_name == "threshold":
        other = 0.5
    elif field_name == "background":
        other = "white"
    elif isinstance(value, int) or field_name in ("size", "max_side", "master_port"):
        other = (value or 0) + 7
    else:
        other = f"{value}-another"
    return dataclasses.replace(options, **{field_name: other})  # type: ignore[type-var]


def test_every_predict_option_is_in_the_rerun_key_or_says_why_not() -> None:
    paths = _option_paths(PredictOptions)
    names = {path[-1] for path in paths}
    assert len(names) == len(paths)  # one name per option: the key and PREDICT_NOT_PIXELS go by name
    unclassified = names - PIXEL_OPTIONS - set(PREDICT_NOT_PIXELS)
    assert not unclassified, f"say whether these options change the maps' pixels: {sorted(unclassified)}"
    assert not PIXEL_OPTIONS & set(PREDICT_NOT_PIXELS)
    assert set(PREDICT_NOT_PIXELS) <= names, "PREDICT_NOT_PIXELS names an option predict does not have"
    assert all(len(reason) > 20 for reason in PREDICT_NOT_PIXELS.values())
    # the key computed from the options: changed by a pixel option, by no other (on a GPU, TF32 off)
    base = PredictOptions(
        checkpoint="c.pt",
        inputs=["in"],
        output="out",
        inference=InferenceOptions(tf32="off"),
        processes=ProcessOptions(device="cuda"),
    )
    for path in paths:
        assert (pixel_options(_changed(base, path)) != pixel_options(base)) == (path[-1] in PIXEL_OPTIONS), path


def test_tf32_counts_only_where_it_changes_pixels() -> None:
    def key(device: str, tf32: str, **source: str) -> dict:
        source = source or {"checkpoint": "c.pt"}
        inference, processes = InferenceOptions(tf32=tf32), ProcessOptions(device=device)
        options = PredictOptions(**source, inputs=["i"], output="o", inference=inference, processes=processes)
        return pixel_options(options)

    assert key("cuda", "on") != key("cuda", "off")  # torch on a GPU: TF32 rounding moves gray levels
    assert key("cpu", "on") == key("cpu", "off") == key("cuda", "off")  # float32 in every case
    assert key("cuda", "on", model="m.onnx") == key("cuda", "off", model="m.onnx")  # onnxruntime ignores it
    assert key("cuda", "on", model="m.pt") != key("cuda", "off", model="m.pt")  # TorchScript: torch's kernels


def _file_identities(out: Path) -> dict[str, tuple[int, int]]:
    """Each map's inode and modification time in ns: a map written again (atomically: a new file) changes both."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(out.glob("*.png"))}


def test_a_rerun_with_options_that_change_no_pixel_keeps_every_map(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    images = _folder_of_images(tmp_path / "in", [(20, 30)] * 3)
    out = tmp_path / "out"
    assert _predict(checkpoint, out, images) == 0
    made = _file_identities(out)
    assert len(made) == 3
    capsys.readouterr()
    for extra in (("--verbose",), ("--no-progress",), ("--tf32", "off"), ("--batch-size", "1", "--workers", "1")):
        written = _count_writes(monkeypatch)
        assert _predict(checkpoint, out, images, extra=extra) == 0 and written == [], extra
        assert "all 3 map(s) already in" in capsys.readouterr().out, extra
        assert _file_identities(out) == made, extra
