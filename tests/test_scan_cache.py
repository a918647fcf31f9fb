"""The data scan cache: a relaunch rereads only the files that changed (path, size, modification
time), sees added and removed files, and ignores a damaged or foreign cache file with a note."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ignite_r3net.data import checks
from ignite_r3net.data.checks import assert_dataset_ok, cache_folder, check_dataset


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The names of the files whose headers the scan reads (a fresh cache folder per test)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    calls: list[str] = []
    real = checks._probe
    monkeypatch.setattr(checks, "_probe", lambda path: calls.append(Path(path).name) or real(path))
    return calls


def _pair(folder: Path, stem: str, h: int = 24, w: int = 32) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(stem))
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{stem}.jpg", quality=90)
    Image.fromarray(np.zeros((h, w), np.uint8)).save(folder / f"{stem}.png")


def _data(tmp_path: Path, n: int = 4) -> Path:
    folder = tmp_path / "data"
    for i in range(n):
        _pair(folder, f"im{i}")
    return folder


def _cache_file() -> Path:
    (found,) = cache_folder().glob("*-headers.json")
    return found


def test_unchanged_files_are_not_read_again(tmp_path: Path, probed: list[str]) -> None:
    data = _data(tmp_path)
    assert check_dataset(data) == []
    assert len(probed) == 8  # every image and mask, once
    probed.clear()
    assert len(assert_dataset_ok(data)) == 4
    assert probed == []
    # the same folder named another way (absolute, with a trailing separator) is the same cache
    assert check_dataset(str(data.resolve()) + os.sep) == [] and probed == []


def test_a_touched_file_is_rescanned_and_its_new_problem_reported(tmp_path: Path, probed: list[str]) -> None:
    data = _data(tmp_path)
    assert check_dataset(data) == []
    probed.clear()
    # same size, new content and modification time: a JPEG whose end-of-image marker is gone
    jpg = data / "im2.jpg"
    raw = jpg.read_bytes()
    jpg.write_bytes(raw[:-2] + b"\0\1")
    st = jpg.stat()
    os.utime(jpg, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert check_dataset(data) == [f"truncated JPEG (no end-of-image marker): {jpg}"]
    assert probed == ["im2.jpg"]
    probed.clear()
    # the problem comes from the cache next time, naming the file as this call gives the folder
    assert check_dataset(data.resolve()) == [f"truncated JPEG (no end-of-image marker): {jpg.resolve()}"]
    assert probed == []


def test_added_and_removed_files_are_seen(tmp_path: Path, probed: list[str]) -> None:
    data = _data(tmp_path)
    assert check_dataset(data) == []
    probed.clear()
    _pair(data, "new", h=30)
    assert len(assert_dataset_ok(data)) == 5
    assert sorted(probed) == ["new.jpg", "new.png"]
    probed.clear()
    (data / "im0.jpg").unlink()
    assert check_dataset(data) == [f"mask without image: {data / 'im0.png'}"]
    assert probed == []
    entries = json.loads(_cache_file().read_text())["entries"]
    assert "im0.jpg" not in entries and "im0.png" not in entries  # unpaired: not checked, not kept
    assert {"new.jpg", "im1.jpg"} <= set(entries)


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda text: text[: len(text) // 2], "unreadable"),
        (lambda text: "[1, 2, 3]", "not a scan cache of this version"),
        # a forged entry that would hide a problem: the checksum no longer matches
        (lambda text: text.replace('"im1.jpg":[', '"im1.jpg":[0,0,'), "checksum does not match"),
    ],
    ids=["truncated", "foreign", "edited"],
)
def test_a_damaged_or_foreign_cache_is_ignored_with_a_note(
    tmp_path: Path, probed: list[str], capsys: pytest.CaptureFixture, damage, reason: str
) -> None:
    data = _data(tmp_path)
    assert check_dataset(data) == []
    cache = _cache_file()
    cache.write_text(damage(cache.read_text()))
    probed.clear()
    capsys.readouterr()
    assert check_dataset(data) == []
    assert len(probed) == 8  # nothing trusted: every file read again
    err = capsys.readouterr().err
    assert err.startswith(f"note: ignoring the data scan cache {cache} (") and reason in err, err
    assert len(err.strip().splitlines()) == 1
    probed.clear()
    assert check_dataset(data) == [] and probed == []  # replaced by a good one


def test_a_cache_of_another_folder_is_not_used(tmp_path: Path, probed: list[str], capsys) -> None:
    first, second = _data(tmp_path / "a"), _data(tmp_path / "b")
    assert check_dataset(first) == []
    cache = _cache_file()
    # the other folder's cache file holds the first folder's entries (a copied home directory)
    assert check_dataset(second) == []
    (other,) = set(cache_folder().glob("*-headers.json")) - {cache}
    other.write_bytes(cache.read_bytes())
    probed.clear()
    assert check_dataset(second) == [] and len(probed) == 8
    assert "made for another folder" in capsys.readouterr().err


def test_an_unwritable_cache_folder_is_a_note(tmp_path: Path, probed: list[str], capsys) -> None:
    data = _data(tmp_path)
    blocker = tmp_path / "cache-home"
    blocker.write_text("a file where the cache folder would be")
    assert check_dataset(data) == []
    assert "note: cannot write the data scan cache" in capsys.readouterr().err
