"""Test-wide settings: no test may reach the network for weights (the CI machine has none). Session
fixtures for what several test files need and is slow to make: one 2-process training run as a
user starts it (``reference_run``), one exported model per format (an ONNX export takes ~15 s).

The suite runs on two pytest-xdist workers (setup.cfg ``addopts``): the slow fixtures are made once per
test run, by the first worker that needs them, and read by the others (``made_once``); tests marked
``serial`` run one after another on one worker (``--dist loadgroup``, group ``serial``)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from filelock import FileLock

# weights come from local files or --pretrained none; a test that forgets fails at once instead of
# waiting on a download (child processes inherit these)
os.environ["HF_HUB_OFFLINE"] = "1"
# CPU and gloo only, also for the commands the tests run in this process with ``cli.main``
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TORCH_HOME", str(Path(__file__).resolve().parent / ".no-torch-cache"))
# Under pytest-xdist each worker takes its share of the cores for torch's threads, as a training process
# does (distributed/process_setup.py) and as the processes the tests start do (helpers.cpu_env): two
# workers with a full pool each spent 5x the CPU time on the in-process training tests (OpenMP threads
# spinning for cores the other worker holds). Set before any test module imports torch.
if "PYTEST_XDIST_WORKER" in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // _workers)))
    # numba's OpenMP threading layer (started when rembg imports pymatting, at the collection of
    # test_export_rembg.py) sets the process's OpenMP pool, which torch shares, to NUMBA_NUM_THREADS:
    # all the cores unless told, and every later in-process test of that worker then ran on both
    os.environ.setdefault("NUMBA_NUM_THREADS", os.environ["OMP_NUM_THREADS"])
# the data scan cache (data/checks.py) of the tests' data sets: not the user's ~/.cache
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ignite_r3net-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)


# what makes a test slow besides starting processes of its own (marked where they are written)
SLOW_FIXTURES = {"reference_run", "exported_onnx", "timm_run"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook names each test's group)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs the reference run (~20 s) or the ONNX export (~15 s) is slow; a ``serial`` test
    joins the xdist group ``serial``, whose tests one worker runs one at a time; under xdist the slow
    tests are handed out first."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.xdist_group("serial"))
    if "PYTEST_XDIST_WORKER" in os.environ:
        # the long tests first, so that no worker is left with one at the end while the other idles (the
        # serial group, the largest, is handed out first anyway); every worker sorts alike
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def made_once(name: str, tmp_path_factory: pytest.TempPathFactory, make: Callable[[Path], object]) -> Path:
    """The folder ``make(folder)`` filled, made once per test run: under xdist the first worker to ask
    makes it under a lock in the run's shared temporary folder and the others wait and read it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:  # one process: the session fixture's own folder
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above each worker's own
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half-way
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


class Run(NamedTuple):
    """A finished ``python run.py`` training run: its output folder and what it printed."""

    out: Path
    train: Path
    val: Path
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def reference_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """12 training pairs and one validation pair (see ``helpers.reference_args``)."""
    from helpers import make_tiny_dataset

    def make(folder: Path) -> None:
        made = make_tiny_dataset(folder / "data", n=12, n_val=1)
        (folder / "paths.json").write_text(json.dumps([str(p.relative_to(folder)) for p in made]), encoding="utf-8")

    folder = made_once("reference-data", tmp_path_factory, make)
    train, val = json.loads((folder / "paths.json").read_text(encoding="utf-8"))
    return folder / train, folder / val


@pytest.fixture(scope="session")
def reference_run(reference_data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``python run.py --nproc 2 ...`` in a real process, exactly as a user starts training; the
    training, resume, fine-tuning and launcher tests compare against it."""
    from helpers import reference_args, run_cli

    train, val = reference_data

    def make(folder: Path) -> None:
        proc = run_cli(reference_args(train, val, folder / "out"), timeout=240)
        printed = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        (folder / "proc.json").write_text(json.dumps(printed), encoding="utf-8")

    folder = made_once("reference-run", tmp_path_factory, make)
    printed = json.loads((folder / "proc.json").read_text(encoding="utf-8"))
    return Run(folder / "out", train, val, subprocess.CompletedProcess(**printed))


@pytest.fixture(scope="session")
def spread_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A resnet18 ``best_model_*`` file whose maps span 0..1 (see ``helpers.save_spread_r3net``)."""
    from helpers import save_spread_r3net

    name = "best_model_1_maxF=0.5000.pt"
    return made_once("spread", tmp_path_factory, lambda folder: save_spread_r3net(folder / name)) / name


# a timm backbone with a slim head, trained briefly: tests/test_timm.py and tests/test_int8.py
TIMM_TRAIN = ["--backbone", "timm:test_efficientnet", "--head-width", "0.25", "--pretrained", "none", "--crop", "48"]
TIMM_ITERS, TIMM_EVERY = 24, 4


@pytest.fixture(scope="session")
def timm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of ``TIMM_ITERS`` iterations of R3Net on timm's smallest EfficientNet (82k parameters,
    random weights) at head width 0.25, in one process, the last 3 checkpoints kept (every ``TIMM_EVERY``),
    validated at the end; its data beside it (8 training pairs, 4 held-out ones). Enough training for confident
    maps (max F about 0.85), whose max F INT8 must keep (an untrained model's maps are about 0.5 everywhere,
    where max F jumps with any change)."""
    from helpers import make_tiny_dataset

    from ignite_r3net import cli

    def make(folder: Path) -> None:
        make_tiny_dataset(folder / "data", n=8, n_val=4)
        assert cli.main(timm_run_args(folder / "data", folder / "out")) == 0

    return made_once("timm-run", tmp_path_factory, make)


def timm_run_args(data: Path, out: Path) -> list[str]:
    """The options of ``timm_run``: its data in ``data`` (train/, val/), its output in ``out``."""
    args = ["--data", str(data / "train"), "--val-data", str(data / "val"), "--output-dir", str(out), *TIMM_TRAIN]
    args += ["--iters", str(TIMM_ITERS), "--checkpoint-every", str(TIMM_EVERY), "--val-every", str(TIMM_ITERS)]
    args += ["--batch-size", "4"]
    return [*args, "--lr", "0.01", "--workers", "0", "--no-val-at-start", "--no-progress"]


def _export(checkpoint: Path, fmt: str, output: Path) -> Path:
    from ignite_r3net import cli

    assert cli.main(["export", "--checkpoint", str(checkpoint), "--format", fmt, "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="session")
def exported_onnx(spread_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``spread_checkpoint`` exported by the CLI as ONNX."""

    def make(folder: Path) -> None:
        _export(spread_checkpoint, "onnx", folder / "r3net.onnx")

    return made_once("onnx", tmp_path_factory, make) / "r3net.onnx"


@pytest.fixture(scope="session")
def exported_torchscript(spread_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``spread_checkpoint`` exported by the CLI as TorchScript."""
    return _export(spread_checkpoint, "torchscript", tmp_path_factory.mktemp("torchscript") / "r3net.pt")


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One torch thread in this process and in the processes it starts (``OMP_NUM_THREADS``, which the commands
    honour), as the suite's child processes have (``helpers.cpu_env``): under ``-n 0`` two threads per process spin
    against another test run's on two cores (an in-process command took 3-6x the wall time). A convolution computed
    with another number of threads may differ in its last bits, so test_evaluate's maps of N processes equal those
    of one at the same threads per process."""
    import torch  # not at the top: this module sets the threads' environment before torch is imported

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
