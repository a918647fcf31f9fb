"""Experiment loggers, rank 0's part: ignite's ``TensorboardLogger`` and the loggers of the runs ``trackers``
opened, attached alike; the trackers get the best checkpoint as an artifact at the end."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ignite.engine import Engine, Events
from ignite.handlers import LRScheduler

from ..checkpoint_io import BEST_PATTERN, saved_files
from ..distributed.ranks import rank_zero_only
from ..metrics.keys import METRIC_KEYS
from .events import ValidationEvents, log_iterations
from .optim import learning_rates
from .plan import RunPlan
from .step import LOSS_NAMES
from .trackers import recipe_params


class TrackerRun:
    """One tracker's ignite logger and how its run ends (the best checkpoint uploaded first)."""

    def __init__(self, name: str, logger: Any, output_dir: str) -> None:
        self.name, self.logger, self.output_dir = name, logger, output_dir

    def finish(self, _: Engine) -> None:
        best = saved_files(self.output_dir, BEST_PATTERN)  # by score, lowest first
        if best and self.name in _UPLOAD:
            _UPLOAD[self.name](self.logger, best[-1][1])
        self.close(failed=False)

    def close(self, failed: bool = True) -> None:
        if self.name == "mlflow":
            import mlflow

            mlflow.end_run("FAILED" if failed else "FINISHED")
        else:
            self.logger.close()


@rank_zero_only
def open_tensorboard(output_dir: str) -> Any:
    """TensorBoard's logger writing to ``OUTPUT_DIR/tb`` (None on other ranks)."""
    from ignite.handlers.tensorboard_logger import TensorboardLogger

    return TensorboardLogger(log_dir=str(Path(output_dir) / "tb"))


@rank_zero_only
def attach_loggers(
    trainer: Engine, evaluator: Engine | None, tb: Any, scheduler: LRScheduler, plan: RunPlan
) -> list[TrackerRun]:
    """Log to TensorBoard (``tb``) and every tracker: losses and images/s (tag ``train``) and each
    group's LR (``lr``) at the log lines, the metrics (``val``) at each validation. Returns the runs,
    to close on a failure (None on other ranks)."""
    output_dir = plan.options.output_dir
    runs = [TrackerRun("tensorboard", tb, output_dir)]
    runs += [TrackerRun(name, _OPEN[name](record, plan), output_dir) for name, record in (plan.tracking or {}).items()]
    when = log_iterations(plan.options)
    for run in runs:
        logger = run.logger
        logger.attach_output_handler(trainer, event_name=when, tag="train", metric_names=[*LOSS_NAMES, "images_per_s"])
        logger.attach_output_handler(
            trainer,
            event_name=when,
            tag="lr",
            output_transform=lambda _: learning_rates(scheduler, trainer.state.iteration),
        )
        if evaluator is not None:
            logger.attach_output_handler(
                evaluator,
                event_name=ValidationEvents.SCORED,
                tag="val",
                metric_names=list(METRIC_KEYS),
                global_step_transform=lambda *_: trainer.state.iteration,
            )
        trainer.add_event_handler(Events.COMPLETED, run.finish)
    return runs


def _open_mlflow(record: dict[str, Any], plan: RunPlan) -> Any:
    import mlflow
    from ignite.handlers.mlflow_logger import MLflowLogger

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(record["tracking_uri"])
    mlflow.config.enable_async_logging(True)  # a log line must not wait for the server
    mlflow.start_run(run_id=record["run_id"])
    return MLflowLogger()


def _open_wandb(record: dict[str, Any], plan: RunPlan) -> Any:
    from ignite.handlers.wandb_logger import WandBLogger

    output_dir = plan.options.output_dir
    return WandBLogger(
        project=record["project"],
        id=record["id"],
        resume="allow",
        name=Path(output_dir).resolve().name,
        dir=output_dir,
        config=recipe_params(plan),
    )


def _open_clearml(record: dict[str, Any], plan: RunPlan) -> Any:
    from ignite.handlers.clearml_logger import ClearMLLogger

    logger = ClearMLLogger(project_name=record["project"], task_name=Path(plan.options.output_dir).resolve().name)
    logger.get_task().connect(recipe_params(plan), name="recipe")
    return logger


_OPEN: dict[str, Callable[[dict[str, Any], RunPlan], Any]] = {
    "mlflow": _open_mlflow,
    "wandb": _open_wandb,
    "clearml": _open_clearml,
}

_UPLOAD: dict[str, Callable[[Any, Path], None]] = {
    "mlflow": lambda logger, path: logger.log_artifact(str(path), artifact_path="checkpoints"),
    "wandb": lambda logger, path: logger.save(str(path), base_path=str(path.parent), policy="now"),
    "clearml": lambda logger, path: logger.get_task().upload_artifact(path.name, artifact_object=str(path)),
}
