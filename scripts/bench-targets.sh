#!/usr/bin/env bash
# Measures the performance targets (issues 5 and 14) with `attngraph bench`, every figure of a round
# taken back to back so that ratios compare like with like. OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset for these commands only.
# usage: scripts/bench-targets.sh [rounds] [attngraph binary]
set -euo pipefail
rounds=${1:-3}
bin=${2:-build/release/attngraph}
b() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin" bench "$@"; }
mha=(--seq 1024 --d-model 768 --heads 12 --threads 2)
for r in $(seq "$rounds"); do
  echo "# round $r: $(uptime)"
  b --gemm 2048 --threads 2
  b "${mha[@]}" --trace none
  b "${mha[@]}" --trace memory
  b "${mha[@]}" --trace none --plain
  b "${mha[@]}" --trace memory --plain
  b --seq 4096 --d-model 768 --heads 12 --threads 2 --reps 2 --trace none
  b --batch 8 --seq 512 --d-model 768 --heads 12 --threads 1
  b --batch 8 --seq 512 --d-model 768 --heads 12 --threads 2
  b --variant seed --threads 2 --reps 100000
  b --seq 128 --d-model 768 --heads 12 --threads 2 --reps 50
  # OpenBLAS 0.3.21 runs its Prescott kernels on a CPU model it does not know: the GEMM that
  # gives, and what the engine's kernel selection makes of it
  b --gemm 2048 --threads 2 --blas Prescott
  b --gemm 2048 --threads 2 --as-unknown-cpu
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$(dirname "$0")/../bench/torch_mha.py" --seq 1024 --threads 2
  fi
done
