"""Training as clusters run it: gradient accumulation (``--accumulate``), the global batch kept on any number
of processes (``--global-batch``, ``--max-batch-per-device``), a resume on another number of processes, and
torchrun's elastic node counts (``--nnodes 1:2``) surviving a node killed without a word."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import ignite.distributed as idist
import pytest
import record_batches
import torch
from accumulation import ddp_worker, images, part, train
from helpers import REPO, TINY_TRAIN, cpu_env, free_port, log_iterations, log_lines, make_tiny_dataset, read_scalars
from torch.utils.data import DataLoader

from ignite_r3net import cli
from ignite_r3net.batch_layout import BatchLayout, fit, possible_processes
from ignite_r3net.config import TrainConfig
from ignite_r3net.data.sampler import ResumableDistributedSampler
from ignite_r3net.data.step_stream import StepStream
from ignite_r3net.errors import OptionError
from ignite_r3net.training.recipe_config import batch_layout, config_from_file, config_from_options, layout_note
from ignite_r3net.training.resume import RunRecipe, check_resume_compatible

pytestmark = pytest.mark.timeout(240)

# --------------------------------------------------------------------------- the layout, in-process


def _layout(world: int, **given) -> BatchLayout:
    return batch_layout(config_from_options(given), world)


def test_only_the_global_batch_given_derives_batch_and_accumulation_in_one_line():
    assert _layout(2, global_batch=24) == BatchLayout(2, 12, 1)
    limited = config_from_options({"global_batch": 24, "max_batch_per_device": 4})
    assert batch_layout(limited, 2) == BatchLayout(2, 4, 3)
    said = layout_note(limited, batch_layout(limited, 2))
    assert said is not None and len(said.splitlines()) == 1
    assert "--global-batch 24: the global batch of 24 images split as 2 processes x 4 x 3 accumulated" in said
    assert "(--batch-size 4 --accumulate 3, at most --max-batch-per-device 4)" in said
    # nothing to say where one process takes the whole global batch at once
    whole = config_from_options({"global_batch": 4})
    assert layout_note(whole, batch_layout(whole, 1)) is None
    # the largest batch that divides the share, not the limit itself: 12 = 3 x 4
    assert _layout(2, global_batch=24, max_batch_per_device=5) == BatchLayout(2, 4, 3)
    assert _layout(1, global_batch=8, batch_size=2) == BatchLayout(1, 2, 4)
    assert _layout(2, global_batch=8, accumulate=2) == BatchLayout(2, 2, 2)
    # r3net-paper's 14 on 2 processes is 7 each, prime: no micro-batch of 2 to 4 images divides it
    with pytest.raises(OptionError):
        _layout(2, recipe="r3net-paper", max_batch_per_device=4)
    assert _layout(1, recipe="r3net-paper", max_batch_per_device=7) == BatchLayout(1, 7, 2)


def test_a_global_batch_no_layout_keeps_is_one_line_listing_the_process_counts_that_can():
    with pytest.raises(OptionError) as refused:
        _layout(5, global_batch=24, max_batch_per_device=4)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "24 images, which 5 processes cannot share equally" in message
    # 24 processes would get 1 image each: BatchNorm needs 2
    assert "(possible: 1, 2, 3, 4, 6, 8, 12 processes)" in message, message
    assert fit(24, 1, max_batch=4) == BatchLayout(1, 4, 6)
    assert possible_processes(14, max_batch=4) == [1, 7]  # 1 x 2 x 7 accumulated, 7 x 2


def test_train_config_keeps_the_saved_global_batch_and_derives_it_anew(tmp_path):
    saved = config_from_options({"global_batch": 8, "max_batch_per_device": 2})
    path = tmp_path / "config.json"
    path.write_text(saved.to_json())
    again = config_from_file(str(path), {})
    assert again.global_batch == 8
    assert batch_layout(again, 2) == BatchLayout(2, 2, 2)
    assert batch_layout(again, 1) == BatchLayout(1, 2, 4)  # on 1 process: the global batch, by accumulation


def _recipe_checkpoint(config: TrainConfig, world: int, iteration: int = 4, epoch_length: int = 3) -> dict:
    return {
        "recipe": RunRecipe.of(config, batch_layout(config, world), 12).state_dict(),
        "trainer": {"iteration": iteration, "epoch_length": epoch_length, "max_iters": 8},
    }


def test_another_world_size_with_the_global_batch_kept_is_accepted_with_one_line():
    two = TrainConfig(iters=8, batch_size=3, global_batch=12, nproc=4, resume="c.pt")
    checkpoint = _recipe_checkpoint(two, 4, epoch_length=1)
    on_two = TrainConfig(iters=8, batch_size=6, global_batch=12, nproc=2, resume="c.pt")
    note = check_resume_compatible(on_two, batch_layout(on_two, 2), checkpoint, 12)
    assert (
        note == "resumed on 2 processes x 6 (was 4 x 3): global batch 12 kept; not bitwise (BatchNorm batches differ)"
    )
    given = frozenset({"batch_size", "accumulate"})
    accumulated = TrainConfig(iters=8, batch_size=2, accumulate=2, global_batch=8, nproc=2, resume="c.pt", given=given)
    on_one = TrainConfig(iters=8, batch_size=4, accumulate=2, global_batch=8, resume="c.pt", given=given)
    checkpoint_of_two = _recipe_checkpoint(accumulated, 2, epoch_length=1)
    note = check_resume_compatible(on_one, batch_layout(on_one, 1), checkpoint_of_two, 12)
    assert note and note.startswith(
        "resumed on 1 process x 4 x 2 accumulated (was 2 x 2 x 2 accumulated): global batch 8 kept"
    )
    # the same layout: an exact resume, nothing to say
    assert check_resume_compatible(two, batch_layout(two, 4), checkpoint, 12) is None


def test_where_the_padding_changes_the_epoch_the_note_says_so_and_the_next_epoch_starts():
    """7 pairs: 2 processes x 2 pad them to 8 (2 steps an epoch), 1 process x 4 has 1 full step: a checkpoint
    after step 1 of an epoch continues with the next epoch, and the line says the epochs differ."""
    two = TrainConfig(iters=8, batch_size=2, global_batch=4, nproc=2, resume="c.pt")
    checkpoint = {
        "recipe": RunRecipe.of(two, batch_layout(two, 2), 7).state_dict(),
        "trainer": {"iteration": 3, "epoch_length": 2, "max_iters": 8},
    }
    one = TrainConfig(iters=8, batch_size=4, global_batch=4, resume="c.pt")
    note = check_resume_compatible(one, batch_layout(one, 1), checkpoint, 7)
    assert note and note.endswith(
        "; epochs of 1 iterations (was 2): the padding of the shuffled pairs differs, so the global batches "
        "differ from the next epoch on"
    )
    sampler = ResumableDistributedSampler(7, num_replicas=1, seed=1, batch_size=4)
    loader = DataLoader(list(range(7)), batch_size=4, sampler=[k for k, _ in sampler.keys(0)], drop_last=True)
    stream = StepStream(loader, sampler, accumulate=1, global_batch=4)
    stream.load_state_dict({"epoch": 1, "step": 1, "position": 4, "global_batch": 4})
    assert (stream.epoch, stream.step) == (2, 0)


def test_a_changed_global_batch_is_refused_in_one_line():
    two = TrainConfig(iters=8, batch_size=2, global_batch=4, nproc=2, resume="c.pt")
    larger = TrainConfig(iters=8, batch_size=8, global_batch=8, resume="c.pt")
    with pytest.raises(OptionError) as refused:
        check_resume_compatible(larger, batch_layout(larger, 1), _recipe_checkpoint(two, 2), 12)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "global batch (processes x --batch-size x --accumulate) 8 (checkpoint: 4)" in message
    assert "world size (--nproc x --nnodes) 1 (checkpoint: 2)" in message


# ------------------------------------------------------------------ accumulation equals one larger batch


@pytest.mark.parametrize("scaler", [False, True], ids=["no-scaler", "grad-scaler"])
def test_accumulating_two_batches_of_2_equals_one_batch_of_4(scaler):
    """Without BatchNorm the summed, scaled gradients of 2 x 2 images are those of 4 images at once, through
    AMP's gradient scaler too (its unscaling, inf checks and step see the summed gradients)."""
    steps = [images(4, seed) for seed in range(3)]
    large = train([[b] for b in steps], scaler)
    accumulated = train([[part(b, [0, 1]), part(b, [2, 3])] for b in steps], scaler)
    changed = max((large[k] - train([], scaler)[k]).abs().max().item() for k in large)
    assert changed > 1e-3  # the steps moved the weights
    for name, value in large.items():
        torch.testing.assert_close(accumulated[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_processes_x_2_x_accumulate_2_equal_one_process_x_4_x_accumulate_2(tmp_path):
    """The same weights as one process, with DDP's all-reduce skipped for all but the last micro-batch."""
    out = tmp_path / "two.pt"
    with idist.Parallel(backend="gloo", nproc_per_node=2, master_port=free_port()) as parallel:
        parallel.run(ddp_worker, str(out))
    saved = torch.load(out, weights_only=True)
    # the model's gradients fit one bucket: one all-reduce per optimiser step, none for the first micro-batch
    assert saved["allreduces"] == [0, 0]
    two = saved["weights"]
    steps = [images(8, seed) for seed in range(2)]
    one = train([[part(b, list(range(0, 4))), part(b, list(range(4, 8)))] for b in steps])
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------- through the command, one process


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    train, _ = make_tiny_dataset(tmp_path_factory.mktemp("clusters") / "data", n=12, n_val=1)
    return train


def _train_args(data: Path, out: Path, *extra: str) -> list[str]:
    """``train`` on ``data`` into ``out``, small and fast; ``TINY_TRAIN``'s --batch-size unless --global-batch."""
    where = ["--data", str(data), "--output-dir", str(out)]
    tiny = list(TINY_TRAIN)
    if "--global-batch" in extra:
        del tiny[tiny.index("--batch-size") : tiny.index("--batch-size") + 2]
    return ["train", *where, "--no-val-at-start", "--no-progress", *tiny, *extra]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.mark.slow
def test_accumulation_counts_optimiser_steps_and_resumes_bitwise(data, tmp_path):
    """``--accumulate 2``: the log, the poly LR, TensorBoard and the checkpoints count optimiser steps; a run
    resumed from its mid-epoch checkpoint (3 steps per epoch: iteration 2) ends with the same bits."""
    first = tmp_path / "first"
    args = ["--accumulate", "2", "--iters", "4", "--checkpoint-every", "2"]
    assert cli.main(_train_args(data, first, *args)) == 0
    lines = log_iterations(first / "train.log")
    assert sorted(lines) == [1, 2, 3, 4]
    for iteration, line in lines.items():
        lr = 1e-3 * (1 - (iteration - 1) / 4) ** 0.9
        assert f"[lr {lr:.13f}]" in line
    assert sorted(p.name for p in first.glob("checkpoint_*.pt")) == ["checkpoint_2.pt", "checkpoint_4.pt"]
    end = torch.load(first / "checkpoint_4.pt", weights_only=True)
    assert end["trainer"]["iteration"] == 4 and end["trainer"]["epoch_length"] == 3  # 12 pairs / (2 x 2)
    assert end["sampler"] == {"epoch": 1, "step": 1, "position": 4, "global_batch": 4}
    assert sorted(read_scalars(first / "tb")["train/total"]) == [1, 2, 3, 4]
    header = "\n".join(log_lines(first / "train.log"))
    assert "world size 1, 2 images per process x 2 accumulated micro-batches, global batch 4" in header
    saved = json.loads((first / "config.json").read_text())["resolved"]
    assert (saved["global_batch"], saved["accumulate"], saved["batch_size"]) == (4, 2, 2)

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(first / "checkpoint_2.pt", resumed)
    assert cli.main(_train_args(data, resumed, *args, "--resume", "auto")) == 0
    expected, got = _weights(first / "checkpoint_4.pt"), _weights(resumed / "checkpoint_4.pt")
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name


# --------------------------------------------------------------------------- another number of processes


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The Euclidean distance between two models' learned weights (BatchNorm's running statistics left out)."""
    return math.sqrt(
        sum(((a[k] - b[k]) ** 2).sum().item() for k in a if "running_" not in k and "num_batches" not in k)
    )


def _recorded(folder: Path) -> dict[int, list[list[int]]]:
    """Each iteration's (pair index, sample seed) over all ranks, as a sorted list: the global batch."""
    batches: dict[int, list[list[int]]] = {}
    for path in folder.glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            batches.setdefault(entry["iteration"], []).extend(entry["keys"])
    return {it: sorted(keys) for it, keys in batches.items()}


def _record(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "record_batches.py"), *args],
        cwd=REPO,
        env=cpu_env(RECORD_DIR=str(folder)),
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_two_processes_to_4_then_one_process_to_8_trains_the_same_global_batches(data, tmp_path, capsys, monkeypatch):
    """2 x 2 to iteration 4, then 1 x 4 to 8 (``--global-batch 4`` both times): every global batch holds the
    pairs and augmentation seeds of the uninterrupted 2 x 2 run. The weights are close, not equal: BatchNorm
    normalises 4 images at once instead of 2 and 2, and the sums run in another order."""
    reference, records = tmp_path / "reference", tmp_path / "records"
    common = ["--global-batch", "4", "--iters", "8", "--checkpoint-every", "4", "--max-batch-per-device", "4"]
    port = ["--master-port", str(free_port())]
    _record(_train_args(data, reference, "--nproc", "2", *common, *port), records / "reference")
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(reference / "checkpoint_4.pt", resumed)
    # one process: trained in this one, recording as record_batches.py records
    (records / "resumed").mkdir()
    with monkeypatch.context() as patched:
        for target, name, replacement in record_batches.PATCHES:
            patched.setattr(target, name, replacement)
        patched.setenv("RECORD_DIR", str(records / "resumed"))
        capsys.readouterr()
        assert cli.main(_train_args(data, resumed, *common, "--resume", "auto")) == 0
    printed = capsys.readouterr()
    said = "resumed on 1 process x 4 (was 2 x 2): global batch 4 kept; not bitwise (BatchNorm batches differ)"
    assert said in printed.out + printed.err
    assert any(said in line for line in log_lines(resumed / "train.log"))

    expected, got = _recorded(records / "reference"), _recorded(records / "resumed")
    assert sorted(got) == [5, 6, 7, 8]
    for iteration in got:
        assert len(got[iteration]) == 4 and got[iteration] == expected[iteration], iteration
    # the checkpoint's weights moved by the 4 steps after it, and both runs moved them about alike
    start, a, b = (
        _weights(f) for f in (reference / "checkpoint_4.pt", reference / "checkpoint_8.pt", resumed / "checkpoint_8.pt")
    )
    moved, apart = _distance(a, start), _distance(a, b)
    with capsys.disabled():
        print(f"\nweights moved {moved:.4g} in 4 steps; the two runs end {apart:.4g} apart")
    assert apart < TOLERANCE * moved

    capsys.readouterr()
    assert cli.main(_train_args(data, resumed, "--global-batch", "8", "--iters", "8", "--resume", "auto")) == 2
    refusal = capsys.readouterr().err.strip()
    assert len(refusal.splitlines()) == 1
    assert "global batch (processes x --batch-size x --accumulate) 8 (checkpoint: 4)" in refusal


