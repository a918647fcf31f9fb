"""R3Net: Recurrent Residual Refinement Network (Deng et al., IJCAI 2018).

The head mirrors the authors' release module for module (same Sequential
indices, same conv biases, one shared PReLU slope per activation), so an
original checkpoint's head keys load unchanged; only the backbone keys are
renamed (see weights.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ignite_r3net.model.backbones import build_backbone

HEAD_CHANNELS = 256
REFINE_CHANNELS = 128
NUM_REFINEMENTS = 6


def _resize(x: torch.Tensor, size: torch.Size | tuple[int, int]) -> torch.Tensor:
    # align_corners=True reproduces the bilinear upsampling of the PyTorch 0.3
    # era the original was trained with.
    return F.interpolate(x, size=size, mode="bilinear", align_corners=True)


def _conv_bn_prelu(in_ch: int, out_ch: int, kernel_size: int, dilation: int = 1) -> list[nn.Module]:
    padding = dilation * (kernel_size // 2)
    return [
        nn.Conv2d(in_ch, out_ch, kernel_size, padding=padding, dilation=dilation),
        nn.BatchNorm2d(out_ch),
        nn.PReLU(),
    ]


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling (DeepLab v3) as used in R3Net's high-level path.

    Four parallel convolutions (1x1; 3x3 at dilation 2, 4, 6) plus an image-level
    branch, each to ``in_ch // 2`` channels, fused back to ``in_ch``.
    """

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        mid = in_ch // 2
        self.conv1 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 1))
        self.conv2 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=2))
        self.conv3 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=4))
        self.conv4 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 3, dilation=6))
        # Image-level branch: applied to the globally pooled map. Its BatchNorm
        # sees one value per channel per sample, so training needs batch >= 2.
        self.conv5 = nn.Sequential(*_conv_bn_prelu(in_ch, mid, 1))
        self.fuse = nn.Sequential(*_conv_bn_prelu(5 * mid, in_ch, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[2:]
        pooled = _resize(self.conv5(F.adaptive_avg_pool2d(x, 1)), size)
        branches = [self.conv1(x), self.conv2(x), self.conv3(x), self.conv4(x), pooled]
        return self.fuse(torch.cat(branches, dim=1))


def _refinement_block() -> nn.Sequential:
    # Input: previous prediction (1 channel) concatenated with a 256-ch feature map.
    return nn.Sequential(
        *_conv_bn_prelu(HEAD_CHANNELS + 1, REFINE_CHANNELS, 3),
        *_conv_bn_prelu(REFINE_CHANNELS, REFINE_CHANNELS, 3),
        nn.Conv2d(REFINE_CHANNELS, 1, kernel_size=1),
    )


class R3Net(nn.Module):
    """R3Net saliency network.

    ``forward`` returns, in training mode, the seven logit maps
    ``(predict0, ..., predict6)`` each of shape ``(N, 1, H, W)``; in eval mode,
    the sigmoid of the final one, ``(N, 1, H, W)`` in ``[0, 1]``.

    Example::

        >>> model = R3Net("resnet18").eval()
        >>> model(torch.rand(1, 3, 64, 64)).shape
        torch.Size([1, 1, 64, 64])
    """

    def __init__(self, backbone: str = "resnext101_32x4d") -> None:
        super().__init__()
        self.backbone = build_backbone(backbone)
        c0, c1, c2, c3, c4 = self.backbone.channels

        # Low-level integrated features (layer0..layer2), kept at layer0's resolution.
        self.reduce_low = nn.Sequential(
            *_conv_bn_prelu(c0 + c1 + c2, HEAD_CHANNELS, 3),
            *_conv_bn_prelu(HEAD_CHANNELS, HEAD_CHANNELS, 3),
            *_conv_bn_prelu(HEAD_CHANNELS, HEAD_CHANNELS, 1),
        )
        # High-level integrated features (layer3, layer4) with multi-scale context.
        self.reduce_high = nn.Sequential(
            *_conv_bn_prelu(c3 + c4, HEAD_CHANNELS, 3),
            *_conv_bn_prelu(HEAD_CHANNELS, HEAD_CHANNELS, 3),
            ASPP(HEAD_CHANNELS),
        )
        self.predict0 = nn.Conv2d(HEAD_CHANNELS, 1, kernel_size=1)
        for i in range(1, NUM_REFINEMENTS + 1):
            self.add_module(f"predict{i}", _refinement_block())

    def refinement_blocks(self) -> list[nn.Module]:
        """predict1..predict6, in the order they refine the prediction."""
        return [getattr(self, f"predict{i}") for i in range(1, NUM_REFINEMENTS + 1)]

    def integrated_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Low- and high-level integrated features, both at layer0's resolution."""
        l0, l1, l2, l3, l4 = self.backbone(x)
        size0 = l0.shape[2:]
        low = self.reduce_low(torch.cat([l0, _resize(l1, size0), _resize(l2, size0)], dim=1))
        high = self.reduce_high(torch.cat([l3, _resize(l4, l3.shape[2:])], dim=1))
        return low, _resize(high, size0)

    def predictions(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The 7 logits predict0..predict6 at layer0's resolution, in either mode."""
        low, high = self.integrated_features(x)
        predictions = [self.predict0(high)]
        # Residual refinement alternates low- and high-level features, low first.
        for i, block in enumerate(self.refinement_blocks()):
            feature = low if i % 2 == 0 else high
            previous = predictions[-1]
            predictions.append(block(torch.cat([previous, feature], dim=1)) + previous)
        return predictions

    def side_outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The 7 logits at input size, in either mode (for visualising every refinement step)."""
        return tuple(_resize(p, x.shape[2:]) for p in self.predictions(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        if self.training:
            return self.side_outputs(x)
        return torch.sigmoid(_resize(self.predictions(x)[-1], x.shape[2:]))
