"""``export``: ONNX and TorchScript files that give PyTorch's maps at any batch and size, carry their
contract, run without this package, and ``predict --model``; every bad input is one line.

The exported files come from the session fixtures in conftest.py (one export per format)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import REPO
from PIL import Image

from ignite_r3net import cli
from ignite_r3net.data.transforms import normalize_image
from ignite_r3net.export import writer as export
from ignite_r3net.export.writer import METADATA_FILE
from ignite_r3net.inference.model import ONNXRUNTIME_MISSING, onnx_providers
from ignite_r3net.model.r3net import R3Net
from ignite_r3net.model.trained_model import build_model, read_trained_weights

# both differ from the size traced (64x96) and checked at export (45x71); the first is below the
# backbone's stride of 32, where its last feature map is 1x1
SIZES = [(20, 27), (37, 101)]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def reference(spread_checkpoint: Path) -> torch.nn.Module:
    return build_model(read_trained_weights(spread_checkpoint))


def _images(batch: int, h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _save_image(path: Path, h: int, w: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # smooth content (blocks) so JPEG artefacts stay small and the maps have structure
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(np.kron(small, np.ones((8, 8, 1), np.uint8))[:h, :w]).save(path)


def test_preprocessing_is_normalize_image_bit_for_bit() -> None:
    graph = export.SaliencyGraph(R3Net("resnet18"))
    image = _images(2, 13, 17, seed=0)
    assert torch.equal(image.to(torch.float32) * graph.scale + graph.shift, normalize_image(image))


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_exported_model_gives_pytorch_output(
    fmt: str,
    size: tuple[int, int],
    reference: torch.nn.Module,
    exported_onnx: Path,
    exported_torchscript: Path,
) -> None:
    if fmt == "onnx":
        session = ort.InferenceSession(str(exported_onnx), providers=["CPUExecutionProvider"])

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(session.run(["saliency"], {"image": x.numpy()})[0])
    else:
        module = torch.jit.load(str(exported_torchscript))
        run = module
    for batch in (1, 2):
        images = _images(batch, *size, seed=batch)
        with torch.no_grad():
            expected = reference(normalize_image(images))
            got = run(images)
        assert got.dtype == torch.float32 and got.shape == (batch, 1, *size)
        difference = float((got - expected).abs().max())
        print(f"{fmt} {size} batch {batch}: max abs difference {difference:.2e}")
        assert difference <= TOLERANCE, (fmt, size, batch, difference)
    assert float(expected.std()) > 0.01  # the maps vary: a comparison of near-constant maps proves little


def test_contract_is_in_the_files(exported_onnx: Path, exported_torchscript: Path) -> None:
    session = ort.InferenceSession(str(exported_onnx), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type) == ("image", "tensor(uint8)") and inp.shape == ["batch", 3, "height", "width"]
    assert (out.name, out.type) == ("saliency", "tensor(float)") and out.shape == ["batch", 1, "height", "width"]
    onnx_meta = session.get_modelmeta().custom_metadata_map
    extra = {METADATA_FILE: ""}
    torch.jit.load(str(exported_torchscript), _extra_files=extra)
    ts_meta = json.loads(extra[METADATA_FILE])
    for meta in (onnx_meta, ts_meta):
        assert meta["backbone"] == "resnet18" and meta["source"] == "best_model_1_maxF=0.5000.pt"
        assert "uint8 (N, 3, H, W)" in meta["input"] and "float32 (N, 1, H, W)" in meta["output"]
        assert "0.485" in meta["preprocessing"]
    assert dict(onnx_meta) == ts_meta


def test_predict_through_exported_files_matches_checkpoint(
    tmp_path: Path, spread_checkpoint: Path, exported_onnx: Path, exported_torchscript: Path
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    _save_image(inputs / "a.jpg", 41, 57, seed=0)
    _save_image(inputs / "b.png", 70, 36, seed=1)
    maps = {}
    for name, source in (
        ("checkpoint", ["--checkpoint", str(spread_checkpoint)]),
        ("onnx", ["--model", str(exported_onnx)]),
        ("torchscript", ["--model", str(exported_torchscript)]),
    ):
        out = tmp_path / name
        assert cli.main(["predict", *source, "--input", str(inputs), "--output", str(out), "--workers", "0"]) == 0
        maps[name] = {}
        for p in sorted(out.glob("*.png")):  # beside OUTPUT/.predict, the record of what is done
            with Image.open(p) as im:
                assert im.mode == "L" and im.format == "PNG"
                maps[name][p.name] = np.asarray(im).astype(np.int16)
    assert sorted(maps["checkpoint"]) == ["a.png", "b.png"]
    assert maps["checkpoint"]["a.png"].shape == (41, 57) and maps["checkpoint"]["b.png"].shape == (70, 36)
    for name in ("onnx", "torchscript"):
        assert maps[name].keys() == maps["checkpoint"].keys()
        for file, expected in maps["checkpoint"].items():
            assert maps[name][file].shape == expected.shape
            assert np.abs(maps[name][file] - expected).max() <= 1, (name, file)
    assert np.ptp(maps["checkpoint"]["a.png"]) > 20  # the maps have structure


def test_files_run_without_this_package(
    tmp_path: Path, spread_checkpoint: Path, exported_onnx: Path, exported_torchscript: Path
) -> None:
    """docs/deployment.md's snippet, with ``ignite_r3net`` made unimportable, writes predict's map; the
    TorchScript file loads with torch alone."""
    page = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    section = page.split("## Use the model elsewhere", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "r3net.onnx").symlink_to(exported_onnx)
    _save_image(tmp_path / "photo.jpg", 47, 62, seed=2)
    script = (
        "import sys\nsys.modules['ignite_r3net'] = None  # an import of this package would fail\n"
        + snippet
        + "import torch\n"
        f"m = torch.jit.load({str(exported_torchscript)!r})\n"
        "print(tuple(m(torch.zeros(2, 3, 40, 50, dtype=torch.uint8)).shape))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "uint8 (N, 3, H, W)" in proc.stdout and "(2, 1, 40, 50)" in proc.stdout
    predict = ["predict", "--checkpoint", str(spread_checkpoint), "--input", str(tmp_path / "photo.jpg")]
    assert cli.main([*predict, "--output", str(tmp_path / "out"), "--workers", "0"]) == 0
    with Image.open(tmp_path / "photo_map.png") as a, Image.open(tmp_path / "out" / "photo.png") as b:
        assert np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int)).max() <= 1


def _env() -> dict[str, str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.slow  # over 1 s: beyond the fast tier's budget (docs/development.md#tests)
def test_training_checkpoint_exports_with_the_backbone_of_its_run(
    tmp_path: Path, spread_checkpoint: Path, reference: torch.nn.Module
) -> None:
    """A periodic training checkpoint (weights under "model", beside the run's config.json)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"backbone": "resnet18"}))
    state = torch.load(spread_checkpoint, weights_only=True)
    torch.save({"model": state, "trainer": {"iteration": 3}}, run_dir / "checkpoint_3.pt")
    out = tmp_path / "exported" / "r3net.pt"
    args = ["export", "--checkpoint", str(run_dir / "checkpoint_3.pt"), "--format", "torchscript"]
    assert cli.main([*args, "--output", str(out)]) == 0
    extra = {METADATA_FILE: ""}
    torch.jit.load(str(out), _extra_files=extra)
    metadata = json.loads(extra[METADATA_FILE])
    assert metadata["backbone"] == "resnet18" and metadata["source"] == "checkpoint_3.pt"
    images = _images(1, 50, 40, seed=3)
    with torch.no_grad():
        assert float((torch.jit.load(str(out))(images) - reference(normalize_image(images))).abs().max()) <= TOLERANCE
    assert sorted(p.name for p in out.parent.iterdir()) == ["r3net.pt"]  # no temporary file left


def test_bad_export_inputs_are_one_line_and_write_nothing(
    tmp_path: Path, spread_checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(bytes(range(256)) * 8)
    unknown = tmp_path / "unknown.pt"
    torch.save({"fc.weight": torch.zeros(2, 2)}, unknown)
    no_model = tmp_path / "no_model.pt"
    torch.save({"iteration": 3}, no_model)
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    onnx_out = str(tmp_path / "out" / "m.onnx")
    ckpt = str(spread_checkpoint)
    cases = [
        (["--checkpoint", str(garbage), "--format", "onnx", "--output", onnx_out], "not a readable PyTorch file"),
        (["--checkpoint", str(unknown), "--format", "onnx", "--output", onnx_out], "cannot tell the backbone"),
        (["--checkpoint", str(no_model), "--format", "torchscript", "--output", onnx_out], "must end in .pt"),
        (["--checkpoint", str(no_model), "--format", "onnx", "--output", onnx_out], "holds no model state_dict"),
        (["--checkpoint", str(tmp_path / "missing.pt"), "--format", "onnx", "--output", onnx_out], "does not exist"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", str(tmp_path / "m.pt")], "must end in .onnx"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", str(folder)], "is a folder"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", onnx_out, "--opset", "17"], "between 18 and 23"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", onnx_out, "--opset", "24"], "between 18 and 23"),
        (["--checkpoint", ckpt, "--format", "torchscript", "--output", "m.pt", "--opset", "18"], "onnx only"),
        (["--checkpoint", ckpt, "--format", "torchscript", "--output", ckpt], "is the checkpoint itself"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", onnx_out, "--backbone", "vgg"], "unknown --backbone"),
        (["--checkpoint", ckpt, "--format", "onnx", "--output", onnx_out, "--backbone", "resnet50"], "does not fit"),
    ]
    for args, expected in cases:
        code = cli.main(["export", *args])
        err = capsys.readouterr().err.strip()
        assert code == 2, (args, err)
        assert err.startswith("error: ") and expected in err and len(err.splitlines()) == 1, (args, err)
    assert not (tmp_path / "out").exists() and not Path("m.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.onnx", "garbage.pt", "no_model.pt", "unknown.pt"]
    for args, expected in (
        (["--format", "tflite"], "invalid choice: 'tflite'"),
        (["--format", "onnx", "--opset", "x"], "invalid int value"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["export", "--checkpoint", ckpt, "--output", onnx_out, *args])
        assert exit_info.value.code == 2 and expected in capsys.readouterr().err


def test_failed_export_leaves_no_file(
    tmp_path: Path, spread_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A written file that does not load, or gives other maps, is removed; an older file of that
    name is kept as it was."""
    out = tmp_path / "m.pt"
    out.write_bytes(b"an earlier export")

    def unreadable(graph, example, path, metadata) -> None:
        Path(path).write_bytes(b"not TorchScript")

    def wrong_model(graph, example, path, metadata) -> None:
        torch.jit.save(torch.jit.script(torch.nn.Identity()), str(path))  # (N, 3, H, W) out

    for writer, expected in ((unreadable, "does not load"), (wrong_model, "gives shape (1, 3, 45, 71)")):
        monkeypatch.setattr(export, "_write_torchscript", writer)
        code = cli.main(
            ["export", "--checkpoint", str(spread_checkpoint), "--format", "torchscript", "--output", str(out)]
        )
        err = capsys.readouterr().err.strip()
        assert code == 1 and err.startswith("error: the exported") and expected in err, err
        assert len(err.splitlines()) == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"] and out.read_bytes() == b"an earlier export"


def test_predict_model_errors_are_one_line_before_any_work(
    tmp_path: Path,
    spread_checkpoint: Path,
    exported_torchscript: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    import onnx
    from onnx import TensorProto, helper

    float_model = tmp_path / "float.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), float_model)
    image = tmp_path / "a.png"
    _save_image(image, 20, 30, seed=0)
    out = tmp_path / "out"
    common = ["--input", str(image), "--output", str(out), "--workers", "0"]
    cases = [
        (["--model", str(tmp_path / "missing.onnx")], "does not exist"),
        (["--model", str(spread_checkpoint)], "is a PyTorch file but not TorchScript"),
        (["--model", str(float_model)], "does not take one uint8 (N, 3, H, W) image batch"),
        (["--model", str(exported_torchscript), "--backbone", "resnet18"], "--backbone goes with --checkpoint"),
        (["--model", str(exported_torchscript), "--amp", "bf16"], "--amp goes with --checkpoint"),
    ]
    for args, expected in cases:
        code = cli.main(["predict", *args, *common])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: ") and expected in err and len(err.splitlines()) == 1, (args, err)
    for args in ([], ["--checkpoint", str(spread_checkpoint), "--model", str(exported_torchscript)]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["predict", *args, *common])
        assert exit_info.value.code == 2 and "--checkpoint" in capsys.readouterr().err
    # without onnxruntime: one line saying how to install it, before the inputs are even looked at
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    code = cli.main(["predict", "--model", "m.onnx", "--input", str(tmp_path / "missing"), "--output", str(out)])
    assert code == 2 and capsys.readouterr().err.strip() == f"error: {ONNXRUNTIME_MISSING}"
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    code = cli.main(["export", "--checkpoint", str(spread_checkpoint), "--format", "onnx", "--output", "m.onnx"])
    assert code == 2 and capsys.readouterr().err.strip() == f"error: {export.ONNX_EXPORT_MISSING}"
    assert not out.exists() and not Path("m.onnx").exists()


@pytest.mark.parametrize(
    ("installed", "expected"),
    [
        (
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            [("CUDAExecutionProvider", {"device_id": 3}), "CPUExecutionProvider"],
        ),
        (["CPUExecutionProvider"], ["CPUExecutionProvider"]),
    ],
)
def test_onnx_runs_on_the_ranks_own_gpu(monkeypatch, installed, expected):
    monkeypatch.setattr(ort, "get_available_providers", lambda: installed)
    assert onnx_providers(torch.device("cuda", 3)) == expected
    assert onnx_providers(torch.device("cpu")) == ["CPUExecutionProvider"]


def test_onnx_on_a_gpu_host_with_the_cpu_onnxruntime_says_so(exported_onnx, monkeypatch, capsys):
    """Each rank of 2 on 8 cores gets 4 onnxruntime threads, not all 8, and predict says why."""
    import ignite.distributed as idist

    from ignite_r3net.distributed import process_setup
    from ignite_r3net.evaluation.predict_worker import map_function
    from ignite_r3net.options import PredictOptions

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr(process_setup, "available_cpus", lambda: 8)
    monkeypatch.setattr(idist, "get_nproc_per_node", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    options = PredictOptions(model=str(exported_onnx), inputs=["x"], output="out")
    map_function(options, torch.device("cuda", 1), None, threads=8)
    assert capsys.readouterr().out == (
        "onnxruntime runs the model with CPUExecutionProvider, 4 thread(s) per rank (only the CPU onnxruntime "
        "is installed: pip install onnxruntime-gpu for the GPUs)\n"
    )