# how far apart the two layouts' final weights may be, as a share of how far the last 4 steps moved them: with
# the same pairs, augmentations and schedule only BatchNorm's batches (4 images, not 2 and 2) and the order of
# the sums differ; measured 0.16 (18.5 of 113.6, resnet18 at crop 32), bounded at twice that
TOLERANCE = 0.3


# ---------------------------------------------------------------------------------- torchrun, elastic

# torchrun's rendezvous settings under which a survivor trains again soonest: the lost node's keep-alive is
# missed after 1 s x 3, and a new round closes 1 s after its last join (torchrun's defaults: 5 s x 3, 30 s)
FAST_RDZV = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


def test_torchrun_restarts_keep_the_run_lock_by_their_rendezvous_id(monkeypatch):
    """An elastic restart meets at another address and port: the lock stays the job's by its --rdzv-id."""
    from ignite_r3net.run_lock import job_id

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r3net-duts")
    monkeypatch.setenv("MASTER_PORT", "29500")
    first = job_id()
    monkeypatch.setenv("MASTER_PORT", "41234")
    assert job_id() == first == "torchrun:r3net-duts"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # no --rdzv-id: the address tells jobs apart
    assert job_id().endswith(":41234")


@pytest.mark.parametrize("rank", ["0", "1"])
def test_under_torchrun_only_rank_0_says_how_the_global_batch_is_shared(data, tmp_path, monkeypatch, capsys, rank):
    """Every torchrun process plans the run: the layout line is said once per job, by rank 0."""
    from ignite_r3net.training.start import planned_run

    torchrun = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    for name, value in {**torchrun, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "layout-line")
    config = cli.train_config(cli.build_parser().parse_args(_train_args(data, tmp_path / "out", "--global-batch", "4")))
    with planned_run(config) as plan:
        assert (plan.layout.batch, plan.layout.accumulate) == (2, 1)
    said = capsys.readouterr().err.count("--global-batch 4: the global batch of 4 images split as 2 processes x 2")
    assert said == (1 if rank == "0" else 0)


