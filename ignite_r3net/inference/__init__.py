"""Inference shared by the commands that make maps: ``engine`` (the model's 8-bit maps at the size asked, and the
ignite Engine of validation and ``evaluate``), ``model`` (the one loader of a checkpoint, ``hf-hub:`` model or
exported ONNX or TorchScript file), ``batches`` (images of equal size run together), ``crf`` (the original
dense-CRF refinement), ``cutout`` (the finished map, the cutout and its background) and ``foreground`` (the
subject's own colours at soft edges)."""
