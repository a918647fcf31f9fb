"""A trained R3Net as one ONNX or TorchScript file, or as a folder for the Hugging Face Hub with its
``model_card`` (``writer``); ``formats`` is plain data for the command line."""