def _agent(port: int, run_id: str, rdzv_conf: str | None, log: Path, args: list[str], host: bool) -> subprocess.Popen:
    """One torchrun agent of ``--nnodes 1:2`` (1 worker), in a process group of its own; ``host``: whether it hosts the
    c10d store (``is_host``: else it connects to it, waiting until it is up, whichever agent starts first)."""
    conf = ["--rdzv-conf", ",".join([*([rdzv_conf] if rdzv_conf else []), f"is_host={str(host).lower()}"])]
    torchrun = ["-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "3"]
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id, *conf]
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, *torchrun, *rdzv, str(REPO / "run.py"), *args],
            cwd=REPO,
            env=cpu_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def elastic_run(data: Path, folder: Path, rdzv_conf: str | None, iters: int = 24, timeout: float = 300) -> dict:
    """Two agents train ``--global-batch 4`` (2 x 2); once checkpoint 2 exists, the second agent (not the
    rendezvous store's host) and its worker are SIGKILLed. Returns the seconds from the kill to the survivor's
    first iteration trained again and to its end, and what it wrote."""
    out = folder / "run"
    args = _train_args(data, out, "--global-batch", "4", "--max-batch-per-device", "2", "--iters", str(iters))
    args += ["--checkpoint-every", "2", "--resume", "auto", "--dist-timeout", "120"]
    port = free_port()
    # started together, so that both join the first rendezvous round (an agent that came after its last call, as
    # one started a second later could, made the survivor restart its worker at once): is_host says which hosts
    survivor = _agent(port, "elastic-test", rdzv_conf, folder / "survivor.log", args, host=True)
    lost = _agent(port, "elastic-test", rdzv_conf, folder / "lost.log", args, host=False)
    try:
        deadline = time.monotonic() + timeout
        while not (out / "checkpoint_2.pt").exists():
            assert time.monotonic() < deadline and survivor.poll() is None, (folder / "survivor.log").read_text()
            time.sleep(0.05)
        _kill_node(lost.pid)
        killed = time.monotonic()
        killed_after = max(log_iterations(out / "train.log"), default=0)
        lost.wait()
        trained_again = None
        while survivor.poll() is None:
            assert time.monotonic() < deadline, (folder / "survivor.log").read_text()[-3000:]
            if trained_again is None and _trained_after_resume(out / "train.log"):
                trained_again = time.monotonic() - killed
            time.sleep(0.05)
        ended = time.monotonic() - killed
    finally:
        for agent in (survivor, lost):
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    return {
        "returncode": survivor.returncode,
        "killed_after": killed_after,
        "trained_again_s": trained_again,
        "ended_s": ended,
        "out": out,
        "log": (folder / "survivor.log").read_text(),
    }


