"""R3Net (Deng et al., IJCAI 2018) on a torchvision ResNet / ResNeXt backbone (torchvision and timm
weights load after a key rename, ``key_layouts``) or a timm model (``timm_backbone``). The head mirrors the
authors' release module for module (Sequential indices, conv biases, one PReLU slope per activation): their
head keys load unchanged. ``head_width`` scales its channels (1: the paper's 256 and 128)."""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .backbones import backbone_spec, is_timm
from .timm_backbone import TimmBackbone

if TYPE_CHECKING:
    from torchvision.models.resnet import ResNet

HEAD_CHANNELS = 256
REFINE_CHANNELS = 128
NUM_REFINEMENTS = 6

# R3Net's parameter count per backbone, for the disk-space check at start-up: building the model, even on the
# meta device, would import torchvision into the launching process (a second). tests/test_model.py checks them.
NUM_PARAMETERS = {
    "resnext101_32x4d": 56_156_126,
    "resnext101_32x8d": 100_769_758,
    "resnext50_32x4d": 37_007_326,
    "resnet101": 56_527_582,
    "resnet50": 37_535_454,
    "resnet34": 28_676_574,
    "resnet18": 18_568_414,
}


class Backbone(nn.Module):
    """Five feature stages of a ResNet, ``layer0`` (stem) to ``layer4``; ``channels``: each one's output channels."""

    def __init__(self, resnet: ResNet) -> None:
        super().__init__()
        self.layer0 = nn.Sequential(
            OrderedDict(conv1=resnet.conv1, bn1=resnet.bn1, relu=resnet.relu, maxpool=resnet.maxpool)
        )
        for i in range(1, 5):
            self.add_module(f"layer{i}", getattr(resnet, f"layer{i}"))
        expansion = resnet.layer1[0].expansion  # 4 for Bottleneck, 1 for BasicBlock
        self.channels: tuple[int, ...] = (64,) + tuple(c * expansion for c in (64, 128, 256, 512))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:  # the five stage outputs, finest first
        features = []
        for stage in self.children():  # layer0..layer4
            x = stage(x)
            features.append(x)
        return features


def build_backbone(name: str = "resnext101_32x4d") -> Backbone | TimmBackbone:
    """A randomly initialised backbone (``backbone_weights.load_backbone_weights`` loads weights into it): a
    module whose ``forward`` gives the stages finest first and whose ``channels`` are theirs."""
    if is_timm(name):
        return TimmBackbone(name)
    # torchvision (about a second, with torch._dynamo) when a model is built: the launching process
    # of `train` imports this module for its checks but builds no model unless it checks weights
    from torchvision.models import resnet

    spec = backbone_spec(name)
    block = getattr(resnet, spec.block)
    return Backbone(resnet.ResNet(block, list(spec.layers), groups=spec.groups, width_per_group=spec.width_per_group))


def num_parameters(backbone: str, head_width: float = 1.0) -> int:
    """R3Net's parameter count for ``backbone``: ``NUM_PARAMETERS``'s, else counted on the meta device."""
    if backbone in NUM_PARAMETERS and head_width == 1:
        return NUM_PARAMETERS[backbone]
    with torch.device("meta"):
        model = R3Net(backbone, head_width)
    return sum(p.numel() for p in model.parameters())


def _resize(x: torch.Tensor, size: torch.Size | tuple[int, int]) -> torch.Tensor:
    # align_corners=True: the bilinear upsampling of the PyTorch 0.3 era the original was trained with
    if _deterministic_backward(x):
        return resize_by_matmul(x, (int(size[0]), int(size[1])))
    return F.interpolate(x, size=size, mode="bilinear", align_corners=True)


def _deterministic_backward(x: torch.Tensor) -> bool:
    """Under ``--deterministic``, whose CUDA backward of bilinear resizing and adaptive pooling (atomic adds)
    raises: ops with a deterministic backward replace them, on any device."""
    return x.requires_grad and torch.are_deterministic_algorithms_enabled()


