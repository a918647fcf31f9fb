"""R3Net architecture, backbones and pretrained-backbone loading."""

from __future__ import annotations

import pytest
import torch
from torchvision.models import resnet18, resnet34

from ignite_r3net.errors import OptionError
from ignite_r3net.model.backbone_weights import load_backbone_weights, resolve_weights
from ignite_r3net.model.backbones import BACKBONES
from ignite_r3net.model.r3net import NUM_PARAMETERS, R3Net, build_backbone

# The authors' release (ResNeXt-101 32x4d backbone) has exactly this many trainable parameters.
ORIGINAL_PARAMETER_COUNT = 56_156_126


def _trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.fixture(scope="module")
def small_model() -> R3Net:
    torch.manual_seed(0)
    return R3Net("resnet18")


def test_parameter_count_matches_original() -> None:
    assert _trainable(R3Net("resnext101_32x4d")) == ORIGINAL_PARAMETER_COUNT


def test_recorded_parameter_counts() -> None:
    """``NUM_PARAMETERS`` (the start-up disk-space check, which builds no model) is every model's count."""
    assert set(NUM_PARAMETERS) == set(BACKBONES)
    for backbone, recorded in NUM_PARAMETERS.items():
        with torch.device("meta"):
            model = R3Net(backbone)
        assert sum(p.numel() for p in model.parameters()) == recorded, backbone


def test_head_module_names(small_model: R3Net) -> None:
    names = {name for name, _ in small_model.named_children()}
    assert names == {"backbone", "reduce_low", "reduce_high"} | {f"predict{i}" for i in range(7)}
    stages = {name for name, _ in small_model.backbone.named_children()}
    assert stages == {f"layer{i}" for i in range(5)}


@pytest.mark.parametrize("size", [(64, 64), (97, 131)])
def test_train_mode_returns_seven_logits_at_input_size(small_model: R3Net, size) -> None:
    small_model.train()
    out = small_model(torch.rand(2, 3, *size))
    assert isinstance(out, tuple) and len(out) == 7
    for logits in out:
        assert logits.shape == (2, 1, *size)


def test_eval_mode_returns_probabilities(small_model: R3Net) -> None:
    small_model.eval()
    with torch.no_grad():
        out = small_model(torch.rand(1, 3, 97, 131))
    assert out.shape == (1, 1, 97, 131)
    assert out.min() >= 0 and out.max() <= 1


def test_channels_last_matches_contiguous(small_model: R3Net) -> None:
    small_model.eval()
    x = torch.rand(1, 3, 64, 80)
    with torch.no_grad():
        expected = small_model(x)
        small_model.to(memory_format=torch.channels_last)
        got = small_model(x.to(memory_format=torch.channels_last))
        small_model.to(memory_format=torch.contiguous_format)
    assert torch.allclose(got, expected, atol=1e-5)


def test_runs_under_bf16_autocast(small_model: R3Net) -> None:
    small_model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = small_model(torch.rand(2, 3, 65, 63))
    assert len(out) == 7 and out[-1].shape == (2, 1, 65, 63)
    assert torch.isfinite(out[-1].float()).all()


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_every_backbone_builds_and_runs(name: str) -> None:
    model = R3Net(name).eval()
    expected = (64, 64, 128, 256, 512) if name in ("resnet18", "resnet34") else (64, 256, 512, 1024, 2048)
    assert model.backbone.channels == expected
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64)).shape == (1, 1, 64, 64)


def test_pretrained_backbone_from_torchvision_file(tmp_path) -> None:
    reference = resnet18()
    path = tmp_path / "resnet18.pth"
    torch.save(reference.state_dict(), path)
    model = R3Net("resnet18")
    load_backbone_weights(model.backbone, path)
    assert torch.equal(model.backbone.layer0.conv1.weight, reference.conv1.weight)
    assert torch.equal(model.backbone.layer4[1].bn2.running_var, reference.layer4[1].bn2.running_var)


def test_pretrained_file_for_wrong_architecture_lists_keys(tmp_path) -> None:
    path = tmp_path / "resnet18.pth"
    torch.save(resnet18().state_dict(), path)
    # the blocks resnet34 has beyond resnet18's, counted on torchvision's own models (BatchNorm's
    # num_batches_tracked may be absent: older files lack it); 3 of them named
    wanted = {k for k in resnet34().state_dict() if not k.startswith("fc.")}
    given = set(resnet18().state_dict())
    needed = {k for k in wanted if k in given or not k.endswith("num_batches_tracked")}
    missing = len(needed - given)
    expected = (
        rf"{missing} of the model's {len(needed)} keys are not in it "
        rf"\[layer1\.2\.bn1\.bias, [^,]+, [^,]+ \(\+{missing - 3} more\)\]"
    )
    with pytest.raises(ValueError, match=expected):
        load_backbone_weights(build_backbone("resnet34"), path)


def test_missing_pretrained_path_names_it(tmp_path) -> None:
    path = tmp_path / "nope" / "weights.pth"
    with pytest.raises(OptionError, match="nope"):
        resolve_weights(str(path), "resnet18")


def test_unknown_backbone_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="resnext101_32x4d") as info:
        R3Net("vgg16")
    assert all(name in str(info.value) for name in BACKBONES)


def test_torchvision_weight_names_are_checked_before_download() -> None:
    with pytest.raises(OptionError, match="IMAGENET1K_V1"):
        resolve_weights("IMAGENET9K", "resnet18")
    with pytest.raises(OptionError, match="no weights"):
        resolve_weights("DEFAULT", "resnext101_32x4d")
