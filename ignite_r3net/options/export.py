"""``export``'s options: an ONNX, TorchScript or Hub file of a trained model."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .common import BACKBONE_HELP, CHECKPOINT_HELP
from .fields import NOT_NEGATIVE, Rule, check_fields, option
from .formats import DEFAULT_OPSET, FORMATS, OPSETS, QUANTIZATIONS, SUFFIXES, TARGETS

_OPSET = Rule(lambda v: v in OPSETS, f"must be between {OPSETS[0]} and {OPSETS[-1]}")


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
        aliases=("--output-dir",),
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
