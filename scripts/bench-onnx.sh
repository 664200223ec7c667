#!/usr/bin/env bash
# The ONNX figures (issues 12 and 13), every figure of a round taken back to back:
#   import   wall time and peak memory of `attngraph check` on a 104 MB model (11 stacked
#            torch.nn.MultiheadAttention layers, d_model 768, exported by torch.onnx.export)
#   mha      an imported nn.MultiheadAttention at n = 1024, d_model 768, 12 heads:
#            `bench --graph model.onnx` against `bench` of the same shape
#   attention one ONNX Attention node (opset 23, ONNX's test_attention_4d model) given
#            Q, K, V of (1, 12, 2048, 64): `bench --graph` against `bench --variant
#            mha-batched` at n = 2048 (which adds the projections)
# Medians over rounds of each run's median; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset
# for these commands only.
# usage: scripts/bench-onnx.sh [rounds] [attngraph binary]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}
bin=${2:-$root/build/release/attngraph}
python=/usr/bin/python3
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build --preset release --target attngraph_cli)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || "$root/scripts/install-deps.sh" python3-torch
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
clean() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
"$python" "$root/bench/peers/export_mha.py" --seq 16 --layers 11 "$work/big.onnx" >/dev/null 2>&1
"$python" "$root/bench/peers/export_mha.py" --seq 1024 "$work/mha_1024.onnx" >/dev/null 2>&1
"$python" - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(1)
for name in "QKV":
    np.save(f"{sys.argv[1]}/{name}.npy", rng.uniform(-1, 1, (1, 12, 2048, 64)).astype(np.float32))
PY
echo "model: $(du -m "$work/big.onnx" | cut -f1) MB"
timed() {  # wall seconds and peak RSS (MB) of a command, as JSON
  "$python" -c '
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t
print("{\"wall_s\": %.3f, \"peak_rss_mb\": %.0f}" % (wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
' "$@"
}
attention_4d="$root/tests/data/onnx/test_attention_4d/model.onnx"
for r in $(seq "$rounds"); do
  echo "# round $r: $(uptime)"
  echo "import $(timed env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin" check "$work/big.onnx")"
  echo "mha_onnx $(clean "$bin" bench --graph "$work/mha_1024.onnx" --threads 2)"
  echo "mha      $(clean "$bin" bench --seq 1024 --d-model 768 --heads 12 --threads 2)"
  echo "attention_node $(clean "$bin" bench --graph "$attention_4d" --input "Q=$work/Q.npy" --input "K=$work/K.npy" \
    --input "V=$work/V.npy" --threads 2 --reps 3)"
  echo "mha_batched    $(clean "$bin" bench --variant mha-batched --batch 1 --seq 2048 --d-model 768 --heads 12 \
    --threads 2 --reps 3)"
done
