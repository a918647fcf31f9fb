"""What ``export`` can write: formats, suffixes, ONNX opsets. Plain data, without torch, for ``--help``."""

FORMATS = ("onnx", "torchscript", "hub")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}  # the file formats; hub writes a folder
DEFAULT_OPSET = 18  # the oldest the exporter writes natively (17 fails for R3Net): the most runtimes
OPSETS = range(18, 24)  # 18..23: torch's exporter writes these
TARGETS = ("rembg",)  # --for: programs whose own input contract an ONNX file can follow
QUANTIZATIONS = ("int8",)  # --quantize: onnxruntime's static quantization of an ONNX file
