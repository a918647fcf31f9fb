"""Inference shared by the commands that make maps: ``engine`` (the model's 8-bit maps at the size asked, and the
ignite Engine of validation and ``evaluate``), ``exported`` (ONNX and TorchScript files), ``model`` (the one loader
of a checkpoint, ``hf-hub:`` model or exported file), ``batches`` (images of equal size run together), ``crf`` (the
original dense-CRF refinement) and ``cutout`` (the finished map, the cutout and its background)."""
