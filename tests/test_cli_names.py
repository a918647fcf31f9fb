"""One name for where a command writes (``--output``, and ``--output-dir`` where it writes a folder, beside each
command's older spelling), a misspelled flag answered with the one meant, and install hints that work for the
README's install from a clone."""

from __future__ import annotations

import configparser
import importlib

import pytest
from helpers import REPO

from ignite_r3net import cli
from ignite_r3net.errors import install_extra

# each command that writes: its arguments but the output, the option's destination, the spellings it takes
WRITERS = {
    "train": ([], "output_dir", ("--output-dir", "--output")),
    "reproduce": ([], "output_dir", ("--output-dir", "--output")),
    "make-data": ([], "out", ("--out", "--output", "--output-dir")),
    "compare": (["--datasets", "A=d", "--methods", "M=m"], "out", ("--out", "--output", "--output-dir")),
    "predict": (["--checkpoint", "c.pt", "--input", "p"], "output", ("--output", "--output-dir")),
    "export": (["--checkpoint", "c.pt", "--format", "hub"], "output", ("--output", "--output-dir")),
    "evaluate": (["--checkpoint", "c.pt", "--data", "d"], "save_maps", ("--save-maps", "--output", "--output-dir")),
    "profile": ([], "json_path", ("--json", "--output")),
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_every_command_that_writes_takes_output(command: str) -> None:
    args, dest, spellings = WRITERS[command]
    parser = cli.build_parser()
    for spelling in spellings:
        parsed = parser.parse_args([command, *args, spelling, "somewhere"])
        assert getattr(parsed, dest) == "somewhere", spelling


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["make-data", "--ouput", "x"], "--output"),  # before argparse names the required --out it left out
        (["--iter", "3"], "--iters"),
        (["predict", "--chekpoint", "c.pt", "--input", "p", "--output", "o"], "--checkpoint"),
        (["export", "--checkpoint", "c.pt", "--format=onnx", "--outptu=m.onnx"], "--output"),
    ],
)
def test_a_misspelled_flag_is_answered_with_the_one_meant(
    args: list[str], meant: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"(did you mean {meant}?)" in err, err


def test_an_unknown_flag_like_none_is_refused_without_a_guess(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--zzz", "2"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzz 2" in err and "did you mean" not in err


def test_install_hints_name_extras_the_clone_installs() -> None:
    """Each hint is the README's command (``pip install -e ".[extra]"``, the package is not on PyPI), for an
    extra setup.cfg declares; no message points at ``pip install 'ignite_r3net[...]'``."""
    from ignite_r3net.export.writer import ONNX_EXPORT_MISSING
    from ignite_r3net.inference.crf import CRF_MISSING
    from ignite_r3net.inference.model import ONNXRUNTIME_MISSING
    from ignite_r3net.serve.server import SERVE_MISSING

    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    extras = set(setup["options.extras_require"])
    for message, extra in (
        (CRF_MISSING, "crf"),
        (ONNX_EXPORT_MISSING, "onnx"),
        (ONNXRUNTIME_MISSING, "onnx"),
        (SERVE_MISSING, "serve"),
    ):
        assert extra in extras and install_extra(extra) in message
    assert install_extra("serve") == 'pip install -e ".[serve]" in the clone of ignite_r3net'
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert 'pip install -e ".[serve]"' in readme
    sources = "".join(p.read_text(encoding="utf-8") for p in (REPO / "ignite_r3net").rglob("*.py"))
    assert "ignite_r3net[" not in sources


def test_every_command_names_a_function_its_module_has() -> None:
    """``Command.run`` is a ``.module:function`` string imported when the command runs (so ``--help`` imports no
    torch): a renamed or moved function fails here, not in a user's first run of that command."""
    for command in cli.COMMANDS:
        module, function = command.run.split(":")
        assert callable(getattr(importlib.import_module(module, "ignite_r3net"), function)), command.name
