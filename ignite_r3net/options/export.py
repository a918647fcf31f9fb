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
    """Everything ``export`` is asked to do."""

    checkpoint: str = option(help=CHECKPOINT_HELP)
    format: str = option(
        help="onnx (torch.onnx's torch.export-based exporter; run it with onnxruntime or another ONNX "
        "runtime; needs the onnx extra), torchscript (torch.jit.trace; load it with torch.jit.load or "
        "libtorch C++) or hub (a folder to upload to the Hugging Face Hub: model.safetensors, config.json "
        "and a model card README.md; then any command takes --checkpoint hf-hub:ORG/NAME)",
        choices=FORMATS,
    )
    output: str = option(
        help=f"file to write: ending in {SUFFIXES['onnx']} for onnx, {SUFFIXES['torchscript']} for torchscript, "
        "an existing file is replaced; for hub, a folder that is new, empty or holds an earlier hub export "
        "(replaced whole)",
        metavar="PATH",
    )
    opset: int | None = option(
        None,
        f"ONNX opset, {OPSETS[0]} to {OPSETS[-1]} (default: {DEFAULT_OPSET}, the oldest, which the most "
        "runtimes read); onnx only",
        rule=_OPSET,
        metavar="N",
    )
    backbone: str | None = backbone_option()
    # the model card of --format hub
    results: str | None = option(
        None,
        "hub: the evaluation table of the model card, from the results.json of 'evaluate --json' (one "
        "row per data set) or of 'compare' (every method, as compare's table.md)",
        metavar="FILE",
    )
    license: str | None = option(
        None,
        "hub: the licence id in the model card's metadata (a Hugging Face id: mit, apache-2.0, "
        "cc-by-nc-4.0, other, ...; default: mit, this package's); the weights may carry only what the "
        "training data's and starting weights' terms allow",
        metavar="ID",
    )
    trained_on: list[str] | None = option(
        None,
        "hub: the training data sets (names or Hub dataset ids, e.g. DUTS-TR) for the model card's "
        "'datasets' metadata; default: none listed (the card shows the run's data folders)",
        nargs="+",
        metavar="NAME",
    )
    repo_id: str | None = option(
        None,
        "hub: the repository the folder will be uploaded to, for the model card's usage lines "
        "(--checkpoint hf-hub:ORG/NAME); default: the placeholder ORG/NAME",
        metavar="ORG/NAME",
    )

    def validate(self) -> None:
        """Raise ``OptionError`` for values or combinations that are wrong whatever the files."""
        check_fields(self)
        if self.opset is not None and self.format != "onnx":
            raise OptionError("--opset applies to --format onnx only")
        card = {"--results": self.results, "--license": self.license, "--trained-on": self.trained_on}
        card["--repo-id"] = self.repo_id
        given = [flag for flag, value in card.items() if value]
        if given and self.format != "hub":
            raise OptionError(f"{given[0]} applies to --format hub only (it goes into the model card)")

    @property
    def onnx_opset(self) -> int:
        return DEFAULT_OPSET if self.opset is None else self.opset
