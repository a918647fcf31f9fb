"""The documentation stays true to the code: every command it shows parses with the real command line and
passes the checks the command makes of its options before any work, and every relative link and anchor
resolves. docs/cli.md, generated from the parser, is checked by its own test."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from ignite_r3net import cli
from ignite_r3net.config import TrainConfig
from ignite_r3net.options.reproduce import ReproduceOptions
from ignite_r3net.training.recipe_config import config_from_options

REPO = Path(__file__).resolve().parents[1]
# the pages whose commands are checked (cli.md is generated from the parser itself), and the example scripts
COMMAND_PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
LINK_PAGES = COMMAND_PAGES
EXAMPLE_SCRIPTS = sorted(p for p in (REPO / "examples").rglob("*") if p.suffix in (".sh", ".sbatch"))

# words that stand for a value the reader supplies (DIR, CKPT, ORG/NAME, DATA_ROOT, N, ...): text to every
# option, and replaced by a valid number where the option takes one
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(/[A-Z][A-Z0-9_]*)?$")
NUMBER_FOR_PLACEHOLDER = {int: "1", float: "0.5"}
SHELL_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTION = re.compile(r"\s\d*(>>?|<)(&-|&\d+|\s*[^\s&|;]+)")
OPTIONS_OF = {command.name: command.options for command in cli.COMMANDS}  # evaluate, predict, ...


# reading the pages


def _fenced_blocks(text: str) -> tuple[list[tuple[str, str, int]], str]:
    """The fenced code blocks of ``text`` as (info string, body, first line number), and the text without them
    (their lines blanked, so line numbers stay)."""
    blocks, prose, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        opening = re.match(r"^\s*(```+|~~~+)\s*(\S*)", lines[i])
        if not opening:
            prose.append(lines[i])
            i += 1
            continue
        fence, info, start = opening.group(1), opening.group(2), i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        blocks.append((info, "\n".join(lines[start:i]), start + 1))
        prose.extend([""] * (i + 1 - start + 1))
        i += 1
    return blocks, "\n".join(prose[: len(lines)])


def _code_spans(prose: str) -> list[tuple[str, int]]:
    """Inline code in prose, a span may run over a line break, with its line number."""
    spans = []
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        spans.append((" ".join(m.group(1).split()), prose.count("\n", 0, m.start()) + 1))
    return spans


def _shell_lines(body: str, first_line: int) -> list[tuple[str, int]]:
    """The logical lines of a shell block: lines ending in a backslash joined to the next."""
    out: list[tuple[str, int]] = []
    pending, start = "", first_line
    for n, line in enumerate(body.split("\n"), first_line):
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((pending + line, start))
        pending = ""
    if pending:
        out.append((pending, start))
    return out


def command_texts(page: Path) -> list[tuple[str, str]]:
    """Every shell text of ``page`` that may hold a command, as (text, ``page:line``): the lines of its shell
    code blocks (fenced, or indented by four spaces) and its inline code spans; a shell script's every line."""
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(REPO)
    if page.suffix != ".md":
        return [(line, f"{where}:{n}") for line, n in _shell_lines(text, 1)]
    blocks, prose = _fenced_blocks(text)
    found = []
    for info, body, first in blocks:
        if info in ("", "bash", "sh", "shell", "console"):
            found += [(line, f"{where}:{n}") for line, n in _shell_lines(body, first)]
    indented = "\n".join(line if line.startswith("    ") else "" for line in prose.split("\n"))
    found += [(line, f"{where}:{n}") for line, n in _shell_lines(indented, 1) if line.strip()]
    found += [(span, f"{where}:{n}") for span, n in _code_spans(prose)]
    return found


def commands_in(text: str) -> list[list[str]]:
    """The argument lists given to this program in a shell text: after ``run.py`` (``python run.py``,
    ``torchrun ... run.py``, ``srun python run.py``) or ``ignite-r3net``, in each part of a pipeline or list
    (``&&``, ``|``, ``;``), without redirections and comments; a trailing ``...`` (more options) is left out."""
    text = REDIRECTION.sub(" ", " " + text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars="();|&")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: prose that is no shell
        return []
    commands, part = [], []
    for token in [*tokens, ";"]:
        if token not in SHELL_SEPARATORS:
            part.append(token)
            continue
        for i, word in enumerate(part):
            if word in ("run.py", "ignite-r3net"):
                args = part[i + 1 :]
                while args and args[-1] == "...":
                    args.pop()
                commands.append(args)
                break
        part = []
    return commands


