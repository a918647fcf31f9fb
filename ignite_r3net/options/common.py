"""What several commands' options share: the groups (where the work runs, ``ProcessOptions``; how a checkpoint's
maps are made, ``InferenceOptions``), the help texts and the choices."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import OptionError

if TYPE_CHECKING:
    from ..distributed.topology import LaunchSpec
from .fields import NOT_NEGATIVE, POSITIVE_COUNT, TCP_PORT, Rule, option

COLOUR_EXAMPLES = "a name such as white, or #RRGGBB"
_RESIZED_BACK = (
    "the saliency is resized back (bilinear) to the image's own size, at which maps are written (and scored); "
    "default: full resolution, as the original"
)
CHECKPOINT_HELP = (
    "training checkpoint, best_model_*.pt, an original R3Net release state_dict, or a model on the Hugging "
    "Face Hub written by 'export --format hub': hf-hub:ORG/NAME[@REVISION] (fetched into the Hugging Face "
    "cache, HF_HOME; HF_HUB_OFFLINE=1 reads only the cache)"
)
MODEL_HELP = (
    "a model written by 'export': FILE.onnx runs with onnxruntime (needs the onnx extra), any other name is loaded as "
    "TorchScript; same maps as --checkpoint"
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
AMP_MODES = ("off", "bf16", "fp16")  # train's and profile's; the autocast dtype of each: inference.AMP_DTYPES
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

    def launch_spec(self) -> LaunchSpec:
        """Where the workers run: on one node; under srun too, they meet on a free port unless ``--master-port``
        is given (SLURM's derived port is the training run's)."""
        from ..distributed.topology import LaunchSpec  # imports torch: not for --help

        return LaunchSpec(**dataclasses.asdict(self))  # our fields are some of its

    def on_device(self) -> ProcessOptions:
        """These options with ``--device`` resolved (``use_device``: before anything asks torch about CUDA)."""
        from ..distributed.process_setup import use_device

        return dataclasses.replace(self, device=use_device(self.launch_spec()))


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

    def check_model(self, checkpoint: str | None, model: str | None) -> None:
        """The checks of a command given a ``--checkpoint`` or an exported ``--model`` (``predict``, ``serve``)."""
        if (checkpoint is None) == (model is None):
            raise OptionError("give one of --checkpoint and --model")
        if model is not None:
            if self.backbone is not None:
                raise OptionError("--backbone goes with --checkpoint (an exported --model holds its backbone)")
            if self.amp != "off":
                raise OptionError("--amp goes with --checkpoint (an exported --model runs as it was exported)")


HEAD_WIDTH = Rule(lambda v: v > 0 and float(v * 128).is_integer(), "must be a positive multiple of 1/128")
