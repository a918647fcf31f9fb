"""R3Net and its backbones, the key layouts of weights files, pretrained sources (local, torchvision,
Hugging Face Hub) and trained models. Import from the submodule that defines a name; ``backbones``
needs no torch, so the command line lists the backbones without importing it."""
