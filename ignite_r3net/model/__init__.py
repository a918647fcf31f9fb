"""R3Net and its backbones (``r3net``, ``backbones``), the key layouts of weights files
(``key_layouts``), pretrained sources (``backbone_weights``, ``hub``) and trained models
(``trained_model``).

Import from the submodule that defines a name; ``backbones`` needs no torch, so the command line
lists the backbones without importing it.
"""
