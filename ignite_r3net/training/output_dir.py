"""The output folder of a run: claimed (created, writable, locked) for the job, with room for its
checkpoints, and free of another run's checkpoints unless it is resumed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..checkpoint_io import list_checkpoints, remove_stale_temporaries
from ..config import TrainConfig
from ..distributed.topology import LaunchSpec
from ..errors import OptionError, UserError
from ..output_paths import check_writable_folder
from ..run_lock import LOCK_NAME, RunLock


@contextmanager
def claimed_output_dir(config: TrainConfig) -> Iterator[None]:
    """The output folder, created and proven writable, held by this run's job (its leading process
    holds the run lock) while the block runs. A run refused inside the block leaves no empty
    folder behind; another run's lock is one ``OptionError`` naming its holder."""
    out = Path(config.output_dir)
    created = not out.exists()
    check_writable_folder(out, "--output-dir")  # the words every command uses for a wrong path
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a private probe: under torchrun every local process runs this at the same time
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OptionError(f"--output-dir {out} is not writable: {e.strerror or e}") from None
    lock = RunLock(out) if LaunchSpec.of(config).is_leader() else None
    try:
        if lock is not None:
            lock.acquire()
            remove_stale_temporaries(out)  # only now: a running job could be writing them
        yield
    except UserError:
        if lock is not None:
            lock.release()
            lock = None
        if created:
            _remove_if_unused(out)
        raise
    finally:
        if lock is not None:
            lock.release()


def check_disk_space(config: TrainConfig, num_parameters: int) -> None:
    """Refuse to start when the checkpoints kept (weights + momentum, fp32) cannot fit."""
    per_checkpoint = num_parameters * 4 * 2 + (1 << 20)
    needed = per_checkpoint * (config.keep + 2)  # kept + best + the one being written
    free = shutil.disk_usage(config.output_dir).free
    if free < needed:
        raise OptionError(
            f"--output-dir {config.output_dir} has {free / 2**20:.0f} MiB free; "
            f"{config.keep} checkpoints need about {needed / 2**20:.0f} MiB"
        )


def check_fresh_output_dir(config: TrainConfig) -> None:
    """A fresh run must not mix its checkpoints (periodic or best) with an earlier run's."""
    if config.resume:
        return
    if list_checkpoints(config.output_dir) or any(Path(config.output_dir).glob("best_model_*.pt")):
        raise OptionError(
            f"--output-dir {config.output_dir} already holds checkpoints of a run: continue it "
            "with --resume auto, or choose another --output-dir"
        )


def _remove_if_unused(out: Path) -> None:
    """A run refused at start-up leaves no empty output directory behind."""
    try:
        for leftover in (".synthetic.lock", LOCK_NAME):
            (out / leftover).unlink(missing_ok=True)
        out.rmdir()  # only if empty: e.g. a generated synthetic set stays for the next attempt
    except OSError:
        pass
