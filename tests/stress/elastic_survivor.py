"""How long a torchrun ``--nnodes 1:2`` survivor needs after the other node is SIGKILLed, with the fast
``--rdzv-conf`` of ``examples/torchrun_elastic.sh`` and with torchrun's defaults (the test measures the
first only): ``python tests/stress/elastic_survivor.py [REPEATS]``. Prints seconds from the kill to the
survivor's first iteration trained again and to its end (24 iterations, the kill after checkpoint 2)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import make_tiny_dataset  # noqa: E402
from test_clusters import FAST_RDZV, elastic_run  # noqa: E402


def main(repeats: int = 1) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = make_tiny_dataset(Path(tmp) / "data", n=12, n_val=1)
        for name, conf in (("fast --rdzv-conf", FAST_RDZV), ("torchrun defaults", None)):
            for attempt in range(repeats):
                folder = Path(tmp) / f"{name.split()[0]}-{attempt}"
                folder.mkdir()
                run = elastic_run(train, folder, conf)
                print(
                    f"{name}: exit {run['returncode']}, killed after iteration {run['killed_after']}, trained again "
                    f"{run['trained_again_s']:.1f} s after the kill, ended {run['ended_s']:.1f} s after it",
                    flush=True,
                )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
