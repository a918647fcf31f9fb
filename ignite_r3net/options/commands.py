"""The options of ``evaluate``, ``predict``, ``compare``, ``export``, ``profile`` and ``reproduce`` (besides its
training options, ``TrainConfig``'s), one dataclass each, and the groups and help texts several commands share (where
the work runs, ``ProcessOptions``; how a checkpoint's maps are made, ``InferenceOptions``). Each ``validate``
raises ``OptionError`` for values or combinations that are wrong whatever the files."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionError
from ..evaluation.comparison_table import DEFAULT_METRICS, REFERENCE_NAMES
from ..export.formats import DEFAULT_OPSET, FORMATS, OPSETS, QUANTIZATIONS, SUFFIXES, TARGETS
from ..metrics.keys import METRIC_KEYS, canonical_metric
from ..model.backbones import BACKBONE_NAMES
from .fields import NOT_NEGATIVE, POSITIVE_COUNT, TCP_PORT, Rule, check_fields, group, option

_RESIZED_BACK = (
    "the saliency is resized back (bilinear) to the image's own size, at which maps are written (and scored); "
    "default: full resolution, as the original"
)
CHECKPOINT_HELP = (
    "training checkpoint, best_model_*.pt, an original R3Net release state_dict, or a model on the Hugging "
    "Face Hub written by 'export --format hub': hf-hub:ORG/NAME[@REVISION] (fetched into the Hugging Face "
    "cache, HF_HOME; HF_HUB_OFFLINE=1 reads only the cache)"
)
BACKBONE_HELP = (
    "backbone of the checkpoint; default: the one config.json beside it names (a run's, or the Hub repository's), else "
    "inferred from its weights"
)
BACKENDS = ("nccl", "gloo")
DEVICES = ("auto", "cuda", "cpu")
BACKEND_HELP = (
    "the collective library the processes talk through (it does not choose where they compute: see --device); "
    "default: nccl when the processes run on GPUs, else gloo"
)
DEVICE_HELP = (
    "where each process computes: cuda = one GPU per process (at most as many processes per node as GPUs; a "
    "process that sees one GPU uses it), cpu = the CPU only, even on a GPU host (the GPUs are hidden from the "
    "processes), auto = cuda when a GPU is visible, else cpu"
)
PROTOCOLS = ("standard", "r3net")
INFERENCE_AMP_MODES = ("off", "bf16")
TF32_MODES = ("on", "off")
TRACKERS = ("mlflow", "wandb", "clearml")
TF32_HELP = (
    "TensorFloat-32 on Ampere and newer GPUs: on (as torch does by default for convolutions, which are "
    "nearly all of R3Net's work): float32 convolutions and matrix products round their inputs to a 10-bit "
    "mantissa and accumulate in float32 on the tensor cores, faster; off: full float32, as on the CPU. No effect "
    "on the CPU, nor on what --amp runs in bf16/fp16"
)
PROGRESS_HELP = (
    "show how far the work has come on rank 0: a bar over the work with its rate, elapsed time and ETA "
    "on a terminal, a plain line every 10%% when stderr is a file (SLURM logs); --no-progress shows none"
)
PROTOCOL_HELP = (
    "'standard' = PySODMetrics; 'r3net' = the original R3Net code's mae and maxF (marked † in the "
    "tables and listed under 'protocol_metrics' in the JSON; the other metrics stay standard)"
)


def data_root_option() -> str | None:
    """``--data-root``: where the standard data sets are found by name (``data.registry``)."""
    return option(
        None,
        "folder holding the standard data sets, which the data options then take by name (ECSSD, HKU-IS, "
        "PASCAL-S, SOD, DUT-OMRON, DUTS-TE, MSRA10K, DUTS-TR; any alias, case and layout: hkuis, DUT-O, "
        "pascals, ...); a count other than the published one is a warning; default: none (the data options "
        "are folders)",
        metavar="DIR",
    )


@dataclass(kw_only=True)
class ProcessOptions:
    """Where the work of a command that spreads it over processes runs."""

    nproc: int = option(1, "processes to spawn (on GPUs: at most one per GPU)", rule=POSITIVE_COUNT)
    device: str = option("auto", DEVICE_HELP, choices=DEVICES)
    backend: str | None = option(None, BACKEND_HELP, choices=BACKENDS)
    master_port: int | None = option(
        None, "rendezvous port of the processes on this host; default: a free port", rule=TCP_PORT, metavar="PORT"
    )
    verbose: bool = option(False, "print ignite's launcher messages too (spawn parameters, end of run)")


@dataclass(kw_only=True)
class InferenceOptions:
    """How a checkpoint's maps are made: backbone, input size, CRF, precision, DataLoader workers."""

    backbone: str | None = option(None, BACKBONE_HELP)
    size: int | None = option(
        None,
        f"run the model on each image resized to N x N pixels (bilinear, antialiased), as many saliency methods "
        f"test (e.g. 352); {_RESIZED_BACK}",
        rule=POSITIVE_COUNT,
        exclusive="input size",
    )
    max_side: int | None = option(
        None,
        f"run the model on each image scaled down, aspect kept, so that its longer side is at most N pixels "
        f"(smaller images as they are): for photos much larger than the training crops; {_RESIZED_BACK}",
        rule=POSITIVE_COUNT,
        exclusive="input size",
    )
    crf: bool = option(
        False, "refine maps with a dense CRF (original R3Net parameters); needs the crf extra", action="store_true"
    )
    amp: str = option(
        "off",
        "mixed precision inference: bf16 runs the model in bfloat16 (faster on CPUs with AVX-512 BF16/AMX and "
        "on recent GPUs; maps may differ by a gray level); off: float32",
        choices=INFERENCE_AMP_MODES,
    )
    tf32: str = option(
        "on", TF32_HELP + "; off gives the maps closest to the CPU's (not for an exported --model)", choices=TF32_MODES
    )
    workers: int = option(
        2, "DataLoader worker processes per process (0 loads in the process itself)", rule=NOT_NEGATIVE
    )


