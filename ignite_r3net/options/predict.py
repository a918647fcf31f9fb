"""``predict``'s options: which model makes the maps, of which images, into which folder."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .fields import POSITIVE_COUNT, Rule, check_fields, group, option
from .shared import CHECKPOINT_HELP, InferenceOptions, ProcessOptions, progress_option

_FRACTION = Rule(lambda v: 0 <= v <= 1, "must be between 0 and 1")


@dataclass(kw_only=True)
class PredictOptions:
    """Everything ``predict`` is asked to do."""

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
        help="folder for the maps (or cutouts), each named <input stem>.png; a rerun into it skips those it "
        "already holds from the same model and options (a stopped run continues where it stopped)",
        metavar="DIR",
    )
    cutout: bool = option(
        False,
        "write a cutout instead of the gray map: an RGBA PNG of the image (RGB, EXIF orientation applied) "
        "with the saliency map as its alpha channel, as <stem>.png in --output; the alpha is the map "
        "predict would write, so the map is not written separately; works with --model too",
        action="store_true",
    )
    threshold: float | None = option(
        None,
        "a hard result: 255 where the saliency (the 8-bit map / 255) is at least T, else 0; for the "
        "--cutout alpha (fully opaque or fully transparent pixels) or, without --cutout, binary maps",
        rule=_FRACTION,
        metavar="T",
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
        nproc="processes to spawn (on GPUs one per GPU, at most as many as the GPUs; see --device); the images "
        "are dealt to them and the maps are those of one process; under torchrun or srun, leave it out",
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
