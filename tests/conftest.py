"""Test-wide settings: no test may reach the network for weights (the CI machine has none)."""

from __future__ import annotations

import os
from pathlib import Path

# weights come from local files or --pretrained none; a test that forgets fails at once instead of
# waiting on a download (child processes inherit these)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TORCH_HOME", str(Path(__file__).resolve().parent / ".no-torch-cache"))
