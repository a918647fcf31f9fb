"""``evaluate``'s options: a checkpoint on data sets, or saliency maps already on disk."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionError
from .fields import check_fields, group, option
from .shared import (
    CHECKPOINT_HELP,
    InferenceOptions,
    ProcessOptions,
    data_root_option,
    progress_option,
    protocol_option,
)


@dataclass(kw_only=True)
class EvaluateOptions:
    """Everything ``evaluate`` is asked to do."""

    checkpoint: str | None = option(None, CHECKPOINT_HELP, one_of="source")
    maps: str | None = option(
        None, "folder of saliency maps (PNG/JPG/BMP, any method's) to score; needs --gt", one_of="source"
    )
    data: list[str] | None = option(
        None,
        "data set folders (MSRA10K or DUTS layout), each DIR or NAME=DIR: NAME is its table row and JSON key "
        "(default: the folder's name); with --checkpoint",
        nargs="+",
        metavar="[NAME=]DIR",
    )
    data_root: str | None = data_root_option()
    gt: str | None = option(
        None,
        "ground-truth masks matched to --maps by file stem: the masks folder, or a data set folder holding "
        "images and masks (its masks are used)",
        metavar="DIR",
    )
    protocol: str = protocol_option()
    json_path: str | None = option(
        None, "also write the numbers as JSON keyed by data set name", flag="--json", metavar="FILE"
    )
    per_image: str | None = option(
        None,
        "also write every image's own scores as CSV: dataset, image (file stem) and the nine metrics of that "
        "image alone: mae, adpF and adpE (at its adaptive threshold), Sm, wF, meanF and meanE (the mean of "
        "its F and E curves over the 256 thresholds), maxF and maxE (their maximum; with --protocol r3net, "
        "maxF from its own precision and recall). The data set's score is the mean of its images' column "
        "for all but maxF and maxE (the maxima of the mean curves). Rows by data set, then stem",
        metavar="FILE.csv",
    )
    inference: InferenceOptions = group(InferenceOptions)
    save_maps: str | None = option(None, "write each map as OUT/<dataset>/<stem>.png", metavar="OUT")
    processes: ProcessOptions = group(
        ProcessOptions,
        nproc="processes to spawn (on GPUs one per GPU, at most as many as the GPUs; on the CPU, see --device, they "
        "divide the cores among them unless OMP_NUM_THREADS is set)",
    )
    progress: bool = progress_option()
    # not options: set by ``compare``, which names the data sets itself and prints its own tables
    names: list[str] | None = field(default=None)
    quiet: bool = field(default=False)

    def validate(self) -> None:
        """Raise ``OptionError`` for values or combinations that are wrong whatever the files."""
        check_fields(self)
        if (self.checkpoint is None) == (self.maps is None):
            raise OptionError("give one of --checkpoint and --maps")
        if self.maps is not None:
            if self.gt is None:
                raise OptionError("--maps needs --gt DIR (the ground-truth masks)")
            if self.data:
                raise OptionError("--data goes with --checkpoint; with --maps give the masks as --gt")
            acting_on_predictions = (
                ("--save-maps", self.save_maps),
                ("--crf", self.inference.crf),
                ("--size", self.inference.size),
                ("--max-side", self.inference.max_side),
            )
            for flag, given in acting_on_predictions:
                if given:
                    raise OptionError(f"{flag} needs --checkpoint (it acts on predictions)")
            return
        if self.gt is not None:
            raise OptionError("--gt goes with --maps; with --checkpoint give the data sets as --data")
        if not self.data:
            raise OptionError("--checkpoint needs --data DIR [DIR ...]")
        if self.names is not None and len(self.names) != len(self.data):
            raise OptionError(f"{len(self.names)} data set names for {len(self.data)} --data folders")
