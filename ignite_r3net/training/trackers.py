"""Experiment trackers (``--tracker mlflow wandb clearml``) through ignite's loggers: what TensorBoard
gets (losses, the LR of each parameter group by name, images/s, validation metrics), plus the recipe
as parameters and the best checkpoint as an artifact at the end.

* ``prepare_trackers`` runs in the launching process, before any worker starts: each tracker's
  package must import and its server must answer, else one ``OptionError`` line. MLflow's run is
  created there (the recipe logged as its parameters); a resumed run (``--resume``) reopens the run
  recorded in ``OUTPUT_DIR/tracking.json``, so its curves continue. Without ``MLFLOW_TRACKING_URI``
  the store is ``sqlite:///OUTPUT_DIR/mlruns.db`` with artifacts in ``OUTPUT_DIR/mlartifacts``:
  MLflow 3 refuses a plain ``./mlruns`` file store unless told to accept it.
* ``attach_trackers`` runs on rank 0 and attaches ignite's ``MLflowLogger``, ``WandBLogger`` or
  ``ClearMLLogger`` to the trainer and the validation evaluator.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events

from ..atomic_files import write_json
from ..config import TrainConfig
from ..distributed.ranks import rank_zero_only
from ..errors import OptionError, error_line
from ..metrics import METRIC_KEYS
from .handlers import every_or_last
from .meters import LOSS_NAMES
from .optim import PARAM_GROUPS
from .validation import BEST_PATTERN, ValidationEvents

RECORD = "tracking.json"
PROJECT = "ignite_r3net"  # the MLflow experiment, W&B project and ClearML project unless set otherwise
_PROBE_TIMEOUT_S = "10"


# ------------------------------------------------------------------------- launching process


def prepare_trackers(config: TrainConfig) -> TrainConfig:
    """Check every ``--tracker`` (package, server) and open its run; returns the config with
    ``tracking`` (what rank 0 needs to log into those runs), also kept in ``OUTPUT_DIR/tracking.json``."""
    if not config.tracker:
        return config
    recorded = _recorded(config) if config.resume else {}
    tracking = {name: _PREPARE[name](config, recorded.get(name) or {}) for name in config.tracker}
    write_json(tracking, Path(config.output_dir) / RECORD)
    return dataclasses.replace(config, tracking=tracking)


def _recorded(config: TrainConfig) -> dict[str, Any]:
    try:
        return json.loads((Path(config.output_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _require(name: str) -> Any:
    """The tracker's package, or one line saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise OptionError(
            f"--tracker {name} needs the {name} package: pip install -e '.[{name}]' (or pip install {name})"
        ) from None


def recipe_params(config: TrainConfig) -> dict[str, str]:
    """The run's configuration as flat string parameters (``weights.sha256``, ...)."""
    params: dict[str, str] = {}
    for key, value in dataclasses.asdict(config).items():
        if key == "tracking":
            continue
        if isinstance(value, dict):
            params.update({f"{key}.{k}": str(v) for k, v in value.items()})
        else:
            params[key] = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return params


@contextmanager
def _answer_quickly() -> Iterator[None]:
    """MLflow retries a silent server for minutes; at start-up one try of 10 s says enough."""
    names = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=_PROBE_TIMEOUT_S)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _prepare_mlflow(config: TrainConfig, recorded: dict[str, Any]) -> dict[str, Any]:
    _require("mlflow")
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
    output = Path(config.output_dir).resolve()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{output / 'mlruns.db'}"
    try:
        with _answer_quickly():
            client = MlflowClient(uri)
            if recorded.get("tracking_uri") == uri and _run_exists(client, recorded["run_id"]):
                return recorded
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
            found = client.get_experiment_by_name(name)
            if found is not None:
                experiment = found.experiment_id
            elif "MLFLOW_TRACKING_URI" in os.environ:
                experiment = client.create_experiment(name)  # the server decides where artifacts go
            else:
                experiment = client.create_experiment(name, artifact_location=(output / "mlartifacts").as_uri())
            run = client.create_run(experiment, run_name=output.name)
            params = [Param(key, value) for key, value in recipe_params(config).items()]
            client.log_batch(run.info.run_id, params=params)
    except Exception as e:  # noqa: BLE001 - requests, sqlalchemy and MLflow raise their own types
        raise OptionError(f"--tracker mlflow: the tracking store {uri} does not answer: {error_line(e)}") from None
    return {"tracking_uri": uri, "experiment_id": experiment, "run_id": run.info.run_id}


