"""The one atomic-write helper: a file appears whole, readable by all, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ignite_r3net.atomic_files import atomic_output, write_json
from ignite_r3net.errors import listing


@pytest.mark.parametrize("durable", [True, False])
def test_the_file_appears_whole_and_readable_by_all(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "sub" / "result.json"
    target.parent.mkdir()
    target.write_text("old", encoding="utf-8")
    umask = os.umask(0o077)  # a strict umask must not make shared outputs private
    try:
        with atomic_output(target, durable=durable) as tmp:
            assert tmp.parent == target.parent and tmp.name.startswith(".")
            tmp.write_text("new", encoding="utf-8")
            assert target.read_text(encoding="utf-8") == "old"  # not yet renamed
    finally:
        os.umask(umask)
    assert target.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "table.md"
    write_json({"a": 1}, target)
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("interrupted")
    assert target.read_text(encoding="utf-8") == '{\n  "a": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]


def test_listing_shows_the_first_names_then_a_count() -> None:
    assert listing(["a", "b", "c"]) == "a, b, c"
    assert listing((f"k{i}" for i in range(25)), limit=3) == "k0, k1, k2 (+22 more)"
    assert listing([]) == ""
