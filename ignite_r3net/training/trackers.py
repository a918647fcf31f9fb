"""``--tracker``, the launching process's part: each package must import and its server answer (else one
``OptionError`` line) before the runs are opened (or, resumed, those in ``tracking.json``) for rank 0's
``tracker_loggers``. MLflow's store: ``sqlite:///OUTPUT_DIR/mlruns.db`` (MLflow 3 refuses a ``./mlruns``)."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..atomic_files import read_json_object, write_json
from ..distributed.signals import threads_leave_signals_to_main
from ..distributed.topology import environment
from ..errors import OptionError, error_line, install_extra
from .plan import RunPlan

RECORD = "tracking.json"
PROJECT = "ignite_r3net"  # the MLflow experiment, W&B project and ClearML project unless set otherwise
_PROBE_TIMEOUT_S = "10"


def prepare_trackers(plan: RunPlan) -> dict[str, dict] | None:
    """Check every ``--tracker`` and open its run; returns the plan's ``tracking`` (also in ``tracking.json``)."""
    config = plan.options
    if not config.tracker:
        return None
    recorded = (read_json_object(Path(config.output_dir) / RECORD) or {}) if plan.resume else {}
    with threads_leave_signals_to_main():  # MLflow starts a telemetry thread in this process
        tracking = {name: _PREPARE[name](plan, recorded.get(name) or {}) for name in config.tracker}
    write_json(tracking, Path(config.output_dir) / RECORD)
    return tracking


def _require(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise OptionError(
            f"--tracker {name} needs the {name} package: {install_extra(name)} (or pip install {name})"
        ) from None


def recipe_params(plan: RunPlan) -> dict[str, str]:
    """The run's configuration as flat string parameters (``weights.sha256``, ...)."""
    params: dict[str, str] = {}
    for key, value in plan.brief().items():
        if key == "tracking":
            continue
        if isinstance(value, dict):
            params.update({f"{key}.{k}": str(v) for k, v in value.items()})
        else:
            params[key] = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return params


# MLflow retries a silent server for minutes; at start-up one try of 10 s says enough
_ANSWER_QUICKLY = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": _PROBE_TIMEOUT_S}


def _prepare_mlflow(plan: RunPlan, recorded: dict[str, Any]) -> dict[str, Any]:
    _require("mlflow")
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
    output = Path(plan.options.output_dir).resolve()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{output / 'mlruns.db'}"
    try:
        with environment(_ANSWER_QUICKLY):
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
            params = [Param(key, value) for key, value in recipe_params(plan).items()]
            client.log_batch(run.info.run_id, params=params)
    except Exception as e:  # noqa: BLE001 - requests, sqlalchemy and MLflow raise their own types
        raise OptionError(f"--tracker mlflow: the tracking store {uri} does not answer: {error_line(e)}") from None
    return {"tracking_uri": uri, "experiment_id": experiment, "run_id": run.info.run_id}


def _run_exists(client: Any, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:  # noqa: BLE001 - MlflowException: RESOURCE_DOES_NOT_EXIST
        return False


def _prepare_wandb(plan: RunPlan, recorded: dict[str, Any]) -> dict[str, Any]:
    wandb = _require("wandb")
    if os.environ.get("WANDB_MODE") not in ("offline", "disabled", "dryrun"):
        try:
            wandb.login(verify=True, timeout=int(_PROBE_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - no key, a wrong key, no server
            raise OptionError(
                f"--tracker wandb: cannot log in to Weights & Biases: {error_line(e)} (WANDB_MODE=offline logs locally)"
            ) from None
    return {"id": recorded.get("id") or wandb.util.generate_id(), "project": os.environ.get("WANDB_PROJECT", PROJECT)}


def _prepare_clearml(plan: RunPlan, recorded: dict[str, Any]) -> dict[str, Any]:
    _require("clearml")
    from clearml import Task

    if Task.running_locally() and not os.environ.get("CLEARML_OFFLINE_MODE"):
        try:
            from clearml.backend_api.session.client import APIClient

            APIClient().projects.get_all(page=0, page_size=1)
        except Exception as e:  # noqa: BLE001 - no configuration, no server
            raise OptionError(f"--tracker clearml: the ClearML server does not answer: {error_line(e)}") from None
    return {"project": PROJECT}


_PREPARE: dict[str, Callable[[RunPlan, dict[str, Any]], dict[str, Any]]] = {
    "mlflow": _prepare_mlflow,
    "wandb": _prepare_wandb,
    "clearml": _prepare_clearml,
}
