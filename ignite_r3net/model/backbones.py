"""The backbones R3Net can be built on: how torchvision's ``ResNet`` class builds each, and their
ImageNet weights; besides them, any timm model as ``timm:NAME`` (``timm_backbone.py``). Plain data,
without torch: the command line lists the names in ``--help``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone with torchvision's ResNet class."""

    block: str  # torchvision's residual block class: "BasicBlock" or "Bottleneck"
    layers: tuple[int, int, int, int]
    groups: int = 1
    width_per_group: int = 64
    # name in torchvision's model registry, for its weights; None: torchvision publishes none
    torchvision_name: str | None = None
    # ``--pretrained imagenet``: the documented ImageNet-1k weights (docs/training.md lists them with licences)
    imagenet: str = "IMAGENET1K_V1"


BACKBONES: dict[str, BackboneSpec] = {
    # The paper's backbone. torchvision has no 32x4d ResNeXt-101 weights; timm's Gluon port is
    # trained on ImageNet-1k only (its fb_ssl / fb_swsl tags add YFCC100M / IG-1B images and are
    # licensed for non-commercial use only).
    "resnext101_32x4d": BackboneSpec(
        "Bottleneck", (3, 4, 23, 3), 32, 4, None, imagenet="hf-hub:timm/resnext101_32x4d.gluon_in1k"
    ),
    "resnext101_32x8d": BackboneSpec("Bottleneck", (3, 4, 23, 3), 32, 8, "resnext101_32x8d"),
    "resnext50_32x4d": BackboneSpec("Bottleneck", (3, 4, 6, 3), 32, 4, "resnext50_32x4d"),
    "resnet101": BackboneSpec("Bottleneck", (3, 4, 23, 3), torchvision_name="resnet101"),
    "resnet50": BackboneSpec("Bottleneck", (3, 4, 6, 3), torchvision_name="resnet50"),
    "resnet34": BackboneSpec("BasicBlock", (3, 4, 6, 3), torchvision_name="resnet34"),
    "resnet18": BackboneSpec("BasicBlock", (2, 2, 2, 2), torchvision_name="resnet18"),
}


TIMM_PREFIX = "timm:"
BACKBONE_NAMES = f"{', '.join(BACKBONES)}, or {TIMM_PREFIX}NAME (a timm model)"


def is_timm(name: str) -> bool:
    """Whether ``name`` is a timm model, ``timm:NAME``."""
    return name.startswith(TIMM_PREFIX)


def is_known_backbone(name: str) -> bool:
    """One of ``BACKBONES``, or ``timm:NAME`` (whether timm builds NAME is found when the model is built)."""
    return name in BACKBONES or (is_timm(name) and len(name) > len(TIMM_PREFIX))


def model_name(backbone: str, head_width: float = 1.0) -> str:
    """``R3Net (BACKBONE)``, with the head width when it is not the paper's (1)."""
    return f"R3Net ({backbone})" if head_width == 1 else f"R3Net ({backbone}, head width {head_width:g})"


def backbone_spec(name: str) -> BackboneSpec:
    """Look up a backbone by name; a ValueError lists the valid names."""
    try:
        return BACKBONES[name]
    except KeyError:
        raise ValueError(f"unknown backbone {name!r}; valid names: {', '.join(sorted(BACKBONES))}") from None
