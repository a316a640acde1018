#!/usr/bin/env bash
# Multi-node training of the HIR encoder with torchrun (DDP: nccl on GPU, gloo on CPU).
# Run the same command on every node; node 0's address is the rendezvous point.
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 GPUS=8 platform/deploy/torchrun.sh 2026-01-26
# The snapshot and world knowledge come from the data home (shared storage on every node);
# rank 0 checkpoints into the folder the `hir_encoder` asset resumes from, so materialising that
# partition afterwards publishes the finished model instead of training again (same settings).
set -euo pipefail
partition=${1:?usage: torchrun.sh PARTITION [trainer flags]}
shift
home=${HIR_DATA_HOME:?set HIR_DATA_HOME to the shared data home}
exec torchrun \
  --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --nproc_per_node="${GPUS:-1}" \
  --rdzv_backend=c10d --rdzv_endpoint="${MASTER_ADDR:-127.0.0.1}:${MASTER_PORT:-29500}" \
  -m hir.models.train_ddp \
  --snapshot "$home/artifacts/graph_snapshot/$partition" \
  --world-knowledge "$home/artifacts/world_knowledge/_all/world_knowledge.parquet" \
  --out "$home/artifacts/hir_encoder/.work-$partition" "$@"
