"""The package's layers as docs/design.md declares them: each part (a subfolder or a top-level module of
``ignite_r3net/``) imports only parts on earlier rows of its table, imports inside functions included; every part
is in a row. A new import that runs back up fails here with the module, the import and both rows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "ignite_r3net"


def declared_layers(design: Path = REPO / "docs" / "design.md") -> dict[str, int]:
    """``{part: row}`` from the table under docs/design.md's "Layers" heading."""
    text = design.read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row, parts in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M):
        for part in re.findall(r"`(\w+)`", parts):
            rows[part] = int(row)
    return rows


def _part(module: str) -> str:
    """``ignite_r3net.training.start`` -> ``training``; ``ignite_r3net.config`` -> ``config``."""
    return module.split(".")[1] if module.count(".") else ""


def imports_of(package: Path) -> list[tuple[str, str, int]]:
    """Every import of the package by its modules, anywhere in them: ``(module path, imported module, line)``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        here = module.split(".")[:-1]  # the package a relative import starts from (an __init__'s own)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                names = [f"{target}.{alias.name}" for alias in node.names] if not node.module else [target]
                found += [(str(path.relative_to(package.parent)), name, node.lineno) for name in names]
            elif isinstance(node, ast.Import):
                found += [(str(path.relative_to(package.parent)), alias.name, node.lineno) for alias in node.names]
    return [(where, name, line) for where, name, line in found if name.startswith(package.name + ".")]


def imports_against_the_layers(package: Path, layers: dict[str, int]) -> list[str]:
    """The imports from one part to another that is not on an earlier row, and the parts in no row."""
    parts = {p.stem for p in package.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    parts |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    wrong = [f"{part}: in no row of docs/design.md's layers" for part in sorted(parts - layers.keys())]
    for where, name, line in imports_of(package):
        own, other = _part(".".join(Path(where).with_suffix("").parts)), _part(name)
        if own in layers and other in layers and own != other and layers[other] >= layers[own]:
            wrong.append(f"{where}:{line} imports {name}: row {layers[other]}, not below its own row {layers[own]}")
    return wrong


def test_every_import_runs_down_the_declared_layers() -> None:
    layers = declared_layers()
    assert len(layers) >= 20 and layers["errors"] < layers["data"] < layers["config"] < layers["training"]
    assert imports_against_the_layers(PACKAGE, layers) == []


@pytest.mark.parametrize("late", [False, True])
def test_an_import_back_up_is_named_with_its_rows(tmp_path: Path, late: bool) -> None:
    """A low part importing a higher one (at the top, or inside a function) fails; a part in no row too."""
    package = tmp_path / "ignite_r3net"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "__init__.py").write_text("")
    upward = "from ..config import TrainConfig\n"
    (package / "data" / "loader.py").write_text(f"def build():\n    {upward}" if late else upward)
    (package / "config.py").write_text("from .data.loader import build\n")
    (package / "extra.py").write_text("")
    wrong = imports_against_the_layers(package, {"data": 3, "config": 7})
    assert wrong == [
        "extra: in no row of docs/design.md's layers",
        f"ignite_r3net/data/loader.py:{2 if late else 1} imports ignite_r3net.config: row 7, not below its own row 3",
    ]
