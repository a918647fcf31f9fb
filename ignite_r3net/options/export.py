"""``export``'s options: which checkpoint, written as which format, to which file."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from ..export.formats import DEFAULT_OPSET, FORMATS, OPSETS, SUFFIXES
from .fields import Rule, check_fields, option
from .shared import CHECKPOINT_HELP, backbone_option

_OPSET = Rule(lambda v: v in OPSETS, f"must be between {OPSETS[0]} and {OPSETS[-1]}")


@dataclass(kw_only=True)
class ExportOptions:
    """Everything ``export`` is asked to do: built once from the command line, checked by
    ``validate`` and passed whole to ``export_model``."""

    checkpoint: str = option(help=CHECKPOINT_HELP)
    format: str = option(
        help="onnx (torch.onnx's torch.export-based exporter; run it with onnxruntime or another ONNX "
        "runtime; needs the onnx extra) or torchscript (torch.jit.trace; load it with torch.jit.load or "
        "libtorch C++)",
        choices=FORMATS,
    )
    output: str = option(
        help=f"file to write: ending in {SUFFIXES['onnx']} for onnx, {SUFFIXES['torchscript']} for torchscript; "
        "an existing file is replaced",
        metavar="FILE",
    )
    opset: int | None = option(
        None,
        f"ONNX opset, {OPSETS[0]} to {OPSETS[-1]} (default: {DEFAULT_OPSET}, the oldest, which the most "
        "runtimes read); onnx only",
        rule=_OPSET,
        metavar="N",
    )
    backbone: str | None = backbone_option()

    def validate(self) -> None:
        """Raise ``OptionError`` for values or combinations that are wrong whatever the files."""
        check_fields(self)
        if self.opset is not None and self.format != "onnx":
            raise OptionError("--opset applies to --format onnx only")

    @property
    def onnx_opset(self) -> int:
        return DEFAULT_OPSET if self.opset is None else self.opset
