"""Worker processes on one host divide its cores: every worker entry (training, evaluate's worker,
compare's scoring and inference, predict) takes its torch threads from ``worker_thread_count``."""

from __future__ import annotations

import pytest
import torch

from ignite_r3net.distributed import process_setup


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):
    """A host with 8 cores and ``n`` worker processes on it."""

    def with_processes(n: int) -> None:
        monkeypatch.setattr(process_setup, "available_cpus", lambda: 8)
        monkeypatch.setattr(process_setup.idist, "get_nproc_per_node", lambda: n)

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return with_processes


@pytest.mark.parametrize(("processes", "expected"), [(1, 8), (2, 4), (3, 2), (8, 1), (16, 1)])
def test_cores_divided_among_the_processes_of_the_host(host, processes: int, expected: int) -> None:
    host(processes)
    assert process_setup.worker_thread_count(torch.device("cpu")) == expected
    assert process_setup.worker_thread_count(torch.device("cpu"), limit=1) == 1


def test_omp_num_threads_and_gpus_keep_their_count(host, monkeypatch: pytest.MonkeyPatch) -> None:
    host(2)
    current = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert process_setup.worker_thread_count(torch.device("cpu")) == current
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert process_setup.worker_thread_count(torch.device("cuda", 0)) == current


def test_worker_threads_restores_the_launching_process(host) -> None:
    host(8)
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # not the worker's count, so that a missing restore shows
    try:
        with process_setup.worker_threads(torch.device("cpu")) as threads:
            assert threads == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
