"""``export``: a trained R3Net as one ONNX or TorchScript file, or as a folder for the Hugging Face Hub
(``writer``), with their checks (``fidelity``, ``quantize``) and the Hub folder's model card (``model_card``)."""
