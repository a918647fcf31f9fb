"""Every output path is checked before any work: one ``error:`` line naming the option and the path,
exit code 2, before a model is read. Tests run as root, whom permission bits do not stop, so the
unwritable places are a path under a regular file (what a typo or a stale name gives) and
``/proc``, where ``os.access`` says yes and a write still fails (as on a read-only mount)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.atomic_files import check_writable_file, check_writable_folder
from ignite_r3net.errors import OptionError


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """A data set of one pair, a file that is not a checkpoint (reading it would fail: an error
    naming the output proves the output was checked first), and a regular file to nest under."""
    data = tmp_path / "data"
    data.mkdir()
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(data / "a.jpg")
    Image.fromarray(np.zeros((40, 40), np.uint8)).save(data / "a.png")
    not_a_checkpoint = tmp_path / "model.pt"
    not_a_checkpoint.write_bytes(b"not a checkpoint")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    method = tmp_path / "method"
    (method / "A").mkdir(parents=True)
    Image.fromarray(np.zeros((40, 40), np.uint8)).save(method / "A" / "a.png")
    return {"data": data, "checkpoint": not_a_checkpoint, "file": a_file, "method": method}


def _one_error_line(args: list[str], capsys: pytest.CaptureFixture) -> str:
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("where", ["under_file", "proc"])
def test_every_command_checks_its_outputs_first(
    places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture, where: str
) -> None:
    base = places["file"] if where == "under_file" else Path("/proc")
    data, checkpoint = str(places["data"]), str(places["checkpoint"])
    evaluate = ["evaluate", "--checkpoint", checkpoint, "--data", data, "--workers", "0"]
    cases = {
        "--json": [*evaluate, "--json", str(base / "r.json")],
        "--save-maps": [*evaluate, "--save-maps", str(base / "maps")],
        "--output": ["predict", "--checkpoint", checkpoint, "--input", data, "--output", str(base / "maps")],
        "--out": [
            "compare",
            "--datasets",
            f"A={data}",
            "--methods",
            f"M={places['method']}",
            "--out",
            str(base / "cmp"),
        ],
    }
    for option, args in cases.items():
        path = args[args.index(option) + 1]
        err = _one_error_line(args, capsys)
        assert f"{option} {path}" in err, err
    maps_json = ["evaluate", "--maps", data, "--gt", data, "--json", str(base / "r.json")]
    assert f"--json {base / 'r.json'}" in _one_error_line(maps_json, capsys)
    export = ["export", "--checkpoint", checkpoint, "--format", "torchscript", "--output", str(base / "m.pt")]
    assert f"--output {base / 'm.pt'}" in _one_error_line(export, capsys)
    hub = ["export", "--checkpoint", checkpoint, "--format", "hub", "--output", str(base / "hub")]
    assert f"--output {base / 'hub'}" in _one_error_line(hub, capsys)
    train = ["--data", data, "--pretrained", "none", "--backbone", "resnet18", "--crop", "32"]
    assert f"--output-dir {base / 'run'}" in _one_error_line([*train, "--output-dir", str(base / "run")], capsys)
    if where == "under_file":  # the file itself given as the folder
        said = _one_error_line([*train, "--output-dir", str(base)], capsys)
        assert f"--output-dir {base} exists and is not a folder" in said


def test_checks_leave_nothing_behind_and_name_what_is_wrong(tmp_path: Path) -> None:
    check_writable_file(tmp_path / "new" / "deeper" / "r.json", "--json")
    check_writable_folder(tmp_path / "maps" / "ECSSD", "--save-maps")
    assert not list(tmp_path.iterdir())  # no folder made, the probe file gone
    (tmp_path / "maps").mkdir()
    with pytest.raises(OptionError, match="--json .* is a folder"):
        check_writable_file(tmp_path / "maps", "--json")
    (tmp_path / "f").write_text("x")
    with pytest.raises(OptionError, match="--out .* exists and is not a folder"):
        check_writable_folder(tmp_path / "f", "--out")
    with pytest.raises(OptionError, match=f"--out {tmp_path / 'f' / 'sub' / 'x'}: {tmp_path / 'f'} is not a folder"):
        check_writable_folder(tmp_path / "f" / "sub" / "x", "--out")
    with pytest.raises(OptionError, match="cannot write in /proc"):
        check_writable_file("/proc/new/r.json", "--json")
