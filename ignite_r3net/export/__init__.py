"""``export``: a trained R3Net as one ONNX or TorchScript file, or as a folder for the Hugging Face Hub,
and running such a file (``writer``); ``formats`` is plain data for the command line."""
