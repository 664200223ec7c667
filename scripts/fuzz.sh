#!/usr/bin/env bash
# Builds the libFuzzer targets (preset asan: clang, ASan + UBSan) and fuzzes them, all three at
# once, for SECONDS (default 60),
# starting from the seed corpora: graphs/*.json and tests/data/malformed/ for graph files,
# fuzz/corpus/npy/ and tests/data/ .npy files for the .npy reader, tests/data/onnx/ and fuzz/corpus/onnx/
# (torch exports: einsums with ellipsis, diagonals, capitals; the ops written out at import, as
# tests/python/torch_export.py's WrittenOut) for the ONNX importer. A crash leaves its input in
# build/asan/findings/ and fails; turn it into a regression test (tests/data/regressions/).
# usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/install-deps.sh clang libclang-rt-14-dev
cmake --preset asan >/dev/null
cmake --build --preset asan --target fuzz_graph_file fuzz_npy fuzz_onnx
bin=build/asan/fuzz
findings=build/asan/findings
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$findings" "$work/graph" "$work/npy" "$work/onnx"
common=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/")
# The three loaders fuzz at once (SECONDS of wall time each, sharing the machine's cores), so
# that the step takes SECONDS, not three times that.
"$bin/fuzz_graph_file" "${common[@]}" -max_len=16384 -dict=fuzz/graph.dict \
  "$work/graph" graphs tests/data/malformed tests/data/regressions 2>"$work/graph.log" &
graph_pid=$!
"$bin/fuzz_npy" "${common[@]}" -max_len=4096 "$work/npy" fuzz/corpus/npy tests/data/regressions \
  2>"$work/npy.log" &
npy_pid=$!
"$bin/fuzz_onnx" "${common[@]}" -max_len=16384 "$work/onnx" tests/data/onnx fuzz/corpus/onnx tests/data/regressions \
  2>"$work/onnx.log" &
onnx_pid=$!
status=0
for target in graph npy onnx; do
  pid_var="${target}_pid"
  wait "${!pid_var}" || status=1
  echo "== fuzz_${target/graph/graph_file} ($seconds s)"
  tail -n 12 "$work/$target.log"
done
if ((status)); then
  echo "fuzzing found a crash: see $findings/ and the logs above" >&2
  exit 1
fi
echo "fuzzing found nothing new"
