"""``compare --data-root DIR --datasets NAME --reference ...``: standard sets taken by name, and the
published numbers added as marked rows that take no rank, each with its source in a note."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import make_data_root

from ignite_r3net import cli


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_reference_rows_are_marked_unranked_and_cite_their_source(tmp_path, capsys):
    root = make_data_root(tmp_path / "root", n=3, sets=("ECSSD",))
    method = tmp_path / "methods" / "M" / "ECSSD"
    method.mkdir(parents=True)
    for mask in (root / "ecssd").glob("*.png"):  # the masks as maps
        shutil.copy(mask, method / mask.name)
    out = tmp_path / "out"
    argv = ["compare", "--data-root", str(root), "--datasets", "ecssd", "--methods", f"M={method.parent}"]
    argv += ["--out", str(out), "--show", "0", "--metrics", "maxF", "mae", "Sm"]
    assert cli.main([*argv, "--reference", "r3net-released-maps", "r3net-paper"]) == 0
    lines = (out / "table.md").read_text().splitlines()
    assert lines[0] == "| Method | ECSSD maxF↑ | ECSSD mae↓ | ECSSD Sm↑ |"
    assert lines[2].startswith("| M | ")
    assert "**" not in "\n".join(lines[2:5])  # one method: nothing ranked; the published rows take no rank
    assert lines[3] == "| R3Net (released maps) ‡ | 0.931 | 0.046 | 0.900 |"
    assert lines[4] == "| R3Net (paper) ‡ | - | - | - |"
    notes = "\n".join(lines[5:])
    assert "‡ R3Net (released maps): published numbers (released maps, public evaluation)" in notes
    assert "ArcherFMY/sal_eval_toolbox" in notes and "IJCAI 2018" in notes and "left out rather than guessed" in notes
    assert "warning: --reference r3net-paper: no published number for ECSSD" in capsys.readouterr().err
    assert list(json.loads((out / "results.json").read_text())["ECSSD"]) == ["M"]  # the file holds our scores only
