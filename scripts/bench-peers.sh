#!/usr/bin/env bash
# Multi-head self-attention forward through attngraph, ONNX Runtime and PyTorch, the same
# shapes in one run, and each shape's times and ratios.
#
# usage: scripts/bench-peers.sh [--seqs "128 1024 4096"] [--d-model 768] [--heads 12]
#                               [--threads 2] [--reps R] [--rounds 3] [--build build/release]
#
# Batch 1, float32. attngraph runs `attngraph bench` (per-head graph, fused plan); ONNX
# Runtime (npm onnxruntime-node, graph optimisation `all`) and PyTorch (Debian's
# python3-torch) run torch.nn.MultiheadAttention, for ONNX Runtime exported by
# torch.onnx.export (opset 17, static shapes). Each of the three times R runs after a warm-up
# (R by default 50 at n <= 256, 20 at n <= 1024, 5 above: a few-millisecond run's median over
# 5 swings with the machine's phases). Each round runs the three one after another,
# shape by shape; a figure is the median over rounds of each run's median. OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset for every command, as users run them.
# onnxruntime-node comes from tests/node/node_modules (where scripts/install-deps.sh puts it
# for the ONNX tests) or bench/peers/node_modules; when neither has it, it is installed into
# the latter (--ignore-scripts: its install script only fetches the CUDA provider; the CPU
# library ships in the package).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seqs="128 1024 4096" d_model=768 heads=12 threads=2 reps="" rounds=3 build="$root/build/release"
while (($#)); do
  case "$1" in
    --seqs) seqs="$2"; shift 2 ;;
    --d-model) d_model="$2"; shift 2 ;;
    --heads) heads="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    *) echo "error: bench-peers.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
attngraph="$build/attngraph"
[ -x "$attngraph" ] || { echo "error: $attngraph not built (cmake --build --preset release --target attngraph_cli)" >&2; exit 1; }
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || "$root/scripts/install-deps.sh" python3-torch
command -v node >/dev/null || "$root/scripts/install-deps.sh" nodejs npm
node_path=""
for d in "$root/tests/node/node_modules" "$root/bench/peers/node_modules"; do
  [ -d "$d/onnxruntime-node" ] && node_path="$d" && break
done
if [ -z "$node_path" ]; then
  echo "installing onnxruntime-node under bench/peers" >&2
  (cd "$root/bench/peers" && npm install --no-audit --no-fund --no-save --ignore-scripts onnxruntime-node >/dev/null)
  node_path="$root/bench/peers/node_modules"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for n in $seqs; do
  "$python" "$root/bench/peers/export_mha.py" --seq "$n" --d-model "$d_model" --heads "$heads" "$work/mha_$n.onnx" \
    >/dev/null 2>&1 || { echo "error: torch.onnx.export failed at n = $n" >&2; exit 1; }
done

median_ms() { "$python" -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["median_ms"])'; }
clean() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
for ((r = 1; r <= rounds; ++r)); do
  for n in $seqs; do
    if [ -n "$reps" ]; then r_n=$reps; elif ((n <= 256)); then r_n=50; elif ((n <= 1024)); then r_n=20; else r_n=5; fi
    a=$(clean "$attngraph" bench --seq "$n" --d-model "$d_model" --heads "$heads" --threads "$threads" --reps "$r_n" | median_ms)
    o=$(clean env NODE_PATH="$node_path" node "$root/bench/peers/ort_mha.js" "$work/mha_$n.onnx" "$n" "$d_model" "$threads" "$r_n" | median_ms)
    t=$(clean "$python" "$root/bench/torch_mha.py" --seq "$n" --d-model "$d_model" --heads "$heads" --threads "$threads" --reps "$r_n" | median_ms)
    echo "$n $a $o $t" >>"$work/rounds"
  done
done

"$python" - "$work/rounds" "$d_model" "$heads" "$threads" "$rounds" "$(clean "$attngraph" bench --gemm 64 --reps 1)" <<'PY'
import json, statistics, sys
path, d, heads, threads, rounds, gemm = sys.argv[1:7]
rows = {}
for line in open(path):
    n, *ms = line.split()
    rows.setdefault(int(n), []).append([float(x) for x in ms])
blas = json.loads(gemm)["blas"]
print(f"# MHA forward, batch 1, d_model {d}, {heads} heads, f32, {threads} threads; median over {rounds} rounds")
print(f"# attngraph BLAS kernel: {blas}")
print("| n | attngraph ms | ONNX Runtime ms | PyTorch ms | ORT / attngraph | PyTorch / attngraph |")
print("|---|---|---|---|---|---|")
for n in sorted(rows):
    a, o, t = (statistics.median(col) for col in zip(*rows[n]))
    print(f"| {n} | {a:.2f} | {o:.2f} | {t:.2f} | {o / a:.2f} | {t / a:.2f} |")
PY
