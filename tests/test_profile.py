"""``profile``: the GMACs equal the analytic count, the parameters the model's; a row per mode on the CPU, a mode
that cannot run a row saying why; the JSON's keys are those docs/profile.md names and each row is on disk before
the next is measured; the timing loop synchronises the device around each timed run; ``--find-max-batch``
finds the batch above which a (faked) GPU runs out of memory."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_gpus import install
from torch import nn
from torchvision.models import resnet18

from ignite_r3net import cli
from ignite_r3net.model.r3net import NUM_PARAMETERS, R3Net
from ignite_r3net.options import ProfileOptions
from ignite_r3net.profiling import command, measure
from ignite_r3net.profiling.command import MAX_BATCH_NEEDS_CUDA, TRAIN_NEEDS_TWO, Combination, Profiler, Subject
from ignite_r3net.profiling.report import HEADER_KEYS, ROW_KEYS

pytestmark = pytest.mark.timeout(120)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "profile.md"
TINY = ["--backbone", "resnet18", "--size", "32", "32", "--warmup", "0", "--repeats", "1"]


def _conv_macs(height: int, width: int, c_in: int, c_out: int, kernel: int) -> int:
    """A convolution's multiply-accumulates: one per weight per output pixel."""
    return height * width * c_out * c_in * kernel * kernel


def test_macs_of_one_convolution_are_the_analytic_count() -> None:
    conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)  # 32x48 -> 16x24
    assert measure.macs_per_image(conv, 32, 48) == _conv_macs(16, 24, 3, 16, 3) == 165_888


def test_macs_of_resnet18_at_224_are_the_analytic_count() -> None:
    """Stem, four stages of two basic blocks (3x3 convolutions, a 1x1 projection where a stage halves the size)
    and the classifier: 1.814 GMACs, the figure torchvision publishes (1.81)."""
    expected = _conv_macs(112, 112, 3, 64, 7) + 4 * _conv_macs(56, 56, 64, 64, 3)
    for side, c_in, c_out in ((28, 64, 128), (14, 128, 256), (7, 256, 512)):
        expected += _conv_macs(side, side, c_in, c_out, 3) + 3 * _conv_macs(side, side, c_out, c_out, 3)
        expected += _conv_macs(side, side, c_in, c_out, 1)
    expected += 512 * 1000
    assert measure.macs_per_image(resnet18(), 224, 224) == expected == 1_814_073_344


