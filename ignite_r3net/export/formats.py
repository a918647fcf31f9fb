"""What ``export`` can write: the formats, the file suffix of each and the ONNX opsets.

Plain data, without torch: the command line's ``export`` choices and ``--help`` come from here."""

FORMATS = ("onnx", "torchscript", "hub")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}  # the file formats; hub writes a folder
DEFAULT_OPSET = 18  # the oldest the exporter writes natively: the widest choice of runtimes
OPSETS = range(18, 24)  # 18..23: torch's exporter writes these
