"""--tracker: a run logged to a real MLflow server and read back through MLflow's client (recipe,
losses, LR, validation metrics, best checkpoint); a missing package or a silent server is one
line before any worker starts."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_TRAIN, blocked_signals, cpu_env, free_port, log_lines, make_tiny_dataset, plan_of

from ignite_r3net import cli
from ignite_r3net.config import TrainConfig
from ignite_r3net.training import trackers
from ignite_r3net.training.trackers import RECORD, prepare_trackers

ITERS, EVERY = 4, 2


def _train_args(data: tuple[Path, Path], out: Path) -> list[str]:
    train, val = data
    args = ["--data", str(train), "--val-data", str(val), "--output-dir", str(out), *TINY_TRAIN]
    return [*args, "--iters", str(ITERS), "--checkpoint-every", str(EVERY), "--tracker", "mlflow"]


@pytest.mark.parametrize(
    "tracker, env, expected",
    [
        ("mlflow", {}, 'error: --tracker mlflow needs the mlflow package: pip install -e ".[mlflow]"'),
        ("wandb", {}, "error: --tracker wandb needs the wandb package"),
        ("clearml", {}, "error: --tracker clearml needs the clearml package"),
        # nothing listens on a port that was free a moment ago
        ("mlflow-server", {"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port}"}, "error: --tracker mlflow: the tracking"),
    ],
)
def test_a_missing_package_or_a_silent_server_is_one_line_before_any_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tracker: str, env, expected: str
) -> None:
    name = tracker.split("-")[0]
    if tracker == name:
        monkeypatch.setitem(sys.modules, name, None)  # import now raises ImportError
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(port=free_port()))
    data = make_tiny_dataset(tmp_path / "data", n=4, n_val=1)
    out = tmp_path / "run"
    args = _train_args(data, out)
    args[args.index("mlflow")] = name
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err
    assert not out.exists()  # refused before any work: no train.log, no tracker run


def test_the_recipe_becomes_flat_parameters() -> None:
    from ignite_r3net.training.trackers import recipe_params

    config = TrainConfig(lr=0.01, tracker=["mlflow"])
    params = recipe_params(plan_of(config, weights={"source": "none", "sha256": "ab"}, tracking={"x": {}}))
    assert params["lr"] == "0.01" and params["tracker"] == "mlflow" and params["weights.sha256"] == "ab"
    assert "tracking" not in params and all(isinstance(v, str) for v in params.values())


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on a free port of 127.0.0.1 with its stores in a temporary folder; its URI
    (mlflow is in the test extra: a missing package fails the test rather than skipping it)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [Path(sys.executable).parent / "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "art")]
    command += ["--workers", "1"]
    # no job runner: its seven huey consumers (for server-side jobs, which logging a run does not use)
    # cost ~16 s of CPU over the test, taken from the other tests running meanwhile
    env = cpu_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with open(root / "server.log", "w") as log:
        server = subprocess.Popen(
            [str(part) for part in command],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, (root / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the MLflow server did not answer within 240 s"
            time.sleep(0.5)
        yield uri
    finally:
        # nothing of the server needs keeping, and its job runner lingers seconds after SIGTERM
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_logged_to_a_real_mlflow_server_reads_back(
    tmp_path: Path, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training runs in this process (one process trains in the launcher's own; a ``python run.py`` of its
    own cost ~5 s of start-up and as much again to import MLflow); the server is a process of its own."""
    import mlflow
    from mlflow.tracking import MlflowClient

    data = make_tiny_dataset(tmp_path / "data", n=4, n_val=1)
    out = tmp_path / "run"
    # what the run sets for MLflow in its process, undone after it: the tracking URI (MLflow's global and the
    # environment variable) and async logging (an environment variable)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("MLFLOW_ENABLE_ASYNC_LOGGING", raising=False)
    try:
        assert cli.main(_train_args(data, out)) == 0
    finally:
        mlflow.end_run()  # none is left open by a run that ended; one that failed may leave its own
        mlflow.set_tracking_uri(None)  # unsets MLFLOW_TRACKING_URI too
    record = json.loads((out / RECORD).read_text())["mlflow"]
    assert record["tracking_uri"] == mlflow_server
    client = MlflowClient(mlflow_server)
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    # the recipe, as config.json has it
    config = json.loads((out / "config.json").read_text())
    for key in ("lr", "iters", "batch_size", "backbone", "crop", "seed"):
        assert run.data.params[key] == str(config[key]), key

    def history(name: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}

    # losses, images/s and the LR of each group by name, at every log line
    assert sorted(history("train total")) == list(range(1, ITERS + 1))
    # every name logged, so that the checks of their values below cannot pass on an empty history
    for name in ("train images_per_s", "lr weights", "lr biases"):
        assert sorted(history(name)) == list(range(1, ITERS + 1)), name
    assert all(v > 0 for v in history("train images_per_s").values())
    for it, lr in history("lr weights").items():
        assert lr == pytest.approx(1e-3 * (1 - (it - 1) / ITERS) ** 0.9, rel=1e-6)  # the poly formula
        assert history("lr biases")[it] == pytest.approx(2 * lr, rel=1e-6)
    # validation before training and at each checkpoint, the values train.log shows
    logged = {}
    for line in log_lines(out / "train.log"):
        if line.startswith("[val iter "):
            logged[int(line.split()[2].rstrip("]"))] = float(line.split("maxF ")[1].split()[0])
    max_f = history("val maxF")
    assert sorted(max_f) == sorted(logged) == [0, EVERY, ITERS]
    assert all(round(max_f[it], 4) == logged[it] for it in logged)
    # the best checkpoint, byte for byte
    (best,) = out.glob("best_model_*.pt")
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert artifacts == [f"checkpoints/{best.name}"]
    copy = client.download_artifacts(run.info.run_id, artifacts[0], str(tmp_path))
    assert Path(copy).read_bytes() == best.read_bytes()

    # a resumed run reopens the recorded run, so its curves continue there
    resumed = TrainConfig(output_dir=str(out), resume=str(out / f"checkpoint_{EVERY}.pt"), tracker=["mlflow"])
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_server
    try:
        assert prepare_trackers(plan_of(resumed))["mlflow"]["run_id"] == record["run_id"]
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_without_a_tracking_uri_mlflow_stores_in_the_output_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    record = prepare_trackers(plan_of(TrainConfig(output_dir=str(out), tracker=["mlflow"], lr=0.005)))["mlflow"]
    assert record["tracking_uri"] == f"sqlite:///{out.resolve() / 'mlruns.db'}"
    client = MlflowClient(record["tracking_uri"])
    run = client.get_run(record["run_id"])
    assert run.data.params["lr"] == "0.005"
    assert run.info.artifact_uri.startswith((out.resolve() / "mlartifacts").as_uri())


