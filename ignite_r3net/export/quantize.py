"""``export --format onnx --quantize int8``: the float ONNX file, once checked, statically quantized by
onnxruntime's quantizer, calibrated on ``--calibrate`` and scored against the float model on the held-out
images of ``--check-data`` (docs/deployment.md, "INT8 files"); a file that loses more than ``--max-drop`` is
refused and nothing is written."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..data.decode import load_image, load_mask
from ..data.folder import IMAGE_EXTS, scan
from ..errors import DataError, ExportError, OptionError
from ..inference.engine import saliency_at_input_size, to_8bit_maps
from ..inference.model import SaliencyFunction, load_exported
from ..metrics.saliency import SaliencyMetrics

# an image, and its mask when the folder is a data set
Sample = tuple[Path, Path | None]


@dataclass(frozen=True)
class Int8Plan:
    """What ``--quantize int8`` calibrates on, checks on, and allows."""

    calibration: list[Sample]
    check: list[Sample]
    check_folder: str
    max_drop: float

    @classmethod
    def of(cls, calibrate: str, check_data: str, max_drop: float) -> Int8Plan:
        """Both folders listed (one-line errors before any work); the held-out images must be others."""
        if Path(calibrate).resolve() == Path(check_data).resolve():
            raise OptionError(
                f"--check-data {check_data} is the --calibrate folder: the INT8 file is checked on held-out images"
            )
        return cls(image_set(calibrate, "--calibrate"), image_set(check_data, "--check-data"), check_data, max_drop)


def image_set(folder: str, flag: str) -> list[Sample]:
    """The images of ``folder`` with their masks when it is a data set (MSRA10K or DUTS layout), else its
    images alone; ``OptionError``/``DataError`` name ``flag``."""
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(f"{flag} {folder} is not a folder")
    pairs, problems = scan(root)
    if pairs and problems:
        raise DataError([f"{flag} {folder}: {problem}" for problem in problems])
    if pairs:
        return [(image, mask) for image, mask in pairs]
    images = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTS)
    if not images:
        raise OptionError(f"{flag} {folder} holds no images ({', '.join(IMAGE_EXTS)})")
    return [(image, None) for image in images]


@dataclass(frozen=True)
class Int8Check:
    """The INT8 file against the float model on the held-out images (max F and MAE: with masks only)."""

    images: int
    folder: str
    map_mae: float  # mean over the images of the MAE between the two 8-bit maps
    float_maxF: float | None = None
    int8_maxF: float | None = None
    float_mae: float | None = None
    int8_mae: float | None = None

    @property
    def loss(self) -> float:
        """What ``--max-drop`` bounds: the max F lost, or without masks the MAE between the maps."""
        if self.float_maxF is None or self.int8_maxF is None:
            return self.map_mae
        return self.float_maxF - self.int8_maxF

    def summary(self) -> str:
        where = f"on {self.images} held-out images of {self.folder}"
        between = f"MAE between the INT8 and float maps {self.map_mae:.4f}"
        if self.float_maxF is None:
            return f"{between} {where} (no masks)"
        return (
            f"max F {self.int8_maxF:.4f} INT8, {self.float_maxF:.4f} float (change {-self.loss:+.4f}); MAE "
            f"{self.int8_mae:.4f} INT8, {self.float_mae:.4f} float; {between}; {where}"
        )


def quantize_in_place(path: Path, model: SaliencyFunction, plan: Int8Plan, metadata: dict[str, str]) -> Int8Check:
    """Replace the float ONNX file ``path`` by its INT8 quantization, scored against ``model`` (the float model,
    uint8 images in), with ``metadata`` and the check's figures; ``ExportError`` when it loses too much."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.images = (load_image(image).unsqueeze(0).contiguous().numpy() for image, _ in plan.calibration)

        def get_next(self) -> dict | None:
            image = next(self.images, None)
            return None if image is None else {"image": image}

    with tempfile.TemporaryDirectory(prefix="int8-") as work:
        prepared, int8 = Path(work) / "float.onnx", Path(work) / "int8.onnx"
        # onnxruntime's shape inference and graph optimisation, as its quantizer asks (symbolic shapes cannot
        # follow the dynamic height and width)
        quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(int8),
            Calibration(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        result = compare(load_exported(int8), model, plan.check, plan.check_folder)
        if result.loss > plan.max_drop:
            raise ExportError(
                f"the INT8 file loses more than --max-drop {plan.max_drop:g}: {result.summary()}; nothing was written"
            )
        quantized = onnx.load(str(int8))
        record = {"quantization": _RECORD.format(len(plan.calibration)), "int8_check": json.dumps(asdict(result))}
        onnx.helper.set_model_props(quantized, {**metadata, **record})
        onnx.save(quantized, str(path))
    return result


_RECORD = (
    "static INT8 by onnxruntime's quantizer: QDQ, INT8 weights per output channel, UINT8 activations calibrated "
    "(min-max) on {} images"
)


@torch.no_grad()
def compare(int8: SaliencyFunction, model: SaliencyFunction, samples: list[Sample], folder: str) -> Int8Check:
    """The 8-bit maps of ``int8`` and ``model`` on each image at its own size, scored against each other and,
    where the images have masks, against the masks."""
    runs = {"float": model, "int8": int8}
    scores = {side: SaliencyMetrics() for side in runs}
    differences = []
    for image_path, mask_path in samples:
        image = load_image(image_path).unsqueeze(0).contiguous()
        maps = {side: to_8bit_maps(saliency_at_input_size(run, image))[0] for side, run in runs.items()}
        differences.append(float((maps["float"].float() - maps["int8"].float()).abs().mean() / 255))
        if mask_path is not None:
            mask = load_mask(mask_path)[0]
            for side, metric in scores.items():
                metric.update(([maps[side]], [mask]))
    figures: dict[str, float] = {}
    if all(mask is not None for _, mask in samples):
        for side, metric in scores.items():
            computed = metric.compute()
            figures.update({f"{side}_maxF": float(computed["maxF"]), f"{side}_mae": float(computed["mae"])})
    return Int8Check(len(samples), folder, sum(differences) / len(differences), **figures)