DOCUMENTED = [
    pytest.param(args, id=f"{where} {' '.join(args)[:60]}")
    for page in [*COMMAND_PAGES, *EXAMPLE_SCRIPTS]
    for text, where in command_texts(page)
    for args in commands_in(text)
]


# checking a command


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def with_placeholders_filled(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` with each placeholder that follows a numeric option replaced by a number of its type."""
    command = _subparser(parser, words[0]) if words else None
    actions = command._option_string_actions if command is not None else {}
    filled, current = [], None
    for word in words:
        if word.startswith("-"):
            current = actions.get(word.split("=", 1)[0])
        elif current is not None and PLACEHOLDER.match(word) and current.type in NUMBER_FOR_PLACEHOLDER:
            word = NUMBER_FOR_PLACEHOLDER[current.type]
        filled.append(word)
    return filled


def check_command(args: list[str]) -> None:
    """Parse ``args`` as ``main`` does, but any unknown word fails (no parse_known_args), then build and
    validate the command's options as the command does before any work; ``AssertionError`` names the problem."""
    words = [w for w in args if w not in ("-h", "--help")]  # help prints and exits: the rest must parse
    assert "..." not in words, "'...' inside a command: write the options out"
    if not words or words[0].startswith("-"):
        words.insert(0, "train")
    parser = cli.build_parser()
    words = with_placeholders_filled(parser, words)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parsed = parser.parse_args(words)
    except SystemExit:
        raise AssertionError(f"python run.py {' '.join(args)}: {stderr.getvalue().strip()}") from None
    try:
        _validate(parsed)
    except Exception as e:  # OptionError, or a value the dataclass cannot take
        raise AssertionError(f"python run.py {' '.join(args)}: {e}") from None


def _validate(parsed: argparse.Namespace) -> None:
    if parsed.command in ("train", "reproduce"):
        config_from_options(cli.given_options(TrainConfig, parsed)).validate()
    if parsed.command == "reproduce":
        cli.options_from_args(ReproduceOptions, parsed).validate()
    if parsed.command in OPTIONS_OF:
        options: Any = cli.options_from_args(OPTIONS_OF[parsed.command], parsed)
        options.validate()


def test_pages_show_commands() -> None:
    """The extraction finds the commands (an empty list would pass the test below vacuously)."""
    assert len(DOCUMENTED) > 40
    shown = {args[0] if args and not args[0].startswith("-") else "train" for args in (p.values[0] for p in DOCUMENTED)}
    assert shown >= {"train", "evaluate", "predict", "compare", "export", "reproduce", "make-data", "check-data"}


def test_benchmarks_and_example_scripts_are_read() -> None:
    """The commands of benchmarks/README.md (indented blocks too) and of the example scripts are checked."""
    read = {p.id.split(":")[0] for p in DOCUMENTED}
    scripts = {str(p.relative_to(REPO)) for p in EXAMPLE_SCRIPTS}
    assert {"benchmarks/README.md", "examples/torchrun_elastic.sh", "examples/slurm/train.sbatch"} <= read
    assert scripts <= read
    (line, _), *_ = _shell_lines("    python run.py make-data --out d\n", 1)
    assert commands_in(line) == [["make-data", "--out", "d"]]


@pytest.mark.parametrize("args", DOCUMENTED)
def test_every_documented_command_parses(args: list[str]) -> None:
    check_command(args)


def test_the_check_refuses_what_the_command_line_refuses() -> None:
    """An unknown flag, a wrong value, a wrong choice and a wrong combination each fail; placeholders pass."""
    check_command(["evaluate", "--checkpoint", "CKPT", "--data", "DIR", "--size", "N"])
    check_command(["--data", "DIR", "--iters", "N", "--lr", "F"])
    for wrong in (
        ["--iterations", "10"],
        ["--iters", "ten"],
        ["--lr", "-1"],
        ["evaluate", "--checkpoint", "CKPT", "--protocol", "paper", "--data", "DIR"],
        ["evaluate", "--checkpoint", "CKPT", "--maps", "DIR", "--data", "DIR"],
        ["predict", "--checkpoint", "CKPT", "--input", "photos"],
        ["export", "--checkpoint", "CKPT", "--format", "torchscript", "--output", "r3net.pt", "--opset", "18"],
        ["evaluate", "--checkpoint", "CKPT", "--data", "DIR", "..."],
    ):
        with pytest.raises(AssertionError):
            check_command(wrong)


def test_shell_around_a_command_is_read() -> None:
    assert commands_in('CUDA_VISIBLE_DEVICES="" python run.py --nproc 2 2>&1 | head -3') == [["--nproc", "2"]]
    assert commands_in("torchrun --nproc_per_node 4 run.py --data DIR ...") == [["--data", "DIR"]]
    assert commands_in("srun --ntasks-per-node 1 python run.py --nproc 8 >&- && echo done # note") == [["--nproc", "8"]]
    assert commands_in("pip install -e . && python run.py make-data --out d && python run.py --data d/train") == [
        ["make-data", "--out", "d"],
        ["--data", "d/train"],
    ]
    assert commands_in("python benchmarks/run.py --quick") == []
    (line,) = _shell_lines("python run.py evaluate \\\n    --checkpoint CKPT \\\n    --data DIR", 1)
    assert commands_in(line[0]) == [["evaluate", "--checkpoint", "CKPT", "--data", "DIR"]]


# links


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = text.strip().lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    _, prose = _fenced_blocks(page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M):
        slug, n = github_slug(m.group(1)), 1
        unique = slug
        while unique in anchors:  # GitHub numbers repeated headings: slug, slug-1, slug-2
            unique, n = f"{slug}-{n}", n + 1
        anchors.add(unique)
    return anchors


def links_of(page: Path) -> list[tuple[str, int]]:
    """The targets of the Markdown links and images of ``page`` outside code, with their line numbers."""
    _, prose = _fenced_blocks(page.read_text(encoding="utf-8"))
    prose = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), prose)  # code spans hold no links
    return [
        (m.group(1), prose.count("\n", 0, m.start()) + 1)
        for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)
    ]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target, line in links_of(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(REPO)}:{line}: {target}"
        if not linked.exists():
            broken.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors_of(linked):
            broken.append(f"{where}: no heading #{anchor} in {linked.relative_to(REPO)}")
    return broken


@pytest.mark.parametrize("page", LINK_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert links_of(page) or page.name != "README.md", "no links found: the reader is broken"
    assert broken_links(page) == []


def test_slugs_follow_githubs_rules(tmp_path: Path) -> None:
    assert github_slug("gpu_check (`gpu_check.py`): the GPU check") == "gpu_check-gpu_checkpy-the-gpu-check"
    assert github_slug("Adding an option, a backbone or a metric") == "adding-an-option-a-backbone-or-a-metric"
    assert (
        github_slug("The tests behind the documentation's promises") == "the-tests-behind-the-documentations-promises"
    )
    assert github_slug("make-data") == "make-data"
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n## Same\n\n```\n# not a heading\n```\n\n## Same\n", encoding="utf-8")
    assert anchors_of(page) == {"title", "same", "same-1"}


def test_the_readme_stays_short_and_indexes_every_task() -> None:
    """Within 2,000 words, the journey block within its first 700, and right after it one line per task."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    journey = text.index("## Train on your GPU")
    journey_end = text.index("```", text.index("```bash", journey) + 3)
    tasks = text.index("## Tasks")
    assert len(text.split()) <= 2000 and len(text[:journey_end].split()) <= 700
    assert journey < tasks and text.count("\n## ", journey, tasks) == 0  # the index comes right after it
    index = text[tasks : text.index("\n## ", tasks + 1)]
    for task in ("own data", "several GPUs", "smaller GPU", "watch", "resume", "evaluate", "cutouts", "export"):
        assert f"| {task}" in index or task in index, task
    for command in ("serve", "profile", "reproduce", "pytest"):
        assert command in index, command