def test_ignites_wandb_logger_gets_what_tensorboard_gets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loggers attached through ignite's ``WandBLogger`` (its calls into a stand-in ``wandb``
    module, recorded): the run opened with the recipe, losses, images/s and named LRs at the log
    lines, validation metrics at the trainer's iteration, the best checkpoint, the end."""
    import types

    import torch
    from ignite.engine import Engine
    from ignite.handlers import LRScheduler
    from torch.optim.lr_scheduler import LambdaLR

    from ignite_r3net.metrics.keys import METRIC_KEYS
    from ignite_r3net.training.events import ValidationEvents
    from ignite_r3net.training.step import LOSS_NAMES
    from ignite_r3net.training.tracker_loggers import attach_loggers

    calls: list[tuple] = []
    wandb = types.ModuleType("wandb")
    wandb.login = lambda **kwargs: True
    wandb.util = types.SimpleNamespace(generate_id=lambda: "run-id-1")
    wandb.init = lambda **kwargs: calls.append(("init", kwargs))
    wandb.log = lambda data, step=None: calls.append(("log", step, dict(data)))
    wandb.save = lambda path, base_path=None, policy=None: calls.append(("save", Path(path).name, policy))
    wandb.finish = lambda: calls.append(("finish",))
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    plan = plan_of(TrainConfig(output_dir=str(tmp_path), tracker=["wandb"], iters=3, lr=0.01))
    plan = dataclasses.replace(plan, tracking=prepare_trackers(plan))
    assert plan.tracking == {"wandb": {"id": "run-id-1", "project": "ignite_r3net"}}
    (tmp_path / "best_model_2_maxF=0.5000.pt").write_bytes(b"weights")

    def step(engine: Engine, batch: int) -> None:  # what the loss meter leaves at a log line
        engine.state.metrics.update({name: 0.1 * engine.state.iteration for name in LOSS_NAMES}, images_per_s=8.0)
        if engine.state.iteration == 2:  # a validation
            evaluator.state.metrics.update({key: 0.5 for key in METRIC_KEYS})
            evaluator.fire_event(ValidationEvents.SCORED)

    trainer, evaluator = Engine(step), Engine(lambda engine, batch: None)
    # as attach_validation registers it
    evaluator.register_events(*ValidationEvents, event_to_attr={ValidationEvents.SCORED: "validations"})
    biases, weights = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [biases], "lr": 0.02}, {"params": [weights], "lr": 0.01}])
    scheduler = LRScheduler(LambdaLR(optimizer, lambda _: 1.0))  # the rates stay those set above
    tb = types.SimpleNamespace(attach_output_handler=lambda *args, **kwargs: None, close=lambda: None)
    assert [run.name for run in attach_loggers(trainer, evaluator, tb, scheduler, plan)] == ["tensorboard", "wandb"]
    trainer.run(range(3))

    init = calls[0]
    assert init[0] == "init" and init[1]["id"] == "run-id-1" and init[1]["resume"] == "allow"
    assert init[1]["config"]["lr"] == "0.01" and init[1]["project"] == "ignite_r3net"
    logged = [c for c in calls if c[0] == "log"]
    train = {step: data for _, step, data in logged if "train/total" in data}
    assert sorted(train) == [1, 2, 3] and train[2]["train/total"] == pytest.approx(0.2)
    assert train[3]["train/images_per_s"] == 8.0
    lrs = [data for _, _, data in logged if "lr/biases" in data]
    assert len(lrs) == 3 and lrs[0] == {"lr/biases": 0.02, "lr/weights": 0.01}
    (val,) = [(step, data) for _, step, data in logged if "val/maxF" in data]
    assert val[0] == 2 and val[1]["val/maxF"] == 0.5
    assert calls[-2:] == [("save", "best_model_2_maxF=0.5000.pt", "now"), ("finish",)]


def test_threads_a_tracker_starts_in_the_launcher_leave_ctrl_c_to_its_main_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow starts a telemetry thread while its run is opened in the launching process (not under
    pytest, where MLflow turns telemetry off): a Ctrl-C the kernel handed to such a thread would go
    unnoticed by a launcher waiting for its ranks (test_run_lock). Threads started there block it."""
    started: list[threading.Thread] = []

    def prepare(config: TrainConfig, recorded: dict) -> dict:
        started.append(threading.Thread(target=time.sleep, args=(0.5,), daemon=True))
        started[-1].start()
        return {}

    monkeypatch.setitem(trackers._PREPARE, "mlflow", prepare)
    prepare_trackers(plan_of(TrainConfig(output_dir=str(tmp_path), tracker=["mlflow"])))
    assert {signal.SIGINT, signal.SIGTERM} <= blocked_signals(started[0].native_id)
    assert not {signal.SIGINT, signal.SIGTERM} & blocked_signals(threading.main_thread().native_id)
