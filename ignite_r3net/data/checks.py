"""Fast data set checks that read headers only, so a bad file is reported before training starts, and the
scan cache that keeps their findings between launches, so a relaunch rereads only the files that changed."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from PIL import Image

from ..atomic_files import write_text
from ..content_key import ContentKey
from ..errors import DataError, note
from .folder import collector_paused, relative_name, scan

_CACHE_FORMAT = "ignite_r3net scan cache"
_CACHE_VERSION = 1
Finding = list[Any]  # what a check found about one file, as JSON values (e.g. [width, height, problem])
_EXIF_ORIENTATION = 0x0112
_TRANSPOSED = {5, 6, 7, 8}  # orientations that swap width and height
_PATH = "\x00"  # stands for the file's path in a problem kept in the scan cache


def _header(path: Path, verify: bool = False) -> tuple[str, tuple[int, int]]:
    """The format and the (width, height) in display (EXIF) orientation from the header (``verify``: a PNG's CRCs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(path) as img:
            fmt = img.format
            w, h = img.size
            try:
                # PIL's PNG getexif() decodes the whole image to look for an eXIf chunk after
                # the pixels; one before them is in the header (info) already
                has_exif = fmt != "PNG" or "exif" in img.info
                orientation = img.getexif().get(_EXIF_ORIENTATION, 1) if has_exif else 1
            except Exception:
                orientation = 1
        if verify and fmt == "PNG":
            # verify() walks the chunks and checks CRCs without inflating the pixels; it must
            # come straight after open, hence the second (header-only) open.
            with Image.open(path) as again:
                again.verify()
    return fmt, ((h, w) if orientation in _TRANSPOSED else (w, h))


def image_size(path: str | Path) -> tuple[int, int] | None:
    """(height, width) as decoded (EXIF orientation applied), from the header; None when it is unreadable."""
    try:
        w, h = _header(Path(path))[1]
    except Exception:  # PIL raises OSError, SyntaxError, struct.error... on damaged headers
        return None
    return h, w


def _probe(path: Path) -> tuple[tuple[int, int] | None, str | None]:
    """((width, height) in display orientation, problem) without decoding pixels."""
    try:
        if path.stat().st_size == 0:
            return None, f"empty file: {path}"
        fmt, size = _header(path, verify=True)
    except Image.UnidentifiedImageError:
        return None, f"not an image (unrecognised format): {path}"
    except Exception as exc:  # PIL raises OSError, SyntaxError, struct.error... on damaged headers
        return None, f"unreadable or truncated file: {path} ({exc})"
    if fmt in ("JPEG", "MPO"):
        with open(path, "rb") as f:  # some writers pad after the end marker with zeros or a newline
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64))
            if not f.read().rstrip(b"\x00\r\n ").endswith(b"\xff\xd9"):
                return None, f"truncated JPEG (no end-of-image marker): {path}"
    return size, None


