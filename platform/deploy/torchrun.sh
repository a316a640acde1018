#!/usr/bin/env bash
# Multi-process / multi-node training of a partition's HIR encoder with torchrun (DDP: nccl on GPU,
# gloo on CPU), from the same HIR_* settings as the `hir_encoder` asset.
# Run the same command on every node, with the project's environment active; node 0's address is
# the rendezvous point:
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 NPROC=8 platform/deploy/torchrun.sh 2026-01-26
# One machine, two CPU processes:
#   NPROC=2 platform/deploy/torchrun.sh 2026-01-26
# The snapshot and world knowledge come from the data home (shared storage on every node); rank 0
# checkpoints into <data home>/artifacts/hir_encoder/.work-<partition>/, the folder the asset
# resumes from, so materialising that partition afterwards publishes the finished model instead of
# training again.
set -euo pipefail
partition=${1:?usage: torchrun.sh PARTITION [--threads N] [--rank-weights]}
shift
: "${HIR_DATA_HOME:?set HIR_DATA_HOME to the (shared) data home}"
exec torchrun \
  --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --nproc_per_node="${NPROC:-${GPUS:-1}}" \
  --rdzv_backend=c10d --rdzv_endpoint="${MASTER_ADDR:-127.0.0.1}:${MASTER_PORT:-29500}" \
  -m hir.training.ddp "$partition" "$@"