def _run_exists(client: Any, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:  # noqa: BLE001 - MlflowException: RESOURCE_DOES_NOT_EXIST
        return False


def _prepare_wandb(config: TrainConfig, recorded: dict[str, Any]) -> dict[str, Any]:
    wandb = _require("wandb")
    if os.environ.get("WANDB_MODE") not in ("offline", "disabled", "dryrun"):
        try:
            wandb.login(verify=True, timeout=int(_PROBE_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - no key, a wrong key, no server
            raise OptionError(
                f"--tracker wandb: cannot log in to Weights & Biases: {error_line(e)} (WANDB_MODE=offline logs locally)"
            ) from None
    return {"id": recorded.get("id") or wandb.util.generate_id(), "project": os.environ.get("WANDB_PROJECT", PROJECT)}


def _prepare_clearml(config: TrainConfig, recorded: dict[str, Any]) -> dict[str, Any]:
    _require("clearml")
    from clearml import Task

    if not Task.running_locally() or os.environ.get("CLEARML_OFFLINE_MODE"):
        return {"project": PROJECT}
    try:
        from clearml.backend_api.session.client import APIClient

        APIClient().projects.get_all(page=0, page_size=1)
    except Exception as e:  # noqa: BLE001 - no configuration, no server
        raise OptionError(f"--tracker clearml: the ClearML server does not answer: {error_line(e)}") from None
    return {"project": PROJECT}


_PREPARE: dict[str, Callable[[TrainConfig, dict[str, Any]], dict[str, Any]]] = {
    "mlflow": _prepare_mlflow,
    "wandb": _prepare_wandb,
    "clearml": _prepare_clearml,
}


# ---------------------------------------------------------------------------------- rank 0


class TrackerRun:
    """One tracker's ignite logger and how its run ends (the best checkpoint uploaded first)."""

    def __init__(self, name: str, logger: Any, config: TrainConfig) -> None:
        self.name, self.logger, self.config = name, logger, config

    def finish(self, _: Engine) -> None:
        best = sorted(p for p in Path(self.config.output_dir).glob("best_model_*.pt") if BEST_PATTERN.match(p.name))
        if best:
            _UPLOAD[self.name](self.logger, best[-1])
        self.close(failed=False)

    def close(self, failed: bool = True) -> None:
        if self.name == "mlflow":
            import mlflow

            mlflow.end_run("FAILED" if failed else "FINISHED")
        else:
            self.logger.close()


def named_lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """The learning rate of each parameter group by its name (``biases``, ``weights``)."""
    return {name: float(group["lr"]) for name, group in zip(PARAM_GROUPS, optimizer.param_groups)}


@rank_zero_only
def attach_trackers(
    trainer: Engine, evaluator: Engine | None, optimizer: torch.optim.Optimizer, config: TrainConfig
) -> list[TrackerRun]:
    """Log to every tracker ``prepare_trackers`` opened: losses and images/s (tag ``train``), the LR
    of each group (``lr``) at the log lines, validation metrics (``val``) at each validation; the
    best checkpoint at the end. Returns the runs (for closing on a failure; none on other ranks)."""
    runs = []
    when = Events.ITERATION_COMPLETED(event_filter=every_or_last(config.log_every, config.iters))
    for name, record in (config.tracking or {}).items():
        logger = _OPEN[name](record, config)
        logger.attach_output_handler(trainer, event_name=when, tag="train", metric_names=[*LOSS_NAMES, "images_per_s"])
        logger.attach_output_handler(
            trainer, event_name=when, tag="lr", output_transform=lambda _: named_lrs(optimizer)
        )
        if evaluator is not None:
            logger.attach_output_handler(
                evaluator,
                event_name=ValidationEvents.SCORED,
                tag="val",
                metric_names=list(METRIC_KEYS),
                global_step_transform=lambda *_: trainer.state.iteration,
            )
        run = TrackerRun(name, logger, config)
        trainer.add_event_handler(Events.COMPLETED, run.finish)
        runs.append(run)
    return runs


def _open_mlflow(record: dict[str, Any], config: TrainConfig) -> Any:
    import mlflow
    from ignite.handlers.mlflow_logger import MLflowLogger

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(record["tracking_uri"])
    mlflow.config.enable_async_logging(True)  # a log line must not wait for the server
    mlflow.start_run(run_id=record["run_id"])
    return MLflowLogger()


def _open_wandb(record: dict[str, Any], config: TrainConfig) -> Any:
    from ignite.handlers.wandb_logger import WandBLogger

    return WandBLogger(
        project=record["project"],
        id=record["id"],
        resume="allow",
        name=Path(config.output_dir).resolve().name,
        dir=config.output_dir,
        config=recipe_params(config),
    )


def _open_clearml(record: dict[str, Any], config: TrainConfig) -> Any:
    from ignite.handlers.clearml_logger import ClearMLLogger

    logger = ClearMLLogger(project_name=record["project"], task_name=Path(config.output_dir).resolve().name)
    logger.get_task().connect(recipe_params(config), name="recipe")
    return logger


_OPEN: dict[str, Callable[[dict[str, Any], TrainConfig], Any]] = {
    "mlflow": _open_mlflow,
    "wandb": _open_wandb,
    "clearml": _open_clearml,
}

_UPLOAD: dict[str, Callable[[Any, Path], None]] = {
    "mlflow": lambda logger, path: logger.log_artifact(str(path), artifact_path="checkpoints"),
    "wandb": lambda logger, path: logger.save(str(path), base_path=str(path.parent), policy="now"),
    "clearml": lambda logger, path: logger.get_task().upload_artifact(path.name, artifact_object=str(path)),
}