def cache_folder() -> Path:
    """``$XDG_CACHE_HOME/ignite_r3net/scan`` (``~/.cache`` when the variable is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ignite_r3net" / "scan"


class ScanCache:
    """The findings of one kind of check on the files of ``folder`` in a JSON file (no pickle) of ``cache_folder()``,
    by relative path, size and mtime; ``code`` retires another version's, a damaged file is noted and replaced."""

    def __init__(self, folder: str | Path, kind: str, code: str) -> None:
        self.folder = Path(os.path.abspath(folder))
        self._prefix = os.path.join(os.fspath(folder), "")  # the folder as the scan's paths begin
        self.kind, self.code = kind, code
        digest = hashlib.sha256(os.fsencode(self.folder)).hexdigest()[:32]
        self.path = cache_folder() / f"{digest}-{kind}.json"
        self._old: dict[str, list[Any]] = {}
        self._new: dict[str, list[Any]] = {}

    def __enter__(self) -> ScanCache:
        self._old = self._load()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None and self._new != self._old:
            self._save()

    def get(self, path: Path, check: Callable[[], Finding]) -> Finding:
        """The finding of ``path``, ``check()`` unless its size and mtime are those recorded (or stat fails)."""
        where = os.fspath(path)
        try:
            st = os.stat(where)
        except OSError:
            return check()
        name = relative_name(where, self._prefix)
        stamp = [st.st_size, st.st_mtime_ns]
        entry = self._old.get(name)
        finding = entry[2:] if entry is not None and entry[:2] == stamp else check()
        self._new[name] = stamp + finding
        return finding

    def _load(self) -> dict[str, list[Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            why = self._foreign(data)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            why = f"unreadable ({e.__class__.__name__})"
        if why and why != "code":  # another version's cache ("code") is retired silently
            note(f"ignoring the data scan cache {self.path} ({why}); rescanning {self.folder}")
        return {} if why else data["entries"]

    def _foreign(self, data: Any) -> str | None:
        """Why ``data`` is no cache of this folder and kind (``code``: of another version), or None."""
        if not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT or data.get("version") != _CACHE_VERSION:
            return "not a scan cache of this version"
        if data.get("kind") != self.kind or data.get("folder") != os.fsdecode(self.folder):
            return "made for another folder or check"
        entries = data.get("entries")
        if not isinstance(entries, dict) or data.get("checksum") != _checksum(entries):
            return "its checksum does not match: damaged or edited"
        if not all(isinstance(v, list) and len(v) >= 2 for v in entries.values()):
            return "malformed entries"
        return "code" if data.get("code") != self.code else None

    def _save(self) -> None:
        data = dict(format=_CACHE_FORMAT, version=_CACHE_VERSION, kind=self.kind, folder=os.fsdecode(self.folder))
        data.update(code=self.code, checksum=_checksum(self._new), entries=self._new)
        try:
            write_text(json.dumps(data, separators=(",", ":")), self.path)
        except OSError as e:  # a read-only home: every launch rescans, which is slower, not wrong
            note(f"cannot write the data scan cache {self.path}: {e.strerror or e}")


def _checksum(entries: dict[str, Any]) -> str:
    return ContentKey("scan entries", _CACHE_VERSION).add_values(entries).hexdigest()


def _cached_probe(cache: ScanCache, path: Path) -> tuple[tuple[int, int] | None, str | None]:
    # a cached problem names the path as given this time
    def probe() -> Finding:
        size, problem = _probe(path)
        return [*(size or (None, None)), None if problem is None else problem.replace(str(path), _PATH)]

    width, height, problem = cache.get(path, probe)
    return (None if width is None else (width, height)), problem and problem.replace(_PATH, str(path))


class Scan(NamedTuple):
    """What a header scan of a data set folder found."""

    pairs: list[tuple[Path, Path]]
    problems: list[str]
    sizes: list[tuple[int, int]]  # of the pairs whose image and mask agree
    sound: list[tuple[Path, Path]]  # the pairs no problem names


def scan_dataset(root: str | Path) -> Scan:
    """The header scan of the data set under ``root``: its problems are those of ``check_dataset``."""
    pairs, problems = scan(root)
    sizes: list[tuple[int, int]] = []
    sound: list[tuple[Path, Path]] = []
    # what decides a header check's finding: this module's code and Pillow's version
    code = ContentKey("header checks", 1).add_sources([Path(__file__)]).add_libraries(["pillow"]).hexdigest()
    with collector_paused(), ScanCache(root, "headers", code) as cache:
        findings = [(_cached_probe(cache, image), _cached_probe(cache, mask)) for image, mask in pairs]
    for (image, mask), ((image_size, image_problem), (mask_size, mask_problem)) in zip(pairs, findings):
        problems.extend(p for p in (image_problem, mask_problem) if p)
        if image_size and mask_size:
            if image_size != mask_size:
                problems.append(
                    f"size mismatch: image {image} is {image_size[0]}x{image_size[1]} "
                    f"but mask {mask} is {mask_size[0]}x{mask_size[1]}"
                )
            else:
                sizes.append(image_size)
                if not image_problem and not mask_problem:
                    sound.append((image, mask))
    return Scan(pairs, problems, sizes, sound)


def check_dataset(root: str | Path) -> list[str]:
    """Every problem of the data set under ``root``, a line each naming the file: unpaired, unreadable, truncated,
    non-image files, size mismatches (after EXIF orientation), empty folders; from headers, not the pixels."""
    return scan_dataset(root).problems


def assert_dataset_ok(
    root: str | Path, min_size: int | None = None, option: str | None = None
) -> list[tuple[Path, Path]]:
    """The pairs under ``root`` (as ``list_pairs``); raise DataError listing every problem (after ``option``,
    the option that named ``root``, when given). ``min_size`` (the crop): also fail when it is larger than
    every image (small images are resized up, but a set where *every* one needs that is the wrong one)."""
    pairs, problems, sizes, _ = scan_dataset(root)
    if min_size is not None and sizes and not problems:
        if not any(w >= min_size and h >= min_size for w, h in sizes):
            w, h = max(sizes, key=lambda s: (s[0] * s[1], s))
            problems.append(f"crop {min_size} is larger than every image in {root} (largest is {w}x{h})")
    if problems:
        raise DataError(problems) if option is None else DataError(f"{option}: {DataError(problems)}")
    return pairs
