"""torchrun entry for the elastic-restart test: ``python run.py`` whose rank 1 SIGKILLs itself once,
as soon as the run's first checkpoint exists (``FAULT_OUTPUT``); ``FAULT_MARKER`` records that it
happened, so the workers torchrun restarts run normally."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ignite_r3net.cli import main  # noqa: E402


def die_after_first_checkpoint(out: Path, marker: Path) -> None:
    while not list(out.glob("checkpoint_*.pt")):
        time.sleep(0.05)
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    marker = Path(os.environ["FAULT_MARKER"])
    if os.environ.get("RANK") == "1" and not marker.exists():
        threading.Thread(
            target=die_after_first_checkpoint, args=(Path(os.environ["FAULT_OUTPUT"]), marker), daemon=True
        ).start()
    sys.exit(main())
