"""`benchmarks/run.py` runs end to end and writes every key (figures are machine-dependent: no goals)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("one_thread")
def test_run_quick_tiny_pipeline_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``benchmarks/run.py``'s ``main`` end to end in this process (a process of its own spent ~4 s of CPU
    importing torch again): the JSON with every key, the printed lines."""
    out = tmp_path / "bench.json"
    monkeypatch.setenv("IGNITE_R3NET_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    bench_run = _bench_run()
    assert bench_run.main(["--quick", "--tiny", "--only", "pipeline", "engine", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert {"command", "machine", "pipeline", "engine"} <= set(report)
    assert report["machine"]["cores"] >= 1 and report["machine"]["torch"] == torch.__version__
    assert "--only" in report["command"]
    for name, keys in {
        "pipeline": (
            "baseline_samples_per_s",
            "ours_worker_samples_per_s",
            "worker_speedup",
            "ours_full_cpu_samples_per_s",
            "full_cpu_speedup",
        ),
        "engine": ("bare_it_per_s", "ignite_it_per_s", "ratio", "framework_ms_per_iter", "framework_share"),
    }.items():
        for key in keys:
            assert report[name][key] > 0, (name, key, report[name])
    profile = report["pipeline"]["worker_profile_ms_per_sample"]
    assert set(profile) == {"decode_jpeg_png", "decode_strict", "crop_flip", "collate", "worker_total"}
    assert all(v > 0 for v in profile.values()), profile
    assert 0 < report["engine"]["framework_share"] < 1
    assert "pipeline: baseline" in stdout and "worker_speedup" in stdout and "engine: bare" in stdout


def _bench_run():
    """benchmarks/run.py, loaded by its path (the name "run" is also the repository's entry script);
    loading it puts benchmarks/ on sys.path."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "benchmarks" / "run.py")
    bench_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_run)
    return bench_run


def test_inference_tiny_with_the_shared_export(spread_checkpoint: Path, exported_onnx: Path) -> None:
    """``--only inference`` at its tiny settings, on the model the export tests already exported
    (its own export alone would take ~15 s of CPU); the runner, the keys and the printed line."""
    bench_run = _bench_run()
    from bench_inference import bench_inference

    threads = torch.get_num_threads()
    settings = dict(bench_run.SETTINGS["inference"]["tiny"])
    assert "inference" in bench_run.NAMES and bench_run.RUNNERS["inference"] is bench_run.run_inference
    result = bench_inference(**settings, checkpoint=spread_checkpoint, onnx_file=exported_onnx)
    assert torch.get_num_threads() == threads  # restored
    for key in ("pytorch_1t_images_per_s", "onnxruntime_1t_images_per_s", "ratio_1t"):
        assert result[key] > 0, (key, result)
    assert result["backbone"] == "resnet18" and result["max_abs_diff"] <= 1e-4 and result["max_map_diff"] <= 1
    line = bench_run.format_line("inference", result)
    assert line.startswith("inference: resnet18 48x64, batch 1; 1 thread: pytorch") and "ratio" in line


@pytest.mark.slow  # a predict of a 128x128 photo, twice
@pytest.mark.timeout(180)
@pytest.mark.usefixtures("one_thread")
def test_cutout_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only cutout`` at its tiny settings: the colour errors, the refinement's time and its share of predict."""
    bench_run = _bench_run()
    monkeypatch.setenv("IGNITE_R3NET_BENCH_CACHE", str(tmp_path / "cache"))
    assert bench_run.RUNNERS["cutout"] is bench_run.run_cutout
    settings = bench_run.SETTINGS["cutout"]["tiny"]
    result = bench_run.RUNNERS["cutout"](bench_run.default_data(tiny=True), dict(settings))
    assert result["settings"]["composites"] == settings["generated"] + settings["masks"]
    for key in ("plain_error", "refined_error", "refinement_s", "predict_plain_s", "predict_refined_s"):
        assert result[key] > 0, (key, result)
    assert result["error_ratio"] == result["refined_error"] / result["plain_error"] < 1
    assert 0 < result["refinement_share"] == result["refinement_s"] / result["predict_refined_s"]
    line = bench_run.format_line("cutout", result)
    assert line.startswith("cutout: mean colour error at soft pixels over 4 composites: plain ") and "goal" in line


def test_scan_tiny_cold_and_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only scan`` at its tiny settings: a cold scan (no cache) reads every header, the warm one
    (a relaunch) reads none, and the ratio is the key."""
    bench_run = _bench_run()
    from bench_scan import bench_scan

    assert bench_run.RUNNERS["scan"] is bench_run.run_scan
    from ignite_r3net.data import checks

    real, probed = checks._probe, []
    monkeypatch.setattr(checks, "_probe", lambda path: probed.append(path) or real(path))
    result = bench_scan(**bench_run.SETTINGS["scan"]["tiny"])
    pairs = bench_run.SETTINGS["scan"]["tiny"]["pairs"]
    assert len(probed) == 2 * pairs  # the cold scan only
    assert result["cold_s"] > 0 and result["warm_s"] > 0 and result["ratio"] == result["cold_s"] / result["warm_s"]
    line = bench_run.format_line("scan", result)
    assert line.startswith(f"scan: {pairs} pairs, cold (no scan cache) ") and "ratio" in line


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_evaluate_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only evaluate`` at its tiny settings: both real ``evaluate`` runs, the keys and the line."""
    bench_run = _bench_run()
    monkeypatch.setenv("IGNITE_R3NET_BENCH_CACHE", str(tmp_path / "cache"))
    data = bench_run.default_data(tiny=True)
    result = bench_run.RUNNERS["evaluate"](data, dict(bench_run.SETTINGS["evaluate"]["tiny"]))
    for key in ("one_proc_s", "two_proc_s", "ratio", "one_proc_images_per_s", "two_proc_images_per_s"):
        assert result[key] > 0, (key, result)
    for key in ("ceiling", "forward_1t_s", "forward_2t_s"):  # the ceiling measured in the same run
        assert result[key] > 0, (key, result)
    assert result["settings"]["images"] == 4
    assert bench_run.format_line("evaluate", result).startswith("evaluate: 4 images, 1 process")


@pytest.mark.slow
def test_figure_tiny() -> None:
    """``--only figure`` at its tiny settings: the runner, every key and the printed line."""
    bench_run = _bench_run()
    result = bench_run.RUNNERS["figure"](Path(), dict(bench_run.SETTINGS["figure"]["tiny"]))
    for key in ("figure_build_s", "png_default_s", "png_ours_s", "png_speedup", "pdf_s"):
        assert result[key] > 0, (key, result)
    assert result["rows"] == 2 and result["png_ours_bytes"] > 0 and result["png_default_bytes"] > 0
    assert bench_run.format_line("figure", result).startswith("figure: 3 methods x 6 maps of 60x80, 2-row figure")


@pytest.mark.usefixtures("one_thread")
def test_gpu_check_writes_each_result_as_soon_as_it_has_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu_check.py --device cpu --only unwrapped speed_fp32`` in this process: the machine line
    and each check are in the JSON before the next check starts (a run stopped at its time limit
    keeps them), the model of ``--nproc 1`` is R3Net itself, and the speed mode has its figure.
    ``benchmarks/run.py --only gpu`` (its speed modes) is skipped without CUDA."""
    bench_run = _bench_run()
    import gpu_check

    out = tmp_path / "check.json"
    on_disk: list[set[str]] = []
    speed = gpu_check.train_speed
    monkeypatch.setattr(
        gpu_check, "train_speed", lambda *a: on_disk.append(set(json.loads(out.read_text()))) or speed(*a)
    )
    argv = ["--device", "cpu", "--only", "unwrapped", "speed_fp32", "--json", str(out), "--work-dir", str(tmp_path)]
    assert gpu_check.main(argv) == 0
    assert on_disk == [{"command", "machine", "unwrapped"}]
    report = json.loads(out.read_text())
    assert report["machine"]["torch"] == torch.__version__ and report["machine"]["sizes"]["backbone"] == "resnet18"
    assert report["unwrapped"]["model"] == "R3Net"
    assert report["speed_fp32"]["images_per_s"] > 0 and report["speedup_vs_fp32"] == {"fp32": 1.0}
    assert set(report) == {"command", "machine", "unwrapped", "speed_fp32", "speedup_vs_fp32"}
    skipped = bench_run.RUNNERS["gpu"](Path(), dict(bench_run.SETTINGS["gpu"]["tiny"]))
    assert "skipped" in skipped and bench_run.format_line("gpu", skipped).startswith("gpu: skipped")


# over the 30 s budget (68 s idle on 2 cores): the script's every check end to end is the claim
@pytest.mark.slow
@pytest.mark.timeout(1300)
def test_gpu_check_runs_every_check_on_the_cpu(tmp_path: Path) -> None:
    """The whole ``gpu_check.py --device cpu``, as a CI machine runs it: every check passes (the
    deterministic resume equals the uninterrupted run in every tensor, the maps compare, the
    export works) and each is in the JSON. Meant to take under 2 minutes; the limit here allows
    for a loaded machine."""
    from helpers import cpu_env

    out = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--json", str(out)]
        + ["--max-seconds", "1200", "--work-dir", str(tmp_path / "work")],
        cwd=str(tmp_path),
        # one torch thread per process, as the suite's other child processes: two threads per process
        # on the suite's two busy cores spin against each other (over twice the CPU time)
        env=cpu_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1260,  # 746 s with a load average of 12-18 on 2 cores
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads(out.read_text())
    _bench_run()  # puts benchmarks/ on sys.path
    import gpu_check

    expected = [c for c in gpu_check.CHECKS if c != "speed_compile"]
    assert [k for k in report if k in gpu_check.CHECKS] == expected
    assert not [k for k, v in report.items() if isinstance(v, dict) and ("error" in v or "skipped" in v)]
    assert report["deterministic_resume"]["differ"] == 0 and report["deterministic_resume"]["tensors"] > 100
    assert report["deterministic_resume"]["validations"] == 3  # at 0, 3 and 6: the GPU's validation path ran
    assert report["evaluate"]["max_gray_levels_gpu_vs_cpu"] == 0 == report["predict"]["max_gray_levels_gpu_vs_cpu"]
    assert report["export_onnx"]["megabytes"] > 1
    assert "deterministic_resume: tensors" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_benchmark_script_imports() -> None:
    """A benchmark no test runs (cost_table.py, rembg_cost.py) still imports what the package now provides:
    each script loaded by its path in this process (a process of its own spent ~4 s of CPU importing torch)."""
    _bench_run()  # benchmarks/ on sys.path: the scripts import one another by name
    scripts = sorted((REPO / "benchmarks").glob("*.py"))
    for path in scripts:
        name = f"benchmark_script_{path.stem}"  # not the name another test imports it by
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)  # where @dataclass looks its module up
        try:
            spec.loader.exec_module(sys.modules[name])
        finally:
            del sys.modules[name]
    assert {"cost_table", "rembg_cost", "gpu_check"} <= {path.stem for path in scripts}
