"""A trained R3Net as one file that runs without this package (ONNX or TorchScript), or as a
folder for the Hugging Face Hub.

* ``writer``: ``export_model``, what ``python run.py export`` runs;
* ``hub_folder``, ``model_card``: ``--format hub``'s folder and its README.md;
* ``runtime``: loading and running an exported file (``predict --model``), and its contract;
* ``formats``: the formats, suffixes and opsets (plain data: the command line's choices).
"""
