"""Key mapping between the original R3Net release, torchvision and our layout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ignite_r3net.model.backbone_weights import load_backbone_weights
from ignite_r3net.model.key_layouts import (
    backbone_state_dict_from_any,
    convert_original_backbone_state_dict,
    convert_original_r3net_state_dict,
    load_model_state,
)
from ignite_r3net.model.r3net import R3Net, build_backbone

# ---------------------------------------------------------------- reference: original layout
# A re-creation of the module *structure* of the authors' torch7-converted
# ResNeXt-101 32x4d and R3Net head, so that state_dict keys and forward
# semantics match theirs. Parameter-free torch7 tables are stand-ins.


class _ConcatTable(nn.Sequential):
    """Feeds the same input to every child, returns the list of outputs."""

    def forward(self, x):
        return [child(x) for child in self]


class _CAddTable(nn.Module):
    def forward(self, xs):
        return sum(xs)


def _original_block(in_ch: int, width: int, out_ch: int, stride: int) -> nn.Sequential:
    residual = nn.Sequential(
        nn.Sequential(
            nn.Conv2d(in_ch, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, groups=32, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
        ),
        nn.Conv2d(width, out_ch, 1, bias=False),
        nn.BatchNorm2d(out_ch),
    )
    if in_ch != out_ch or stride != 1:
        shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))
    else:
        shortcut = nn.Identity()
    return nn.Sequential(_ConcatTable(residual, shortcut), _CAddTable(), nn.ReLU())


def original_resnext101_32x4d() -> nn.Sequential:
    stages = []
    in_ch = 64
    for i, depth in enumerate((3, 4, 23, 3)):
        width, out_ch = 128 * 2**i, 256 * 2**i
        blocks = [
            _original_block(
                in_ch if b == 0 else out_ch,
                width,
                out_ch,
                2 if (b == 0 and i > 0) else 1,
            )
            for b in range(depth)
        ]
        stages.append(nn.Sequential(*blocks))
        in_ch = out_ch
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *stages,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Sequential(nn.Identity(), nn.Linear(2048, 1000)),
    )


def _up(t, size):
    return F.interpolate(t, size=size, mode="bilinear", align_corners=True)


def _cbp(i, o, k, d=1):
    return [
        nn.Conv2d(i, o, k, padding=d * (k // 2), dilation=d),
        nn.BatchNorm2d(o),
        nn.PReLU(),
    ]


class _OriginalASPP(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(*_cbp(256, 128, 1))
        self.conv2 = nn.Sequential(*_cbp(256, 128, 3, 2))
        self.conv3 = nn.Sequential(*_cbp(256, 128, 3, 4))
        self.conv4 = nn.Sequential(*_cbp(256, 128, 3, 6))
        self.conv5 = nn.Sequential(*_cbp(256, 128, 1))
        self.fuse = nn.Sequential(*_cbp(640, 256, 1))

    def forward(self, x):
        pooled = _up(self.conv5(F.adaptive_avg_pool2d(x, 1)), x.shape[2:])
        return self.fuse(torch.cat([self.conv1(x), self.conv2(x), self.conv3(x), self.conv4(x), pooled], 1))


class OriginalR3Net(nn.Module):
    """The release's module tree: layer0..layer4 cut from the converted Sequential, then the head."""

    def __init__(self):
        super().__init__()
        net = list(original_resnext101_32x4d().children())
        self.layer0 = nn.Sequential(*net[:4])
        self.layer1, self.layer2, self.layer3, self.layer4 = net[4:8]
        self.reduce_low = nn.Sequential(*_cbp(832, 256, 3), *_cbp(256, 256, 3), *_cbp(256, 256, 1))
        self.reduce_high = nn.Sequential(*_cbp(3072, 256, 3), *_cbp(256, 256, 3), _OriginalASPP())
        self.predict0 = nn.Conv2d(256, 1, 1)
        for i in range(1, 7):
            setattr(
                self,
                f"predict{i}",
                nn.Sequential(*_cbp(257, 128, 3), *_cbp(128, 128, 3), nn.Conv2d(128, 1, 1)),
            )

    def forward(self, x):
        l0 = self.layer0(x)
        l1 = self.layer1(l0)
        l2 = self.layer2(l1)
        l3 = self.layer3(l2)
        l4 = self.layer4(l3)
        s0 = l0.shape[2:]
        low = self.reduce_low(torch.cat([l0, _up(l1, s0), _up(l2, s0)], 1))
        high = _up(self.reduce_high(torch.cat([l3, _up(l4, l3.shape[2:])], 1)), s0)
        p = [self.predict0(high)]
        for i in range(1, 7):
            feat = low if i % 2 else high
            p.append(getattr(self, f"predict{i}")(torch.cat([p[-1], feat], 1)) + p[-1])
        p = [_up(t, x.shape[2:]) for t in p]
        return tuple(p) if self.training else torch.sigmoid(p[-1])


