"""``evaluate``'s options: a checkpoint's maps (or maps on disk) scored against masks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionError
from .common import (
    CHECKPOINT_HELP,
    PROGRESS_HELP,
    PROTOCOL_HELP,
    PROTOCOLS,
    InferenceOptions,
    ProcessOptions,
    data_root_option,
)
from .fields import OUTPUT_FOLDER, check_fields, group, option


@dataclass(kw_only=True)
class EvaluateOptions:
    """Everything ``evaluate`` is asked to do: a checkpoint on data sets, or saliency maps already on disk."""

    checkpoint: str | None = option(None, CHECKPOINT_HELP, one_of="source")
    maps: str | None = option(
        None, "folder of saliency maps (PNG/JPG/BMP, any method's) to score; needs --gt", one_of="source", metavar="DIR"
    )
    data: list[str] | None = option(
        None,
        "data set folders (MSRA10K or DUTS layout), each DIR or NAME=DIR: NAME is its table row and JSON key "
        "(default: the folder's name); required with --checkpoint",
        nargs="+",
        metavar="[NAME=]DIR",
    )
    data_root: str | None = data_root_option()
    gt: str | None = option(
        None,
        "ground-truth masks matched to --maps by file stem: the masks folder, or a data set folder holding "
        "images and masks (its masks are used); required with --maps",
        metavar="DIR",
    )
    protocol: str = option("standard", PROTOCOL_HELP, choices=PROTOCOLS)
    json_path: str | None = option(
        None,
        "also write the numbers as JSON keyed by data set name; default: none (printed only)",
        flag="--json",
        metavar="FILE",
    )
    per_image: str | None = option(
        None,
        "also write every image's own scores as CSV: dataset, image (file stem) and the nine metrics of that "
        "image alone: mae, adpF and adpE (at its adaptive threshold), Sm, wF, meanF and meanE (the mean of "
        "its F and E curves over the 256 thresholds), maxF and maxE (their maximum; with --protocol r3net, "
        "maxF from its own precision and recall). The data set's score is the mean of its images' column "
        "for all but maxF and maxE (the maxima of the mean curves). Rows by data set, then stem; default: none",
        metavar="FILE.csv",
    )
    inference: InferenceOptions = group(InferenceOptions)
    save_maps: str | None = option(
        None,
        "write each map as OUT/<dataset>/<stem>.png; default: none (the maps are scored, not kept)",
        aliases=OUTPUT_FOLDER,
        metavar="OUT",
    )
    processes: ProcessOptions = group(
        ProcessOptions,
        nproc="processes to spawn (on GPUs one per GPU, at most as many as the GPUs; on the CPU, see --device, they "
        "divide the cores among them unless OMP_NUM_THREADS is set)",
    )
    progress: bool = option(True, PROGRESS_HELP)
    # not options: set by ``compare``, which names the data sets itself and prints its own tables
    names: list[str] | None = field(default=None)
    quiet: bool = field(default=False)

    def validate(self) -> None:
        check_fields(self)
        if (self.checkpoint is None) == (self.maps is None):
            raise OptionError("give one of --checkpoint and --maps")
        if self.maps is not None:
            if self.gt is None:
                raise OptionError("--maps needs --gt DIR (the ground-truth masks)")
            if self.data:
                raise OptionError("--data goes with --checkpoint; with --maps give the masks as --gt")
            on_predictions = {"--save-maps": self.save_maps, "--crf": self.inference.crf, "--size": self.inference.size}
            on_predictions["--max-side"] = self.inference.max_side
            given = [flag for flag, value in on_predictions.items() if value]
            if given:
                raise OptionError(f"{given[0]} needs --checkpoint (it acts on predictions)")
            return
        if self.gt is not None:
            raise OptionError("--gt goes with --maps; with --checkpoint give the data sets as --data")
        if not self.data:
            raise OptionError("--checkpoint needs --data DIR [DIR ...]")
        if self.names is not None and len(self.names) != len(self.data):
            raise OptionError(f"{len(self.names)} data set names for {len(self.data)} --data folders")
