"""Options as dataclass fields carrying their ``--help`` text, argparse extras and rule, so that a
command's flags (``command_line.add_options``), its checks (``check_fields``) and the options read from a
JSON file (``read_options``: ``train --config``) cannot drift apart. ``group`` composes a shared group
of options into a command's; a field without help is no option."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OptionError


@dataclass(frozen=True)
class Rule:
    """What an option's value must satisfy, and the one wording of the error when it does not."""

    holds: Callable[[Any], bool]
    wording: str


# where a command writes answers to --output, and to --output-dir where it writes a folder (a command's older
# spelling, --out or --save-maps, stays its first flag)
OUTPUT_FOLDER = ("--output", "--output-dir")

POSITIVE_COUNT = Rule(lambda v: v >= 1, "must be a positive integer")
NOT_NEGATIVE = Rule(lambda v: v >= 0, "must not be negative")
POSITIVE = Rule(lambda v: v > 0, "must be positive")
TCP_PORT = Rule(lambda v: 1 <= v <= 65535, "must be a TCP port (1-65535)")


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    rule: Rule | None = None,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    one_of: str | None = None,
    exclusive: str | None = None,
    **argparse_kwargs: Any,
) -> Any:
    """A dataclass field that is a command-line option. ``rule`` is checked on any value but None;
    ``flag`` replaces ``--field-name``, ``aliases`` are further spellings of it; ``one_of`` names a
    required group of exclusive flags (``--checkpoint | --maps``), ``exclusive`` one of which at most one
    is given (``--size | --max-side``); ``argparse_kwargs`` go to ``add_argument``."""
    metadata = dict(
        help=help, rule=rule, flag=flag, aliases=aliases, one_of=one_of, exclusive=exclusive, argparse=argparse_kwargs
    )
    return field(default=default, default_factory=default_factory, metadata=metadata)


def group(cls: type, omit: tuple[str, ...] = (), **help_texts: str) -> Any:
    """A field holding a shared group of options, ``help_texts`` replacing some of its flags' help; the options
    ``omit`` names are no flags of this command and keep their defaults."""
    return field(default_factory=cls, metadata={"group": help_texts, "omit": omit})


def is_option(f: dataclasses.Field) -> bool:
    return "help" in f.metadata


def is_group(f: dataclasses.Field) -> bool:
    return "group" in f.metadata


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of an option field: ``batch_size`` -> ``--batch-size``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def flag_named(options_type: type, name: str) -> str:
    """The flag of the option ``name`` of ``options_type`` (or spelled as one, for other names)."""
    found = [f for f in dataclasses.fields(options_type) if f.name == name]
    return flag_of(found[0]) if found else "--" + name.replace("_", "-")


def flags_named(options_type: type, names: Iterable[str]) -> list[str]:
    """The flags of the options ``names`` of ``options_type`` and of its groups, in the order of its fields."""
    wanted, flags = set(names), []
    for f in dataclasses.fields(options_type):
        if is_group(f):
            flags += flags_named(typing.cast(type, f.default_factory), wanted)
        elif is_option(f) and f.name in wanted:
            flags.append(flag_of(f))
    return flags


def values_by_flag(options: Any, names: Iterable[str]) -> dict[str, str]:
    """``{"--lr": "0.001", ...}``: the options ``names`` by flag, as text (what the ranks compare)."""
    return {flag_named(type(options), name): str(getattr(options, name)) for name in names}


def option_fields(options: Any) -> Iterator[tuple[dataclasses.Field, Any]]:
    """Every option field of ``options`` and of the groups it holds, with its value, in order."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if is_group(f):
            yield from option_fields(value)
        elif is_option(f):
            yield f, value


def problem(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with ``value`` for the option ``f`` (``must be positive, got -1``), or None."""
    if value is None:
        return None
    choices = f.metadata["argparse"].get("choices")
    given = value if isinstance(value, list) else [value]
    if choices is not None and any(v not in choices for v in given):
        return f"must be one of {', '.join(choices)}, got {value!r}"
    rule: Rule | None = f.metadata["rule"]
    if rule is not None and not rule.holds(value):
        return f"{rule.wording}, got {value}"
    return None


def check_fields(options: Any) -> None:
    """Raise ``OptionError`` naming the first option against its choices or rule, or two given of one
    ``exclusive`` group (argparse checks the command line; this is for Python callers)."""
    exclusive_flags: dict[str, str] = {}  # group -> the flag given of it
    for f, value in option_fields(options):
        group_name = f.metadata.get("exclusive")
        if group_name and value is not None:
            if group_name in exclusive_flags:
                raise OptionError(f"{exclusive_flags[group_name]} and {flag_of(f)} exclude each other; give one")
            exclusive_flags[group_name] = flag_of(f)
        wrong = problem(f, value)
        if wrong:
            raise OptionError(f"{flag_of(f)} {wrong}")


def load_json(path: str | Path, what: str) -> Any:
    """The JSON value in ``path``; ``OptionError`` beginning with ``what`` when it cannot be read or is no JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise OptionError(f"{what}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:
        raise OptionError(f"{what}: not JSON: {e}") from None


def read_options(cls: type, path: str | Path, flag: str, records: Iterable[str] = ()) -> dict[str, Any]:
    """The values of the JSON object in ``path`` for the dataclass ``cls``, by field name, each checked as
    the command line checks its flag, and those of the keys ``records`` unchecked; ``OptionError`` names
    ``flag``, the file and the key."""
    values = load_json(path, f"{flag} {path}")
    if not isinstance(values, dict):
        raise OptionError(f"{flag} {path}: expected a JSON object of options, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    checked = {}
    for key, value in values.items():
        if key in records:
            checked[key] = value
            continue
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
