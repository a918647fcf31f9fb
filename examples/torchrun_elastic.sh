#!/bin/bash
# Fault-tolerant, elastic training with torchrun. When a worker dies (a crashed process, a lost GPU),
# torchrun stops the others and starts them all again, up to --max-restarts times; when a node is lost
# (its agent gone, even without a word: SIGKILL, power), the remaining agents notice it at their
# rendezvous and restart their workers as a smaller world. Every restart runs the same command, and
# --resume auto continues from the newest complete checkpoint:
# - on the same number of processes, with the weights of a run that never failed, bit for bit;
# - on fewer processes, with the same --global-batch (the batch per process and the accumulation are
#   derived again, at most --max-batch-per-device images per GPU): the same pairs and augmentations in
#   each global batch, not the same bits (train.log says "resumed on ... global batch N kept").
#
# One node:
#   bash examples/torchrun_elastic.sh
# Two nodes that may shrink to one (run on each, HOST0 = the first node's address):
#   RDZV_HOST=HOST0 bash examples/torchrun_elastic.sh
#
# --rdzv-conf: the lost node's keep-alive is missed after 1 s x 3 and a new round closes 1 s after its
# last join; with torchrun's defaults (5 s x 3, 30 s) the survivors wait longer before training again.
# A frozen node (SIGSTOP, a hung filesystem) keeps its sockets open: it is caught after --dist-timeout.
# Measured times: docs/distributed.md, "torchrun's elastic node counts".

set -euo pipefail
# Each attempt gets its own rendezvous store. By default torchrun's agent shares the first round's
# TCPStore with every later round, and the restarted workers' process group reads its peers'
# addresses from it without a per-attempt prefix, so a restarted rank can pick up a dead peer's
# address and fail to connect ("Gloo connectFullMesh failed ... Connection refused").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
NNODES="${NNODES:-1:2}"
NPROC="${NPROC:-8}"
RDZV_HOST="${RDZV_HOST:-localhost}"

# the run lock follows the job by its --rdzv-id, so restarted workers take it over
torchrun \
    --nnodes "${NNODES}" --nproc-per-node "${NPROC}" \
    --max-restarts 3 \
    --rdzv-backend c10d --rdzv-endpoint "${RDZV_HOST}:29400" --rdzv-id r3net-duts \
    --rdzv-conf last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3 \
    run.py \
    --data /data/DUTS-TR --val-data /data/ECSSD \
    --output-dir runs/r3net-duts \
    --workers 6 \
    --global-batch 96 --max-batch-per-device 12 \
    --resume auto
