"""``predict``'s options: maps or cutouts of images, and which of them change pixels (its rerun key)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .common import CHECKPOINT_HELP, COLOUR_EXAMPLES, MODEL_HELP, PROGRESS_HELP, InferenceOptions, ProcessOptions
from .fields import POSITIVE_COUNT, Rule, check_fields, group, option

_FRACTION = Rule(lambda v: 0 <= v <= 1, "must be between 0 and 1")


@dataclass(kw_only=True)
class PredictOptions:
    """Everything ``predict`` is asked to do: which model makes the maps, of which images, into which folder."""

    checkpoint: str | None = option(None, CHECKPOINT_HELP, one_of="source")
    model: str | None = option(None, MODEL_HELP, one_of="source", metavar="FILE")
    inputs: list[str] = option(
        help="image files and/or folders (images directly inside, sorted)", flag="--input", nargs="+", metavar="PATH"
    )
    output: str = option(
        help="folder for the maps (or cutouts), each named <input stem>.png; a rerun into it skips those it "
        "already holds from the same model and the same options that change pixels (a stopped run continues "
        "where it stopped)",
        aliases=("--output-dir",),
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
        "--cutout alpha (fully opaque or fully transparent pixels) or, without --cutout, binary maps; "
        "default: none (the 256 gray levels)",
        rule=_FRACTION,
        metavar="T",
    )
    refine_foreground: bool = option(
        False,
        "with --cutout: where the map is soft (between 0 and 255: hair, fur, blurred edges) the photo's pixels mix "
        "the subject's colour with the old background's, a fringe that shows on another background; give those "
        "pixels the subject's own colours, estimated from the photo and the map by blur-fusion (Forte and Pitié "
        "2021), on the device the model runs on; pixels where the map is 0 or 255 stay the photo's",
        action="store_true",
    )
    background: str | None = option(
        None,
        f"with --cutout: composite the cutout over COLOR ({COLOUR_EXAMPLES}) or over the image FILE (scaled to "
        "cover the photo, centred), into an RGB <stem>.png (or .jpg with --jpeg) instead of the RGBA cutout; with "
        "--refine-foreground the subject's estimated colours are composited; default: none (an RGBA cutout)",
        metavar="COLOR|FILE",
    )
    jpeg: bool = option(
        False,
        "with --background: write each composite as <stem>.jpg, JPEG at quality 95 (smaller, lossy), instead of "
        "<stem>.png",
        action="store_true",
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
    progress: bool = option(True, PROGRESS_HELP)

    def validate(self) -> None:
        check_fields(self)
        self.inference.check_model(self.checkpoint, self.model)
        needs = {"--refine-foreground": self.refine_foreground, "--background": self.background is not None}
        given = [flag for flag, value in needs.items() if value]
        if given and not self.cutout:
            raise OptionError(f"{given[0]} goes with --cutout (it acts on the cutout's colours)")
        if self.jpeg and self.background is None:
            raise OptionError("--jpeg goes with --background (a cutout keeps its transparency in a PNG)")


# The options of ``predict`` that do not decide a map's pixels, each with why: left out of the key that says
# whether a map in the output folder was made by the same model and options (``predict_worker.MapRecord``), so
# that changing one keeps the maps. Every other option is in the key (``evaluation.predict.pixel_options``): an
# option added later counts until it is listed here.
PREDICT_NOT_PIXELS: dict[str, str] = {
    "checkpoint": "the key holds the model file's sha256, not the name it is given by",
    "model": "the key holds the model file's sha256, not the name it is given by",
    "inputs": "which images are predicted, not how: each map is looked up by its own file name",
    "output": "where the maps go: the key is recorded in that folder",
    "workers": "how many DataLoader processes read the images",
    "batch_size": "how many images run together: a batch's maps are those of batch 1 (the model is in eval mode)",
    "overwrite": "redoes every map whatever the key says",
    "progress": "what the console shows",
    "verbose": "what the console shows",
    "nproc": "how many processes share the images: N processes write the maps of one, byte for byte",
    "backend": "how the processes talk, not what they compute",
    "master_port": "where the processes meet",
    "device": "float32 on a CPU or a GPU differs in rounding only; TF32, which moves gray levels, is in the "
    "key as what it does on this device (``evaluation.predict.pixel_options``)",
}