def resize_by_matmul(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``F.interpolate(x, size, mode="bilinear", align_corners=True)`` as two matrix products (equal
    within float rounding), whose backward, matrix products again, is deterministic on a GPU."""
    rows = _interpolation_matrix(x.shape[2], size[0], x.dtype, x.device)
    cols = _interpolation_matrix(x.shape[3], size[1], x.dtype, x.device)
    return torch.matmul(torch.matmul(rows, x), cols.t())


@functools.lru_cache(maxsize=64)
def _interpolation_matrix(n_in: int, n_out: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(n_out, n_in)`` linear interpolation weights, align_corners=True, made on ``device`` (no host copy): the
    identity resized (a forward pass, deterministic; only the backward of interpolation is not)."""
    identity = torch.eye(n_in, dtype=torch.float64, device=device)
    return F.interpolate(identity[None], size=n_out, mode="linear", align_corners=True)[0].t().to(dtype)


def _conv_bn_prelu(in_ch: int, out_ch: int, kernel_size: int, dilation: int = 1) -> list[nn.Module]:
    conv = nn.Conv2d(in_ch, out_ch, kernel_size, padding=dilation * (kernel_size // 2), dilation=dilation)
    return [conv, nn.BatchNorm2d(out_ch), nn.PReLU()]


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling (DeepLab v3) of R3Net's high-level path: 1x1, 3x3 at dilation
    2, 4, 6 and an image-level branch, each to ``in_ch // 2`` channels, fused back to ``in_ch``."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        mid = in_ch // 2
        self.conv1 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 1))
        self.conv2 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=2))
        self.conv3 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=4))
        self.conv4 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=6))
        # image-level branch, on the globally pooled map: its BatchNorm sees one value per channel
        # per sample, so training needs batch >= 2
        self.conv5 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 1))
        self.fuse = nn.Sequential(*_conv_bn_prelu(5 * mid, in_ch, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[2:]
        # under --deterministic a mean, whose backward spreads the gradient without atomic adds
        average = x.mean((2, 3), keepdim=True) if _deterministic_backward(x) else F.adaptive_avg_pool2d(x, 1)
        pooled = _resize(self.conv5(average), size)
        branches = [self.conv1(x), self.conv2(x), self.conv3(x), self.conv4(x), pooled]
        return self.fuse(torch.cat(branches, dim=1))


class R3Net(nn.Module):
    """R3Net. ``forward`` returns, in training mode, the seven logit maps ``(predict0, ..., predict6)``
    of shape ``(N, 1, H, W)``; in eval mode, the sigmoid of the last, ``(N, 1, H, W)`` in ``[0, 1]``."""

    def __init__(self, backbone: str = "resnext101_32x4d", head_width: float = 1.0) -> None:
        super().__init__()
        self.backbone: Backbone | TimmBackbone = build_backbone(backbone)
        channels = self.backbone.channels  # layer0..layer4 (a timm model without a stem: layer1..layer4)
        # a head_width that is a multiple of 1/128 keeps the channels whole
        head, refine = round(HEAD_CHANNELS * head_width), round(REFINE_CHANNELS * head_width)

        # Low-level integrated features (layer0..layer2), kept at layer0's resolution.
        self.reduce_low = nn.Sequential(
            *_conv_bn_prelu(sum(channels[:-2]), head, 3),
            *_conv_bn_prelu(head, head, 3),
            *_conv_bn_prelu(head, head, 1),
        )
        # High-level integrated features (layer3, layer4) with multi-scale context.
        self.reduce_high = nn.Sequential(
            *_conv_bn_prelu(channels[-2] + channels[-1], head, 3),
            *_conv_bn_prelu(head, head, 3),
            ASPP(head),
        )
        self.predict0 = nn.Conv2d(head, 1, kernel_size=1)
        for i in range(1, NUM_REFINEMENTS + 1):
            # input: the previous prediction (1 channel) and a head-wide feature map
            block = [*_conv_bn_prelu(head + 1, refine, 3), *_conv_bn_prelu(refine, refine, 3), nn.Conv2d(refine, 1, 1)]
            self.add_module(f"predict{i}", nn.Sequential(*block))

    def integrated_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Low- and high-level integrated features, both at layer0's resolution."""
        *low_levels, l3, l4 = self.backbone(x)
        size0 = low_levels[0].shape[2:]
        low = self.reduce_low(torch.cat([low_levels[0], *(_resize(f, size0) for f in low_levels[1:])], dim=1))
        high = self.reduce_high(torch.cat([l3, _resize(l4, l3.shape[2:])], dim=1))
        return low, _resize(high, size0)

    def predictions(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The 7 logits predict0..predict6 at layer0's resolution, in either mode."""
        low, high = self.integrated_features(x)
        predictions = [self.predict0(high)]
        # Residual refinement alternates low- and high-level features, low first.
        for i in range(1, NUM_REFINEMENTS + 1):
            previous, feature = predictions[-1], low if i % 2 else high
            predictions.append(getattr(self, f"predict{i}")(torch.cat([previous, feature], dim=1)) + previous)
        return predictions

    def side_outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The 7 logits at input size, in either mode (for visualising every refinement step)."""
        return tuple(_resize(p, x.shape[2:]) for p in self.predictions(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        if self.training:
            return self.side_outputs(x)
        return torch.sigmoid(_resize(self.predictions(x)[-1], x.shape[2:]))
