"""The suite's own set-up: what keeps the timing- and signal-sensitive tests apart under pytest-xdist."""

from __future__ import annotations

import os

import pytest


@pytest.mark.serial
def test_a_serial_test_is_in_the_serial_xdist_group(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a test's group is the suffix of its id, and one worker runs each group; a
    pytest or pytest-xdist that no longer writes it (pytest 9.2 with xdist 3.8) would spread the serial
    tests over both workers without a word."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("one process (-n 0): no groups to keep")
    assert request.node.nodeid.endswith("@serial"), request.node.nodeid


def test_each_worker_keeps_its_share_of_the_cores_after_collection() -> None:
    """Every test module is imported by now (rembg's numba among them, which resets the OpenMP pool
    torch shares): the in-process tests of a worker still run on its share of the cores, or the two
    workers' OpenMP threads spin for each other's cores (twice the CPU time of the in-process tests)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("one process (-n 0): the process has every core")
    import torch

    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
