"""A trained R3Net as one file that runs without this package (ONNX or TorchScript: ``writer``), or
as a folder for the Hugging Face Hub (``hub_folder``, ``model_card``); ``formats`` is plain data for
the command line. Loading and running an exported file is ``ignite_r3net.exported_model``.
"""