POSITIVE_COUNT_EACH = Rule(lambda v: all(n >= 1 for n in v), "must be positive integers")
_FRACTION = Rule(lambda v: 0 <= v <= 1, "must be between 0 and 1")
_DIGITS = Rule(lambda v: 1 <= v <= 8, "must be between 1 and 8")
_OPSET = Rule(lambda v: v in OPSETS, f"must be between {OPSETS[0]} and {OPSETS[-1]}")
HEAD_WIDTH = Rule(lambda v: v > 0 and float(v * 128).is_integer(), "must be a positive multiple of 1/128")


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
        None, "write each map as OUT/<dataset>/<stem>.png; default: none (the maps are scored, not kept)", metavar="OUT"
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


@dataclass(kw_only=True)
class PredictOptions:
    """Everything ``predict`` is asked to do: which model makes the maps, of which images, into which folder."""

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
        "already holds from the same model and the same options that change pixels (a stopped run continues "
        "where it stopped)",
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
        if (self.checkpoint is None) == (self.model is None):
            raise OptionError("give one of --checkpoint and --model")
        if self.model is not None:
            if self.inference.backbone is not None:
                raise OptionError("--backbone goes with --checkpoint (an exported --model holds its backbone)")
            if self.inference.amp != "off":
                raise OptionError("--amp goes with --checkpoint (an exported --model runs as it was exported)")


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
    out: str = option(help="output folder (created; rerun into it to reuse)", metavar="OUT")
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


