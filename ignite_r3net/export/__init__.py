"""A trained R3Net as one file that runs without this package (ONNX or TorchScript).

* ``writer``: ``export_model``, what ``python run.py export`` runs;
* ``runtime``: loading and running an exported file (``predict --model``), and its contract;
* ``formats``: the formats, suffixes and opsets (plain data: the command line's choices).
"""
