"""docs/cli.md is the parser's own text (``ignite_r3net.cli_reference``), and every option's help says its
default, so that neither the reference nor ``--help`` leaves a reader guessing what an option left out does."""

from __future__ import annotations

import argparse
import re

import pytest

from ignite_r3net import cli_reference
from ignite_r3net.cli import build_parser
from ignite_r3net.cli_reference import COMMAND, REFERENCE, render


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _arguments(command: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in command._actions if not isinstance(a, argparse._HelpAction)]


def test_docs_cli_md_is_what_the_parser_writes() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), f"docs/cli.md is stale: regenerate it with {COMMAND}"


def test_the_reference_depends_on_the_parser_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = render()
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/ignite-r3net"])  # the installed console script
    monkeypatch.setenv("COLUMNS", "53")
    assert render() == expected
    assert "/work/" not in expected and "/tmp/" not in expected and "/home/" not in expected


def test_every_command_and_option_has_its_place_in_the_reference() -> None:
    text = render()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    commands = _commands()
    assert list(sections) == list(commands)
    for name, command in commands.items():
        assert f"| [`{name}`](#{name}) |" in text  # the table of commands links each section
        rows = [line for line in sections[name].splitlines() if line.startswith("| `")]
        assert len(rows) == len(_arguments(command)), name
        for action, row in zip(_arguments(command), rows):
            for spelling in action.option_strings or [action.metavar or action.dest]:
                assert f"`{spelling}" in row.split(" | ")[0], (name, spelling, row)


def test_every_option_says_its_default() -> None:
    for name, command in _commands().items():
        command.format_help()  # --help of each command formats
        for action in _arguments(command):
            text = action.help or ""
            assert "default:" in text or "required" in text, f"{name} {action.option_strings}: {text!r}"
            if action.required:
                assert "required" in text, f"{name} {action.option_strings}: {text!r}"


def test_check_fails_on_a_stale_reference_and_write_mends_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text(render().replace("(default: 8000)", "(default: 6000)"), encoding="utf-8")
    monkeypatch.setattr(cli_reference, "REFERENCE", stale)
    assert cli_reference.main(["--check"]) == 1
    assert capsys.readouterr().err == f"error: docs/cli.md is stale: regenerate it with {COMMAND}\n"
    assert cli_reference.main(["--write"]) == 0
    assert cli_reference.main(["--check"]) == 0 and stale.read_text(encoding="utf-8") == render()
