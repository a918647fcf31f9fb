"""Damaged images cannot end a long run: ``check-data --decode`` finds the JPEGs a header scan
passes; during training each unreadable pair is reported once and replaced by a pair that depends
only on its key (resume stays exact); more than ``--max-bad-images`` of them stop the run in one
line. The damage is real: JPEGs zeroed from the middle on, and cut and re-marked with FF D9."""

from __future__ import annotations

import os
import shutil
import socket
import threading

import pytest
import torch
from helpers import TINY_TRAIN, cut_and_remark, log_iterations, log_lines, make_tiny_dataset, zero_middle_of

from ignite_r3net.cli import main
from ignite_r3net.data.decode import load_image
from ignite_r3net.data.loader import SaliencyTrainSet, TrainData, build_train_loader
from ignite_r3net.data.sampler import sample_seed
from ignite_r3net.errors import DataError

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """6 pairs, two of them with damaged JPEGs whose headers and end markers are intact."""
    train, _ = make_tiny_dataset(tmp_path_factory.mktemp("damaged"), n=6, n_val=1, seed=3)
    zeroed = zero_middle_of(train / "syn_00001.jpg")
    cut = cut_and_remark(train / "syn_00004.jpg")
    return train, zeroed, cut


def test_check_data_decode_names_what_the_header_scan_passes(damaged, capsys):
    train, zeroed, cut = damaged
    assert main(["check-data", str(train)]) == 0  # headers, sizes and end markers are fine
    assert "6 pairs, no problems" in capsys.readouterr().out
    assert main(["check-data", "--decode", str(train)]) == 1
    out = capsys.readouterr().out
    assert f"{train}: 2 problem(s)" in out
    for path in (zeroed, cut):
        assert f"damaged image {path}: libjpeg: Corrupt JPEG data" in out


def test_check_data_decode_also_decodes_where_the_headers_found_problems(damaged, tmp_path, capsys):
    """One round of fixes: a header problem elsewhere in the folder does not hide a damaged JPEG."""
    train, zeroed, cut = damaged
    shutil.copytree(train, tmp_path / "set")
    lonely = tmp_path / "set" / "lonely.jpg"
    shutil.copy(train / "syn_00000.jpg", lonely)  # an image without its mask
    assert main(["check-data", "--decode", str(tmp_path / "set")]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'set'}: 3 problem(s)" in out and f"image without mask: {lonely}" in out
    for path in (zeroed, cut):
        assert f"damaged image {tmp_path / 'set' / path.name}: libjpeg: Corrupt JPEG data" in out


def test_the_grey_half_of_a_cut_jpeg_is_what_strict_decoding_refuses(damaged):
    """What the damage does: the lost half of a cut JPEG decodes as flat grey (128), with no error."""
    _, _, cut = damaged
    image = load_image(cut)
    assert (image[:, -4:, :] == 128).all()
    with pytest.raises(Exception, match="premature end of data segment"):
        load_image(cut, strict=True)


