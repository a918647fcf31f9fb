"""``predict``'s options: which model makes the maps, of which images, into which folder."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .fields import check_fields, group, option
from .shared import CHECKPOINT_HELP, InferenceOptions


@dataclass(kw_only=True)
class PredictOptions:
    """Everything ``predict`` is asked to do: built once from the command line, checked by
    ``validate`` and passed whole to ``predict``."""

    checkpoint: str | None = option(None, CHECKPOINT_HELP, one_of="source")
    model: str | None = option(
        None,
        "a model written by 'export': FILE.onnx runs with onnxruntime (needs the onnx extra), "
        "any other name is loaded as TorchScript; same maps as --checkpoint",
        one_of="source",
        metavar="FILE",
    )
    inputs: list[str] = option(
        help="image files and/or folders (images directly inside, sorted)", flag="--input", nargs="+", metavar="PATH"
    )
    output: str = option(help="folder for the maps", metavar="DIR")
    inference: InferenceOptions = group(InferenceOptions)

    def validate(self) -> None:
        """Raise ``OptionError`` for values or combinations that are wrong whatever the files."""
        check_fields(self)
        if (self.checkpoint is None) == (self.model is None):
            raise OptionError("give one of --checkpoint and --model")
        if self.model is not None:
            if self.inference.backbone is not None:
                raise OptionError("--backbone goes with --checkpoint (an exported --model holds its backbone)")
            if self.inference.amp != "off":
                raise OptionError("--amp goes with --checkpoint (an exported --model runs as it was exported)")
