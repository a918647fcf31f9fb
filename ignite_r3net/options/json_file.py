"""Options read from a JSON file (``train --config``: a run's ``config.json``), each key checked as
the command line checks its flag, with one error line naming the file and the key."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from ..errors import OptionError
from .fields import is_option, problem


def load_json(path: str | Path, what: str) -> Any:
    """The JSON value in ``path``; ``OptionError`` beginning with ``what`` when it cannot be read or is no JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise OptionError(f"{what}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:
        raise OptionError(f"{what}: not JSON: {e}") from None


def read_options(cls: type, path: str | Path, flag: str) -> dict[str, Any]:
    """The values of ``path`` (a JSON object) for the dataclass ``cls``, by field name; ``OptionError``
    naming ``flag``, the file and the key for an unknown key or a value of the wrong type or rule."""
    values = load_json(path, f"{flag} {path}")
    if not isinstance(values, dict):
        raise OptionError(f"{flag} {path}: expected a JSON object of options, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    checked = {}
    for key, value in values.items():
        if key not in fields:
            raise OptionError(f"{flag} {path}: unknown key {key!r}")
        if typing.get_origin(hints[key]) is list and isinstance(value, str):
            value = [value]  # one value of a list option (train's --data, one folder before it took several)
        wrong = _type_problem(value, hints[key]) or (problem(fields[key], value) if is_option(fields[key]) else None)
        if wrong:
            raise OptionError(f"{flag} {path}: {key!r} {wrong}")
        checked[key] = float(value) if hints[key] is float else value
    return checked


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "an object"}


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why a JSON value does not fit a field of type ``hint``, or None."""
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    kinds = [typing.get_origin(a) or a for a in allowed if a is not type(None)]
    for kind in kinds:
        if isinstance(value, bool) != (kind is bool):  # JSON's true is no number, 1 no boolean
            continue
        if isinstance(value, kind) or (kind is float and isinstance(value, int)):
            return None
    expected = " or ".join(_KINDS.get(k, k.__name__) for k in kinds)
    return f"must be {expected}{' or null' if type(None) in allowed else ''}, got {json.dumps(value)}"