def _randomize_batchnorm(module: nn.Module) -> None:
    """Give BatchNorm and PReLU non-default values so a wrong mapping shows in outputs."""
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.25)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
        elif isinstance(m, nn.PReLU):
            m.weight.data.uniform_(0.05, 0.5, generator=g)


@pytest.fixture(scope="module")
def original_model() -> OriginalR3Net:
    torch.manual_seed(0)
    model = OriginalR3Net()
    with torch.no_grad():
        _randomize_batchnorm(model)
    return model


# ---------------------------------------------------------------- tests


def test_original_r3net_checkpoint_gives_identical_outputs(original_model) -> None:
    original_model.eval()
    sd = original_model.state_dict()
    # The release predates num_batches_tracked; loading must not require it.
    sd = {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    model = R3Net("resnext101_32x4d")
    load_model_state(model, sd)
    model.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        expected, got = original_model(x), model(x)
        assert expected.std() > 1e-3  # outputs are informative, not saturated
        assert torch.allclose(got, expected, atol=1e-5)
        original_model.train(), model.train()
        for e, g in zip(original_model(x.repeat(2, 1, 1, 1)), model(x.repeat(2, 1, 1, 1))):
            assert torch.allclose(g, e, rtol=1e-4, atol=1e-4)
    original_model.eval()


def test_convert_original_r3net_keys_match_ours(original_model) -> None:
    converted = convert_original_r3net_state_dict(original_model.state_dict())
    assert set(converted) == set(R3Net("resnext101_32x4d").state_dict())
    grouped_conv = original_model.layer3[22][0][0][0][3].weight
    assert torch.equal(converted["backbone.layer3.22.conv2.weight"], grouped_conv)


def test_original_backbone_roundtrip_matches_features(tmp_path) -> None:
    original = original_resnext101_32x4d().eval()
    with torch.no_grad():
        _randomize_batchnorm(original)
    sd = original.state_dict()
    tv = convert_original_backbone_state_dict(sd)
    assert {
        "conv1.weight",
        "layer1.0.downsample.0.weight",
        "layer4.2.bn3.running_var",
        "fc.weight",
    } <= set(tv)
    assert len(tv) == len(sd)

    path = tmp_path / "resnext_101_32x4d.pth"
    torch.save(sd, path)
    backbone = build_backbone("resnext101_32x4d")
    load_backbone_weights(backbone, path)
    backbone.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        expected = nn.Sequential(*list(original.children())[:8])(x)
        got = backbone(x)[-1]
    assert torch.allclose(got, expected, atol=1e-5)


def test_backbone_layout_detection_drops_classifier() -> None:
    from torchvision.models import resnet18

    ours = backbone_state_dict_from_any(resnet18().state_dict())
    assert set(ours) == set(build_backbone("resnet18").state_dict())


def test_ddp_prefix_is_stripped() -> None:
    source = R3Net("resnet18")
    target = R3Net("resnet18")
    load_model_state(target, {f"module.{k}": v for k, v in source.state_dict().items()})
    assert torch.equal(target.predict6[6].weight, source.predict6[6].weight)


def test_missing_and_unexpected_keys_are_listed() -> None:
    model = R3Net("resnet18")
    sd = model.state_dict()
    del sd["predict3.0.weight"]
    sd["extra.weight"] = torch.zeros(1)
    with pytest.raises(
        ValueError,
        match=(
            rf"1 of the model's {len(sd)} keys are not in it \[predict3\.0\.weight\]; "
            rf"1 of its {len(sd)} keys are not the model's \[extra\.weight\]"
        ),
    ):
        load_model_state(model, sd)


def test_unknown_original_key_is_rejected() -> None:
    with pytest.raises(ValueError, match="99.0.weight"):
        convert_original_backbone_state_dict({"0.weight": torch.zeros(1), "99.0.weight": torch.zeros(1)})
