"""The flags of an options dataclass (``add_options``: help, defaults, choices, required and exclusive groups,
from the fields' metadata), and the parsed command line read back into it (``options_from_args``)."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from .fields import flag_of, is_group, is_option

T = TypeVar("T")


def with_default(help_text: str, default: Any) -> str:
    """``help_text`` ending in ``(default: ...)``, unless the default is None (the text says what giving no value
    means) or the text says ``default:`` already (argparse's ``%(default)s`` cannot show a default that
    ``add_options`` suppresses). A flag's default reads on or off, a list's its values (``none`` for ``[]``)."""
    if default is None or "default:" in help_text:
        return help_text
    if isinstance(default, bool):
        default = "on" if default else "off"
    elif isinstance(default, list):
        default = " ".join(map(str, default)) or "none"
    return f"{help_text} (default: {default})"


def add_options(parser: argparse.ArgumentParser, cls: type, omit: tuple[str, ...] = (), /, **help_texts: str) -> None:
    """One flag per option field of ``cls`` and of its groups but those ``omit`` names, with the field's help (or
    ``help_texts[name]``). A field without a default is a required flag; fields sharing ``one_of`` form a required
    group of mutually exclusive flags, those sharing ``exclusive`` an optional one. Only the options given reach the
    namespace."""
    hints = typing.get_type_hints(cls)
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    one_of: dict[str, list[str]] = {}  # each required group's flags
    for f in dataclasses.fields(cls):
        if is_option(f) and f.metadata.get("one_of"):
            one_of.setdefault(f.metadata["one_of"], []).append(flag_of(f))
    for f in dataclasses.fields(cls):
        if is_group(f):
            add_options(parser, typing.cast(type, f.default_factory), f.metadata["omit"], **f.metadata["group"])
            continue
        if not is_option(f) or f.name in omit:  # filled in by the program, or not this command's
            continue
        kwargs = dict(f.metadata["argparse"])
        help_text = help_texts.get(f.name, f.metadata["help"])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs.update(required=True, help=f"{help_text} (required)")
        else:
            make_default = typing.cast(Callable[[], Any], f.default_factory)
            default = make_default() if f.default is dataclasses.MISSING else f.default
            kwargs.update(default=argparse.SUPPRESS, help=with_default(help_text, default))
            if f.metadata.get("one_of"):
                kwargs["help"] += f" (required: one of {' and '.join(one_of[f.metadata['one_of']])})"
        kind = _option_type(hints[f.name])
        if kind is bool:
            kwargs.setdefault("action", argparse.BooleanOptionalAction)
        else:
            kwargs["type"] = kind
        if kind is int:
            kwargs.setdefault("metavar", "N")  # "--iters N", not "--iters ITERS": the help says what N counts
        target: Any = parser
        group_name: str | None = f.metadata.get("one_of") or f.metadata.get("exclusive")
        if group_name:  # the names of one_of and exclusive groups differ
            if group_name not in exclusive:
                exclusive[group_name] = parser.add_mutually_exclusive_group(required=bool(f.metadata.get("one_of")))
            target = exclusive[group_name]
        target.add_argument(flag_of(f), *f.metadata.get("aliases", ()), dest=f.name, **kwargs)


def _option_type(hint: object) -> type:
    """The type argparse converts each value to: ``str`` for ``str | None`` and ``list[str]``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is list:
        hint = typing.get_args(hint)[0]
    return typing.cast(type, hint)


def given_options(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The options of the dataclass ``cls`` (not of its groups) given on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if is_option(f) and hasattr(args, f.name)}


def options_from_args(cls: type[T], args: argparse.Namespace) -> T:
    """The ``cls`` instance of the parsed command line: the options given, the defaults for the others."""
    values = given_options(cls, args)
    for f in dataclasses.fields(typing.cast(Any, cls)):
        if is_group(f):
            values[f.name] = options_from_args(typing.cast(type, f.default_factory), args)
    return cls(**values)