def _kill_node(agent: int) -> None:
    """SIGKILL an agent and its workers, as a node that vanishes: torchrun starts each worker in a session of
    its own, so the agent's process group is not enough."""
    groups = {agent} | {os.getpgid(pid) for pid in _descendants(agent)}
    for group in groups:
        os.killpg(group, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _trained_after_resume(log: Path) -> bool:
    """train.log shows an iteration trained after the line of a resume on another layout."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    resumed = [i for i, line in enumerate(lines) if "global batch 4 kept" in line]
    return bool(resumed) and any("[iter " in line for line in lines[resumed[-1] :])


# the test's run: the kill comes once checkpoint 2 exists, within 0.05 s, and 6 iterations of 2 processes stay
# (3 an epoch: the survivor resumes mid-epoch and crosses into the next); tests/stress/elastic_survivor.py runs 24
ELASTIC_ITERS = 8


@pytest.mark.slow
@pytest.mark.serial  # torchrun's keep-alive and last-call deadlines are seconds: not beside another serial test
@pytest.mark.timeout(360)
def test_torchrun_elastic_survives_a_node_killed_without_a_word(data, tmp_path):
    """``torchrun --nnodes 1:2 --max-restarts 3 ... --resume auto --global-batch 4``: one node (agent and worker)
    SIGKILLed after checkpoint 2; torchrun restarts the other node's worker as a world of 1, which resumes the
    newest checkpoint as 1 x 2 x 2 accumulated and ends at --iters."""
    run = elastic_run(data, tmp_path, FAST_RDZV, iters=ELASTIC_ITERS)
    print(
        f"survivor trained again {run['trained_again_s']:.1f} s after the kill and ended after {run['ended_s']:.1f} s"
    )
    assert run["returncode"] == 0, run["log"][-3000:]
    assert run["killed_after"] < ELASTIC_ITERS  # the node was lost mid-run
    final = torch.load(run["out"] / f"checkpoint_{ELASTIC_ITERS}.pt", weights_only=True)
    assert final["trainer"]["iteration"] == ELASTIC_ITERS
    assert final["recipe"]["world_size"] == 1 and final["recipe"]["accumulate"] == 2
    said = "resumed on 1 process x 2 x 2 accumulated (was 2 x 2): global batch 4 kept"
    assert any(said in line for line in log_lines(run["out"] / "train.log"))
    assert sorted(log_iterations(run["out"] / "train.log")) == list(range(1, ELASTIC_ITERS + 1))
    # rendezvous keep-alive and last call of a few seconds, then a resume: well before --dist-timeout (120 s)
    assert run["trained_again_s"] is not None and run["trained_again_s"] < 60
