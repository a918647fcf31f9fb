"""ResNet / ResNeXt backbones exposed as the five stages R3Net taps.

All backbones are built from torchvision's ``ResNet`` class, so a torchvision (or timm) ImageNet
state_dict maps onto them with a one-line key rename (``conv1.*`` -> ``layer0.conv1.*``). Building
one downloads nothing: ``pretrained.py`` fetches and loads weights.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone with torchvision's ResNet class."""

    block: type[nn.Module]
    layers: tuple[int, int, int, int]
    groups: int = 1
    width_per_group: int = 64
    # Name in torchvision's model registry, for its weights; None when torchvision publishes no
    # weights for this architecture.
    torchvision_name: str | None = None
    # ``--pretrained imagenet``: the documented ImageNet-1k weights (README lists them with licences)
    imagenet: str = "IMAGENET1K_V1"


BACKBONES: dict[str, BackboneSpec] = {
    # The paper's backbone. torchvision has no 32x4d ResNeXt-101 weights; timm's Gluon port is
    # trained on ImageNet-1k only (its fb_ssl / fb_swsl tags add YFCC100M / IG-1B images and are
    # licensed for non-commercial use only).
    "resnext101_32x4d": BackboneSpec(
        Bottleneck, (3, 4, 23, 3), 32, 4, None, imagenet="hf-hub:timm/resnext101_32x4d.gluon_in1k"
    ),
    "resnext101_32x8d": BackboneSpec(Bottleneck, (3, 4, 23, 3), 32, 8, "resnext101_32x8d"),
    "resnext50_32x4d": BackboneSpec(Bottleneck, (3, 4, 6, 3), 32, 4, "resnext50_32x4d"),
    "resnet101": BackboneSpec(Bottleneck, (3, 4, 23, 3), torchvision_name="resnet101"),
    "resnet50": BackboneSpec(Bottleneck, (3, 4, 6, 3), torchvision_name="resnet50"),
    "resnet34": BackboneSpec(BasicBlock, (3, 4, 6, 3), torchvision_name="resnet34"),
    "resnet18": BackboneSpec(BasicBlock, (2, 2, 2, 2), torchvision_name="resnet18"),
}


class Backbone(nn.Module):
    """Five feature stages of a ResNet: ``layer0`` (stem) and ``layer1..layer4``.

    ``channels`` gives the output channels of each stage, so a head can size
    its convolutions for any backbone.
    """

    def __init__(self, resnet: ResNet) -> None:
        super().__init__()
        self.layer0 = nn.Sequential(
            OrderedDict(
                conv1=resnet.conv1,
                bn1=resnet.bn1,
                relu=resnet.relu,
                maxpool=resnet.maxpool,
            )
        )
        self.layer1 = resnet.layer1
        self.layer2 = resnet.layer2
        self.layer3 = resnet.layer3
        self.layer4 = resnet.layer4
        expansion = 4 if isinstance(resnet.layer1[0], Bottleneck) else 1
        self.channels: tuple[int, ...] = (64,) + tuple(c * expansion for c in (64, 128, 256, 512))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Return the five stage outputs, finest first."""
        features = []
        for stage in (self.layer0, self.layer1, self.layer2, self.layer3, self.layer4):
            x = stage(x)
            features.append(x)
        return features


def backbone_spec(name: str) -> BackboneSpec:
    """Look up a backbone by name; a ValueError lists the valid names."""
    try:
        return BACKBONES[name]
    except KeyError:
        raise ValueError(f"unknown backbone {name!r}; valid names: {', '.join(sorted(BACKBONES))}") from None


def build_backbone(name: str = "resnext101_32x4d") -> Backbone:
    """A randomly initialised backbone (``pretrained.load_backbone_weights`` loads weights into it)."""
    spec = backbone_spec(name)
    resnet = ResNet(spec.block, list(spec.layers), groups=spec.groups, width_per_group=spec.width_per_group)
    return Backbone(resnet)
