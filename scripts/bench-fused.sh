#!/bin/bash
# Issue 14, target 1: every variant of `attngraph new --list` on the fused attention path
# against mha-batched, round after round (each round runs every command once, so that a
# change of the machine's load hits both sides of a ratio). d_model 768, 12 heads,
# 2 threads (all cores), f32.
#   scripts/bench-fused.sh [rounds]      (default 3; the figures are in docs/performance.md)
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release/attngraph
run() {
    echo "\$ bench $*"
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$B" bench "$@" --d-model 768 --heads 12
}
for round in $(seq 1 "${1:-3}"); do
    echo "# round $round: $(uptime)"
    run --variant mha-batched --seq 4096 --reps 3
    run --variant causal --seq 4096 --reps 3
    run --variant mha-batched --seq 8192 --reps 2
    run --variant sliding-window --window 256 --causal --seq 8192 --reps 2
    run --variant mha-batched --seq 2048 --reps 3
    run --variant alibi --seq 2048 --reps 3
    run --variant cross --kv-seq 2048 --seq 2048 --reps 3
    run --variant gqa --groups 4 --seq 2048 --reps 3
    run --variant mqa --seq 2048 --reps 3
    run --variant decode --past 0 --seq 2048 --reps 3
    run --variant sliding-window --window 256 --seq 2048 --reps 3
    run --variant diff --seq 2048 --reps 3
    run --variant sinks --seq 2048 --reps 3
    run --variant softcap --seq 2048 --reps 3
    run --variant llama --groups 4 --seq 2048 --reps 3
    run --variant mha --seq 2048 --reps 3
    run --variant prefix-lm --prefix-length 256 --seq 2048 --reps 3
    run --variant document --documents 512,1024,512 --seq 2048 --reps 3
    # FlexAttention's examples: Q, K and V are inputs (no projections)
    run --variant flex/causal --seq 2048 --reps 3
    run --variant flex/sliding-window --window 256 --seq 2048 --reps 3
    run --variant flex/prefix-lm --prefix-length 256 --seq 2048 --reps 3
    run --variant flex/document --documents 512,1024,512 --seq 2048 --reps 3
    run --variant flex/alibi --seq 2048 --reps 3
    run --variant flex/softcap --seq 2048 --reps 3
    run --variant flex/relative-position --seq 2048 --reps 3
done
