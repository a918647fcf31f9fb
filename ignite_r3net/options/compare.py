"""``compare``'s options: tables, curves and figures of many methods on many data sets."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from ..metrics.keys import DEFAULT_METRICS, METRIC_KEYS, REFERENCE_NAMES, canonical_metric
from .common import PROGRESS_HELP, PROTOCOL_HELP, PROTOCOLS, InferenceOptions, ProcessOptions, data_root_option
from .fields import NOT_NEGATIVE, OUTPUT_FOLDER, Rule, check_fields, group, option

_DIGITS = Rule(lambda v: 1 <= v <= 8, "must be between 1 and 8")


@dataclass(kw_only=True)
class CompareOptions:
    """Everything ``compare`` is asked to do: the data sets, the methods, the output folder, the tables' form."""

    datasets: list[str] = option(
        help="data sets: DIR is the masks folder (maps are matched to its masks by file stem), or a data "
        "set folder holding images and masks (images/ + masks/, Imgs/ + GT/, DUTS-TE-Image/ + DUTS-TE-Mask/, "
        "or name.jpg beside name.png), which checkpoint methods need for their images; a masks folder "
        "inside such a folder works too",
        nargs="+",
        metavar="NAME=DIR",
    )
    data_root: str | None = data_root_option()
    methods: list[str] = option(
        help="methods: SOURCE is a folder with one subfolder of maps per data set NAME (SOURCE/<dataset>/"
        "<stem>.png, as released maps come; a folder matching the name up to case and punctuation is "
        "accepted), or a checkpoint: a file, or hf-hub:ORG/NAME[@REVISION] (a model written by 'export --format "
        "hub'), whose maps are first made as by 'evaluate --save-maps' into OUT/maps/<method>/<dataset> and "
        "kept for the next run",
        nargs="+",
        metavar="NAME=SOURCE",
    )
    out: str = option(help="output folder (created; rerun into it to reuse)", aliases=OUTPUT_FOLDER, metavar="OUT")
    metrics: list[str] = option(
        default_factory=lambda: list(DEFAULT_METRICS),
        help=f"table columns per data set, in this order, from: {', '.join(METRIC_KEYS)} (any case; results.json "
        f"always holds all nine); default: {' '.join(DEFAULT_METRICS)}",
        nargs="+",
        metavar="METRIC",
    )
    protocol: str = option("standard", PROTOCOL_HELP, choices=PROTOCOLS)
    reference: list[str] | None = option(
        None,
        "add published numbers as marked rows (‡, not ranked: another code scored them), on the data sets "
        "given by a standard name or alias: r3net-paper (the paper's table) and r3net-released-maps (the "
        "authors' released maps scored by a public evaluation); each number's source is in the table's note "
        "and in the package's evaluation/paper_numbers.json; default: none",
        nargs="+",
        choices=REFERENCE_NAMES,
        metavar="NAME",
    )
    allow_missing: bool = option(
        False,
        "score a method that lacks some maps of a data set on the maps it has (the cell is marked "
        "and not ranked) instead of stopping; a method lacking a whole data set is always just a '-'",
        action="store_true",
    )
    digits: int = option(3, "decimals in the tables (ranks use the printed values)", rule=_DIGITS)
    show: int = option(
        6,
        "images in the visual comparison OUT/figures/visual_<dataset>.png and .pdf (one row per image: the "
        "image, the ground truth, each method's map in command-line order; 7.16 in wide, 300 dpi cells, "
        "vector PDF): the N images where the methods' MAE differs most (with one method: where its MAE is "
        "largest), ties broken by name; 0 draws none. A data set given as a masks folder without images "
        "has no image column; a missing map is a grey cell marked 'missing'",
        rule=NOT_NEGATIVE,
    )
    show_stems: list[str] | None = option(
        None,
        "the images of the visual comparison, by file name without extension, in this order (instead of "
        "--show's choice); each data set's figure shows those among its images; default: --show's choice",
        nargs="+",
        metavar="STEM",
    )
    inference: InferenceOptions = group(InferenceOptions)
    processes: ProcessOptions = group(
        ProcessOptions,
        nproc="processes for scoring (and for checkpoint inference): on GPUs one per GPU, at most as many as the "
        "GPUs (--device cpu: CPU processes); the numbers are those of one process",
    )
    progress: bool = option(True, PROGRESS_HELP)

    def __post_init__(self) -> None:
        # names in any case (maxf -> maxF); unknown ones stay for validate to name
        self.metrics = [canonical_metric(m) or m for m in self.metrics]

    def validate(self) -> None:
        unknown = [m for m in self.metrics if m not in METRIC_KEYS]
        if unknown:
            raise OptionError(f"--metrics: unknown {', '.join(unknown)} (choose from {', '.join(METRIC_KEYS)})")
        if len(set(self.metrics)) != len(self.metrics):
            raise OptionError(f"--metrics: a metric is given twice: {' '.join(self.metrics)}")
        check_fields(self)
