"""ignite_r3net: train and evaluate R3Net saliency detection with pytorch-ignite."""

__version__ = "0.1.0"
