#!/bin/bash
# Fault-tolerant training with torchrun: when a worker dies (a crashed process, a lost GPU),
# torchrun stops the others and starts them all again, up to --max-restarts times; every restart
# runs the same command, and --resume auto makes it continue from the newest complete checkpoint,
# so the run ends at the same iteration with the same weights as one that never failed.
#
# One node:
#   bash examples/torchrun_elastic.sh
# Two nodes (run on each, HOST0 = the first node's address):
#   NNODES=2 RDZV_HOST=HOST0 bash examples/torchrun_elastic.sh
#
# The world size must stay the same across restarts (an exact resume refuses another one), so the
# number of nodes is fixed (NNODES), not a range.

set -euo pipefail
# Each attempt gets its own rendezvous store. By default torchrun's agent shares the first round's
# TCPStore with every later round, and the restarted workers' process group reads its peers'
# addresses from it without a per-attempt prefix, so a restarted rank can pick up a dead peer's
# address and fail to connect ("Gloo connectFullMesh failed ... Connection refused").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
NNODES="${NNODES:-1}"
NPROC="${NPROC:-8}"
RDZV_HOST="${RDZV_HOST:-localhost}"

torchrun \
    --nnodes "${NNODES}" --nproc-per-node "${NPROC}" \
    --max-restarts 3 \
    --rdzv-backend c10d --rdzv-endpoint "${RDZV_HOST}:29400" --rdzv-id r3net-duts \
    run.py \
    --data /data/DUTS-TR --val-data /data/ECSSD \
    --output-dir runs/r3net-duts \
    --workers 6 \
    --resume auto
