"""``predict``'s options: which model makes the maps, of which images, into which folder."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .fields import POSITIVE_COUNT, check_fields, group, option
from .shared import CHECKPOINT_HELP, InferenceOptions, ProcessOptions, progress_option


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
    output: str = option(
        help="folder for the maps; a rerun into it skips the maps it already holds from the same model "
        "and options (a stopped run continues where it stopped)",
        metavar="DIR",
    )
    inference: InferenceOptions = group(InferenceOptions)
    batch_size: int = option(
        8,
        "images of equal size predicted together, at most this many, and no more pixels than this many "
        "400x300 images (larger images in smaller batches); maps equal those of batch 1 within the model's "
        "numerics",
        rule=POSITIVE_COUNT,
    )
    overwrite: bool = option(
        False, "predict every map again, also those the folder already holds from the same model", action="store_true"
    )
    processes: ProcessOptions = group(
        ProcessOptions,
        nproc="processes to spawn (one per GPU with NCCL, CPU processes with gloo); the images are dealt to "
        "them and the maps are those of one process; under torchrun or srun, leave it out",
    )
    progress: bool = progress_option()

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