def test_what_another_thread_writes_to_stderr_during_a_strict_decode_is_not_blamed_on_the_image(
    damaged, monkeypatch, capfd
):
    """Strict decoding reads libjpeg's warnings from fd 2, which every thread of the process shares
    (with ``--workers 0`` the decode runs beside the trainer's threads): a line another thread
    writes meanwhile neither marks a good image as damaged nor goes missing from stderr."""
    import torchvision.io

    train, _, cut = damaged
    real_decode, calls = torchvision.io.decode_image, []

    def decode_while_another_thread_writes(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            writer = threading.Thread(target=os.write, args=(2, b"a line of another thread\n"))
            writer.start()
            writer.join()
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_image", decode_while_another_thread_writes)
    assert load_image(train / "syn_00000.jpg", strict=True).shape[0] == 3
    assert "a line of another thread" in capfd.readouterr().err
    calls.clear()
    with pytest.raises(DataError, match="premature end of data segment") as refused:
        load_image(cut, strict=True)
    assert "another thread" not in str(refused.value)
    assert "a line of another thread" in capfd.readouterr().err


def test_an_unreadable_pair_is_replaced_by_the_next_readable_one_with_the_same_draws(damaged):
    train, zeroed, cut = damaged
    dataset = SaliencyTrainSet(train, crop=32, rotate=10)
    seed = sample_seed(2018, 0, 5)
    replaced, following = dataset[(4, seed)], dataset[(5, seed)]  # pair 4 is the cut JPEG
    assert replaced["index"] == 5 and replaced["bad"] == [(str(cut), replaced["bad"][0][1])]
    assert "damaged image" in replaced["bad"][0][1]
    for key in ("image", "mask", "angle"):
        assert torch.equal(replaced[key], following[key]), key
    assert following["bad"] == []
    allowing = SaliencyTrainSet(train, crop=32, rotate=10, allow_decode_warnings=True)
    assert allowing[(4, seed)]["index"] == 4 and allowing[(4, seed)]["bad"] == []


def _train(data, out, *extra: str) -> int:
    return main(["--data", str(data), "--output-dir", str(out), "--checkpoint-every", "6", *TINY_TRAIN, *extra])


def test_training_reports_each_damaged_image_once_and_goes_on(damaged, tmp_path, capsys):
    train, zeroed, cut = damaged
    # 2 epochs of 3 iterations: each damaged pair is met twice, reported once
    assert _train(train, tmp_path, "--iters", "6", "--max-bad-images", "0.34") == 0
    out = capsys.readouterr().out
    lines = log_lines(tmp_path / "train.log")
    for path in (zeroed, cut):
        for where in (out.splitlines(), lines):
            said = [line for line in where if line.startswith("warning: ") and str(path) in line]
            assert len(said) == 1, where
            assert "trained on the next readable pair in its place" in said[0]
            assert "--max-bad-images 0.34 allows 2)" in said[0]
    assert sorted(log_iterations(tmp_path / "train.log")) == list(range(1, 7))


def test_more_damaged_images_than_allowed_stop_the_run_in_one_line(damaged, tmp_path, capsys):
    train, zeroed, cut = damaged
    assert _train(train, tmp_path, "--iters", "6", "--max-bad-images", "0.2") == 1
    printed = capsys.readouterr()
    err = printed.err.strip().splitlines()
    assert err[-1].startswith(
        f"error: rank 0 failed on {socket.gethostname()}: TooManyBadImages: 2 of 6 training pairs are unreadable, "
        "more than --max-bad-images 0.2 allows (1): damaged image "
    ), err
    assert "check-data --decode" in err[-1]
    lines = log_lines(tmp_path / "train.log")
    assert lines[-1] == err[-1], "train.log ends with the console's line"
    # train.log names each: met while allowed, with a warning (console too); met as the run stops,
    # on its own line (train.log only: no "trained on ... in its place" just before the stop)
    said = {
        path: [line for line in lines if f"damaged image {path}: " in line and line != lines[-1]]
        for path in (zeroed, cut)
    }
    assert all(len(found) == 1 for found in said.values()), said
    kinds = sorted(found[0].split(":")[0] for found in said.values())
    assert kinds == ["unreadable", "warning"], said
    assert not [line for line in printed.out.splitlines() if line.startswith("unreadable: ")]


def test_the_training_loader_passes_over_damaged_jpegs_unless_allowed(damaged):
    """What a rank's DataLoader hands the trainer in one epoch: the damaged pairs named in ``bad``
    (and others trained on in their place), or, with --allow-decode-warnings, trained on."""
    train, zeroed, cut = damaged
    for allow, expected in ((False, {str(zeroed), str(cut)}), (True, set())):
        data = TrainData([str(train)], crop=32, rotate=10.0, seed=2018, workers=0, allow_decode_warnings=allow)
        loader, sampler = build_train_loader(data, batch_size=2)
        sampler.set_epoch(0)
        batches = list(loader)
        assert len(batches) == 3 and {path for batch in batches for path, _ in batch["bad"]} == expected
        indices = sorted(int(i) for batch in batches for i in batch["index"])
        assert (4 in indices) == allow and (1 in indices) == allow  # the damaged pairs' own indices


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_a_damaged_validation_image_is_left_out_once_and_the_run_goes_on(tmp_path, capsys):
    """Validation reads as training does: a pair that cannot be read, or whose JPEG decodes with
    warnings, is reported once (console and train.log) and left out of the scores; the run ends."""
    train, val = make_tiny_dataset(tmp_path / "data", n=6, n_val=3, seed=3)
    cut = cut_and_remark(sorted(val.glob("*.jpg"))[0])  # the first: also a row of the TensorBoard grid
    out = tmp_path / "run"
    assert _train(train, out, "--val-data", str(val), "--iters", "6") == 0  # validations at 0 and 6
    printed = capsys.readouterr().out.splitlines()
    for where in (printed, log_lines(out / "train.log")):
        said = [line for line in where if line.startswith("warning: ") and str(cut) in line]
        assert len(said) == 1 and said[0].endswith("left out of the validation scores"), where
    assert any(line.startswith("final validation: ") for line in printed)


def test_evaluate_and_predict_name_a_damaged_jpeg_and_use_it_as_decoded(damaged, spread_checkpoint, tmp_path, capfd):
    """They read, not train: a JPEG that decodes with libjpeg warnings is scored (evaluate) or given
    a map (predict) as decoded, as other tools would, and one warning names it (libjpeg's own line
    names no file)."""
    train, zeroed, cut = damaged
    capfd.readouterr()
    args = ["evaluate", "--checkpoint", str(spread_checkpoint), "--data", str(train), "--workers", "0"]
    assert main([*args, "--backbone", "resnet18", "--no-progress"]) == 0
    out, err = capfd.readouterr()
    assert out.splitlines()[1].split()[:2] == ["train", "6"], out  # every pair scored
    for path in (zeroed, cut):
        named = [line for line in err.splitlines() if str(path) in line]
        assert named == [named[0]] and named[0].startswith(f"warning: damaged image {path}: libjpeg: "), err
        assert named[0].endswith("; used as decoded (part of the picture may be missing or grey)")
    assert not [line for line in err.splitlines() if line.startswith("Corrupt JPEG")], "a bare libjpeg line"
    maps = tmp_path / "maps"
    args = ["predict", "--checkpoint", str(spread_checkpoint), "--input", str(cut), "--output", str(maps)]
    assert main([*args, "--backbone", "resnet18", "--no-progress"]) == 0
    assert f"warning: damaged image {cut}: libjpeg: " in capfd.readouterr().err
    assert (maps / f"{cut.stem}.png").is_file()