def _profile(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = cli.main(["profile", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _cpu_autocast_without_float16(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose CPU autocast does not run float16: as older releases did, it warns and computes float32."""
    real = torch.autocast

    def autocast(device_type: str, dtype: torch.dtype | None = None, enabled: bool = True, **kwargs: Any):
        unsupported = device_type == "cpu" and dtype == torch.float16
        return real(device_type, dtype=dtype, enabled=enabled and not unsupported, **kwargs)

    monkeypatch.setattr(torch, "autocast", autocast)


@pytest.mark.slow  # a few R3Net runs: about 5-12 s on an idle 2-core machine
def test_a_row_per_mode_and_a_reason_for_each_mode_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """fp16 where CPU autocast lacks it and --onnx without onnxruntime are rows saying why; the others are
    measured. The JSON holds each row before the next is measured, in the console's order."""
    _cpu_autocast_without_float16(monkeypatch)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    onnx_file = tmp_path / "r3net.onnx"
    onnx_file.write_bytes(b"not read: onnxruntime is missing")
    out = tmp_path / "cost.json"
    on_disk: list[int] = []
    row = Profiler.row
    monkeypatch.setattr(
        Profiler,
        "row",
        lambda self, c: on_disk.append(_rows_on_disk(out)) or row(self, c),  # type: ignore[func-returns-value]
    )
    argv = [*TINY, "--batch-size", "2", "--amp", "off", "bf16", "fp16", "--onnx", str(onnx_file), "--json", str(out)]
    code, printed, progress = _profile(argv, capsys)
    assert code == 0, progress
    assert on_disk == [0, 1, 2, 3]
    report = json.loads(out.read_text())
    rows = {(r["mode"], r["amp"]): r for r in report["rows"]}
    assert list(rows) == [("inference", "off"), ("inference", "bf16"), ("inference", "fp16"), ("onnx", "off")]
    for key in (("inference", "off"), ("inference", "bf16")):
        r = rows[key]
        assert r["status"] == "ok" and r["reason"] is None, r
        assert r["latency_ms_median"] > 0 and r["latency_ms_p95"] >= r["latency_ms_median"]
        assert r["images_per_s"] == pytest.approx(2000 / r["latency_ms_median"])
        assert r["peak_memory_mib"] is not None and "resident" in r["memory_measure"]
    assert rows[("inference", "fp16")]["status"] == "unavailable"
    assert "does not run fp16" in rows[("inference", "fp16")]["reason"]
    assert rows[("onnx", "off")]["status"] == "unavailable" and "onnxruntime" in rows[("onnx", "off")]["reason"]
    assert rows[("onnx", "off")]["latency_ms_median"] is None
    lines = printed.splitlines()
    assert lines[0] == "profile: R3Net (resnet18) on cpu (" + measure.device_name(torch.device("cpu")) + ")"
    assert f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average " in lines[1]
    table = [line for line in lines if line.startswith(("inference ", "onnx "))]
    assert [line.split()[:4] for line in table] == [
        ["inference", "32x32", "b2", "fp32"],
        ["inference", "32x32", "b2", "bf16"],
        ["inference", "32x32", "b2", "fp16"],
        ["onnx", "32x32", "b2", "18.57"],
    ]
    assert "unavailable: autocast on cpu does not run fp16" in table[2]
    assert "row 4/4: onnx 32x32 b2" in progress
    assert report["header"]["device_name"] == measure.device_name(torch.device("cpu"))


@pytest.mark.slow  # the ONNX export, made once per run (~15 s)
def test_channels_last_and_onnx_rows_are_measured_and_a_failing_compile_is_a_row_saying_why(
    exported_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--channels-last times the model in that layout; --onnx times the file in onnxruntime; a --compile that fails
    when it first runs (no C++ compiler for inductor, say) is one row with the reason, and the next row still runs."""
    out = tmp_path / "modes.json"
    code, printed, err = _profile([*TINY, "--channels-last", "--onnx", str(exported_onnx), "--json", str(out)], capsys)
    assert code == 0, err
    pytorch, onnx = json.loads(out.read_text())["rows"]
    assert (pytorch["mode"], pytorch["channels_last"], pytorch["status"]) == ("inference", True, "ok")
    assert (onnx["mode"], onnx["channels_last"], onnx["status"]) == ("onnx", False, "ok")
    assert onnx["latency_ms_median"] > 0 and onnx["images_per_s"] > 0
    assert "channels-last" in printed

    def compiled_that_fails(model: torch.nn.Module, **_: object):  # type: ignore[no-untyped-def]
        def run(*args: object, **kwargs: object) -> object:
            raise RuntimeError("inductor found no C++ compiler")

        return run

    monkeypatch.setattr(torch, "compile", compiled_that_fails)
    out = tmp_path / "compile.json"
    code, printed, err = _profile([*TINY, "--compile", "--onnx", str(exported_onnx), "--json", str(out)], capsys)
    assert code == 0, err
    failed, onnx = json.loads(out.read_text())["rows"]
    assert (failed["compile"], failed["status"]) == (True, "failed")
    assert "inductor found no C++ compiler" in failed["reason"] and failed["latency_ms_median"] is None
    assert onnx["status"] == "ok"


def _rows_on_disk(path: Path) -> int:
    return len(json.loads(path.read_text())["rows"]) if path.exists() else 0


@pytest.mark.slow  # a few R3Net runs: about 5-12 s on an idle 2-core machine
def test_training_rows_and_the_max_batch_search_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--train times the step at batch 2 and says why batch 1 cannot train; --find-max-batch says it needs a GPU."""
    out = tmp_path / "train.json"
    code, _, err = _profile([*TINY, "--batch-size", "1", "2", "--train", "--json", str(out)], capsys)
    assert code == 0, err
    one, two = json.loads(out.read_text())["rows"]
    assert (one["mode"], one["status"], one["reason"]) == ("train", "unavailable", TRAIN_NEEDS_TWO)
    assert two["mode"] == "train" and two["status"] == "ok" and two["images_per_s"] > 0
    code, printed, err = _profile([*TINY, "--train", "--find-max-batch", "--json", str(out)], capsys)
    assert code == 0, err
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["mode"], row["status"], row["reason"]) == ("max-batch", "unavailable", MAX_BATCH_NEEDS_CUDA)
    assert MAX_BATCH_NEEDS_CUDA in printed


@pytest.mark.slow  # a few R3Net runs: about 5-12 s on an idle 2-core machine
def test_parameters_are_the_models_and_a_checkpoint_is_profiled_as_its_backbone(
    spread_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "ckpt.json"
    argv = ["--checkpoint", str(spread_checkpoint), *TINY[2:], "--json", str(out)]
    code, printed, err = _profile(argv, capsys)
    assert code == 0, err
    (row,) = json.loads(out.read_text())["rows"]
    counted = sum(p.numel() for p in R3Net("resnet18").parameters())
    assert row["parameters"] == counted == NUM_PARAMETERS["resnet18"] and row["params_m"] == counted / 1e6
    assert row["backbone"] == "resnet18" and row["model"] == str(spread_checkpoint)
    assert f"profile: {spread_checkpoint} on cpu" in printed


def test_the_json_keys_are_those_the_docs_name(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """docs/profile.md lists the keys (its "JSON" section, one `key` per table row): a key renamed or added
    without the page fails here."""
    text = DOCS.read_text(encoding="utf-8")
    section = re.search(r"^## JSON\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/profile.md has no JSON section"
    documented = re.findall(r"^\| `(\w+)` \|", section.group(1), re.M)
    assert set(documented) == {*ROW_KEYS, *HEADER_KEYS}, set(documented) ^ {*ROW_KEYS, *HEADER_KEYS}
    out = tmp_path / "cost.json"
    assert _profile([*TINY, "--json", str(out)], capsys)[0] == 0
    report = json.loads(out.read_text())
    assert set(report) == {"header", "rows"}
    assert set(report["header"]) == set(HEADER_KEYS)
    assert [list(r) for r in report["rows"]] == [list(ROW_KEYS)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backbone", "resnet18", "--size", "32"], "--size takes pairs of height and width, got 1 numbers: 32"),
        (["--backbone", "resnet18", "--find-max-batch"], "--find-max-batch goes with --train"),
        (["--backbone", "resnet18", "--size", "32", "0"], "--size must be positive integers, got [32, 0]"),
        (["--backbone", "resnet18", "--onnx", "absent.onnx"], "--onnx absent.onnx does not exist"),
        (["--backbone", "resnet18", "--device", "cuda"], "--device cuda: no CUDA GPU is visible on this host"),
        ([], "give --checkpoint CKPT or --backbone NAME"),
    ],
)
def test_wrong_options_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    code, _, err = _profile(argv, capsys)
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err


class _Clock:
    """``time.perf_counter`` that records each reading in ``events`` and advances 1 s per reading."""

    def __init__(self, events: list[str]) -> None:
        self.events, self.now = events, 0.0

    def __call__(self) -> float:
        self.events.append("clock")
        self.now += 1.0
        return self.now


def test_each_timed_run_lies_between_two_device_synchronisations(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a (faked) GPU, whose work is asynchronous: the warm-up is waited for, then each run is timed from a
    synchronised device to a synchronised device, so that no run's queued work is counted in another's."""
    install(1, monkeypatch.setattr)
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: events.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**20)
    monkeypatch.setattr(measure.time, "perf_counter", _Clock(events))
    timing = measure.time_runs(lambda: events.append("run"), torch.device("cuda", 0), warmup=2, repeats=3)
    assert events == ["run", "run", "sync", "reset", *["sync", "clock", "run", "sync", "clock"] * 3]
    assert timing.seconds == [1.0, 1.0, 1.0] and timing.peak_memory == 3 * 2**20
    assert timing.memory_measure == measure.CUDA_MEMORY


def _out_of_memory_above(largest: int, tries: list[int]):
    def step(batch: int) -> None:
        tries.append(batch)
        if batch > largest:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch * 100} MiB")

    return step


def test_find_max_batch_finds_the_batch_above_which_memory_runs_out(monkeypatch: pytest.MonkeyPatch) -> None:
    install(1, monkeypatch.setattr)
    cuda = torch.device("cuda", 0)
    tries: list[int] = []
    assert measure.find_max_batch(_out_of_memory_above(12, tries), cuda, start=2) == 12
    assert tries == [2, 4, 8, 16, 12, 14, 13]  # doubling, then halving the gap between 8 and 16
    assert measure.find_max_batch(_out_of_memory_above(1, []), cuda, start=2) == 0
    assert measure.find_max_batch(_out_of_memory_above(10**6, []), cuda, limit=64) == 64

    def broken(batch: int) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):  # only running out of memory means "too big"
        measure.find_max_batch(broken, cuda)


def test_the_max_batch_row_of_a_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--train --find-max-batch`` on a (faked) GPU: the training step, given batches of growing size, runs out
    of memory above 12; the row says 12 and the peak memory of the step at 12."""
    install(1, monkeypatch.setattr)
    cuda = torch.device("cuda", 0)
    tries: list[int] = []
    step = _out_of_memory_above(12, tries)
    monkeypatch.setattr(command, "training_step", lambda *a: lambda engine, micro_batches: step(*micro_batches))
    monkeypatch.setattr(command, "synthetic_batch", lambda batch, height, width, device: batch)
    monkeypatch.setattr(measure, "macs_per_image", lambda *a: 2 * 10**9)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: tries[-1] * 100 * 2**20)
    subject = Subject(nn.Conv2d(3, 1, 1), "R3Net (resnet18)", "resnet18", cuda, "Faked GPU")
    options = ProfileOptions(backbone="resnet18", train=True, find_max_batch=True, device="cuda")
    row = Profiler(subject, options).row(Combination("max-batch", 32, 32, 0, "off"))
    assert (row.status, row.max_batch, row.batch_size) == ("ok", 12, 12)
    assert row.peak_memory_mib == 1200 and row.memory_measure == measure.CUDA_MEMORY
    assert row.gmacs_per_image == 2.0 and row.parameters == 3 + 1