@dataclass(kw_only=True)
class ExportOptions:
    """Everything ``export`` is asked to do: which checkpoint, written as which format, to which file."""

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
    )
    target: str | None = option(
        None,
        "rembg: an ONNX file for rembg's u2net_custom model (rembg i -m u2net_custom -x "
        '\'{"model_path": "FILE.onnx"}\'): float32 (1, 3, 320, 320) input that rembg resizes and normalises '
        "with the ImageNet mean and std itself, the saliency probability as its first output, which rembg "
        "min-max scales; predict --model does not read it; onnx only; default: none (uint8 images of any "
        "batch and size, normalised inside the graph, for predict --model and onnxruntime)",
        flag="--for",
        choices=TARGETS,
    )
    backbone: str | None = option(None, BACKBONE_HELP)
    quantize: str | None = option(
        None,
        "int8: a statically quantized ONNX file (onnxruntime's quantizer: INT8 weights per output channel, UINT8 "
        "activations calibrated on --calibrate's images), written only if it keeps the float model's quality "
        "on --check-data's images (--max-drop); predict --model, serve --model and profile --onnx run it; onnx "
        "only; default: none (float32)",
        choices=QUANTIZATIONS,
    )
    calibrate: str | None = option(
        None,
        "--quantize: a folder of images (a data set folder's images too) the activation ranges are calibrated "
        "on, each at its own size: a few dozen like those the model will see; required with --quantize",
        metavar="DIR",
    )
    check_data: str | None = option(
        None,
        "--quantize: held-out images (not --calibrate's), each run at its own size by the INT8 file and the float "
        "model: a data set folder (images and masks: max F and MAE of each) or a folder of images (the MAE "
        "between the two maps); required with --quantize",
        metavar="DIR",
    )
    max_drop: float = option(
        0.01,
        "--quantize: the most the INT8 file may lose on --check-data: max F (with masks), else the MAE between "
        "its maps and the float model's (0 to 1); a file that loses more is not written; default: 0.01",
        rule=NOT_NEGATIVE,
        metavar="D",
    )
    # the model card of --format hub
    results: str | None = option(
        None,
        "hub: the evaluation table of the model card, from the results.json of 'evaluate --json' (one "
        "row per data set) or of 'compare' (every method, as compare's table.md); default: none (a card "
        "without results)",
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
    profile: str | None = option(
        None,
        "hub: the model card's cost table (parameters, GMACs, latency, images/s, peak memory per row), from the "
        "JSON of 'profile --json'; default: none (a card without a cost table)",
        metavar="FILE",
    )
    repo_id: str | None = option(
        None,
        "hub: the repository the folder will be uploaded to, for the model card's usage lines "
        "(--checkpoint hf-hub:ORG/NAME); default: the placeholder ORG/NAME",
        metavar="ORG/NAME",
    )

    def validate(self) -> None:
        check_fields(self)
        if self.opset is not None and self.format != "onnx":
            raise OptionError("--opset applies to --format onnx only")
        if self.target is not None and self.format != "onnx":
            raise OptionError(f"--for {self.target} applies to --format onnx only ({self.target} runs ONNX files)")
        if self.quantize is not None and (self.format != "onnx" or self.target is not None):
            raise OptionError("--quantize int8 applies to --format onnx without --for (the file predict --model runs)")
        int8 = {"--calibrate": self.calibrate, "--check-data": self.check_data}
        lacking = [flag for flag, value in int8.items() if value is None]
        if self.quantize is not None and lacking:
            raise OptionError(f"--quantize int8 needs {' and '.join(lacking)} DIR")
        if self.quantize is None and len(lacking) < len(int8):
            raise OptionError(f"{next(f for f, v in int8.items() if v is not None)} goes with --quantize int8")
        card = {"--results": self.results, "--license": self.license, "--trained-on": self.trained_on}
        card["--repo-id"] = self.repo_id
        card["--profile"] = self.profile
        given = [flag for flag, value in card.items() if value]
        if given and self.format != "hub":
            raise OptionError(f"{given[0]} applies to --format hub only (it goes into the model card)")

    @property
    def onnx_opset(self) -> int:
        return DEFAULT_OPSET if self.opset is None else self.opset


# the training options ``reproduce`` sets unless given: the original recipe on MSRA10K, continued
REPRODUCE_DEFAULTS = {"recipe": "r3net-paper", "data": ["MSRA10K"], "output_dir": "runs/r3net-paper", "resume": "auto"}


@dataclass(kw_only=True)
class ReproduceOptions:
    """What ``reproduce`` does besides training: the model to evaluate, extra columns, tolerances."""

    checkpoint: str | None = option(
        None,
        "evaluate this model instead of training one: a checkpoint file or hf-hub:ORG/NAME[@REVISION]; default: "
        "none (train, then evaluate the final checkpoint)",
        metavar="CKPT",
    )
    author_maps: str | None = option(
        None,
        "the authors' released saliency maps: a folder with one subfolder per test set (named as the set "
        "or an alias, e.g. ECSSD/, hkuis/), scored by the same code as ours, in a column of its own (tells "
        "evaluation differences from training differences); default: none (no such column)",
        metavar="DIR",
    )
    seeds: list[int] | None = option(
        None,
        "train one model per seed (each in OUTPUT_DIR/seed-N) and report the mean and the spread (sample "
        "standard deviation, min and max); default: one model, --seed",
        nargs="+",
        metavar="SEED",
    )
    tolerance_maxf: float = option(
        0.01,
        "a max F within this of the reference counts as reproduced (an absolute difference of max F, a score "
        "from 0 to 1)",
        rule=NOT_NEGATIVE,
        metavar="T",
    )
    tolerance_mae: float = option(
        0.005,
        "an MAE within this of the reference counts as reproduced (an absolute difference of MAE, from 0 to 1)",
        rule=NOT_NEGATIVE,
        metavar="T",
    )

    def validate(self) -> None:
        check_fields(self)
        if self.checkpoint is not None and self.seeds is not None:
            raise OptionError("--seeds trains one model per seed; --checkpoint skips training: give one")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise OptionError(f"--seeds: a seed is given twice: {' '.join(map(str, self.seeds))}")


PROFILE_AMP_MODES = ("off", "bf16", "fp16")


@dataclass(kw_only=True)
class ProfileOptions:
    """What ``profile`` measures: which model, at which sizes and batches, on which device, in which modes."""

    checkpoint: str | None = option(
        None, CHECKPOINT_HELP + "; default: none (then --backbone alone: the bare architecture)", metavar="CKPT"
    )
    backbone: str | None = option(
        None,
        f"the architecture to profile (random weights: the cost does not depend on them), one of: "
        f"{BACKBONE_NAMES}; or with --checkpoint the checkpoint's backbone; default: with --checkpoint the "
        "one config.json beside it names, else inferred from "
        "its weights",
        metavar="NAME",
    )
    head_width: float = option(
        1.0,
        "with --backbone: the head width of the architecture (train --head-width); a checkpoint's is its own; "
        "default: 1",
        rule=HEAD_WIDTH,
        metavar="F",
    )
    sizes: list[int] = option(
        default_factory=lambda: [300, 300, 400, 300],
        help="input sizes in pixels, height then width, one pair or several (--size 300 300 400 300, or --size "
        "given again); default: 300 300 (the recipe's training crop) and 400 300 (a typical test image)",
        flag="--size",
        nargs="+",
        action="extend",
        metavar="H W",
        rule=POSITIVE_COUNT_EACH,
    )
    batch_sizes: list[int] = option(
        default_factory=lambda: [1],
        help="images per batch, one or several (--batch-size 1 8); one row per size and batch",
        flag="--batch-size",
        nargs="+",
        metavar="N",
        rule=POSITIVE_COUNT_EACH,
    )
    device: str = option(
        "auto",
        "where the model runs: cuda (GPU 0), cpu, or auto = cuda when a GPU is visible, else cpu",
        choices=DEVICES,
    )
    amp: list[str] = option(
        default_factory=lambda: ["off"],
        help="precision modes, one row each: off = float32, bf16 / fp16 = autocast to bfloat16 / float16 "
        "(a mode this device or torch does not run is a row saying why)",
        nargs="+",
        choices=PROFILE_AMP_MODES,
    )
    channels_last: bool = option(False, "run the model and its input in channels-last memory format")
    compile: bool = option(
        False, "run the model through torch.compile (compiled during the warm-up; a failure is a row saying why)"
    )
    onnx: str | None = option(
        None,
        "also time this file written by 'export --format onnx' with onnxruntime on the same inputs (one row per "
        "size and batch; its parameters and GMACs are the PyTorch model's); default: none",
        metavar="FILE",
    )
    train: bool = option(
        False,
        "time one training step instead of inference: the training augmentation on the device, forward, the 7 "
        "side-output losses, backward and the SGD step (the recipe's optimizer); needs a batch of 2 or more",
    )
    find_max_batch: bool = option(
        False,
        "with --train, on a GPU: find the largest batch per GPU whose training step fits in its memory, at each "
        "--size and --amp (a doubling search, then halving the gap; each try is one real step), and print it",
    )
    warmup: int = option(2, "untimed runs before each row's timed ones", rule=NOT_NEGATIVE)
    repeats: int = option(10, "timed runs per row (median and 95th percentile of their latencies)", rule=POSITIVE_COUNT)
    json_path: str | None = option(
        None,
        "also write the header and every row as JSON, rewritten whole as each row comes; default: none (printed only)",
        flag="--json",
        metavar="FILE",
    )

    def validate(self) -> None:
        check_fields(self)
        if self.checkpoint is None and self.backbone is None:
            raise OptionError("give --checkpoint CKPT or --backbone NAME (the model to profile)")
        if len(self.sizes) % 2:
            given = " ".join(map(str, self.sizes))
            raise OptionError(f"--size takes pairs of height and width, got {len(self.sizes)} numbers: {given}")
        if self.find_max_batch and not self.train:
            raise OptionError("--find-max-batch goes with --train (it searches the batch of a training step)")
        if self.onnx is not None and self.train:
            raise OptionError("--onnx times inference; it does not go with --train")

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The ``--size`` pairs as (height, width)."""
        return [(self.sizes[i], self.sizes[i + 1]) for i in range(0, len(self.sizes), 2)]
