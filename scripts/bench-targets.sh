#!/usr/bin/env bash
# Issue 14's targets, measured with `attngraph bench` round after round: every command of a
# round runs back to back, so a change of the machine's load hits both sides of a ratio.
# Each round prints its commands' JSON lines; the end prints each target's ratio per round
# and the median over rounds. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for these
# commands only, as users run them. Target 1's other variants: scripts/bench-fused.sh;
# target 7: scripts/bench-peers.sh.
# usage: scripts/bench-targets.sh [rounds] [attngraph binary]   (default 3, build/release/attngraph)
set -euo pipefail
rounds=${1:-3}
bin=${2:-build/release/attngraph}
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build --preset release --target attngraph_cli)" >&2; exit 1; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# b LABEL ARGS...: one bench command, its line printed and kept under LABEL for the summary
b() {
  local label=$1 line
  shift
  echo "\$ bench $*"
  line=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin" bench "$@")
  echo "$line"
  printf '%s\t%s\n' "$label" "$line" >>"$log"
}
mha=(--d-model 768 --heads 12 --threads 2)
for r in $(seq "$rounds"); do
  echo "# round $r: $(uptime)"
  printf 'round\t%s\n' "$r" >>"$log"
  # 2: n = 128 against the GEMM at 2048; 6: the kernel a CPU OpenBLAS does not know gets
  b gemm --gemm 2048 --threads 2 --reps 5
  b small --seq 128 "${mha[@]}" --reps 50
  b prescott --gemm 2048 --threads 2 --reps 3 --blas Prescott
  b unknown --gemm 2048 --threads 2 --reps 3 --as-unknown-cpu
  # 3: the seed graph on one thread
  b seed --variant seed --threads 1 --reps 20000
  # 5: forward + backward against the forward at n = 1024; peak RSS at n = 4096
  b fwd1024 --seq 1024 "${mha[@]}" --reps 5
  b bwd1024 --seq 1024 "${mha[@]}" --reps 5 --backward
  b bwd4096 --seq 4096 "${mha[@]}" --reps 1 --backward
  # keep: traced runs at <= 1.3x untraced
  b traced1024 --seq 1024 "${mha[@]}" --reps 5 --trace memory
  b batched1024 --variant mha-batched --seq 1024 "${mha[@]}" --reps 5
  b tracedb1024 --variant mha-batched --seq 1024 "${mha[@]}" --reps 5 --trace memory
  # 1: causal at half the cost, the causal window at a quarter
  b batched4096 --variant mha-batched --seq 4096 "${mha[@]}" --reps 3
  b causal4096 --variant causal --seq 4096 "${mha[@]}" --reps 3
  b batched8192 --variant mha-batched --seq 8192 "${mha[@]}" --reps 2
  b window8192 --variant sliding-window --window 256 --causal --seq 8192 "${mha[@]}" --reps 2
  # 4: n = 32768 against n = 4096, memory and time (one run after a warm-up each)
  b long4096 --variant mha-batched --seq 4096 "${mha[@]}" --reps 1
  b long32768 --variant mha-batched --seq 32768 "${mha[@]}" --reps 1
done
/usr/bin/python3 - "$log" <<'EOF'
import json, statistics, sys

rounds = []
for line in open(sys.argv[1]):
    label, text = line.rstrip("\n").split("\t", 1)
    if label == "round":
        rounds.append({})
    else:
        rounds[-1][label] = json.loads(text)

def ms(r, k): return r[k]["median_ms"]
def gf(r, k): return r[k]["gflops"]
def mb(r, k): return r[k]["peak_rss_mb"]

targets = [  # (target, what, value of a round, limit, "<=" or ">=")
    ("1", "causal n=4096 / mha-batched n=4096 (time)", lambda r: ms(r, "causal4096") / ms(r, "batched4096"), 0.7, "<="),
    ("1", "causal window 256 n=8192 / mha-batched n=8192 (time)", lambda r: ms(r, "window8192") / ms(r, "batched8192"), 0.25, "<="),
    ("2", "n=128 GFLOP/s / --gemm 2048 GFLOP/s", lambda r: gf(r, "small") / gf(r, "gemm"), 0.8, ">="),
    ("3", "seed graph, 1 thread (us)", lambda r: ms(r, "seed") * 1000, 1.5, "<="),
    ("4", "n=32768 / n=4096 peak RSS", lambda r: mb(r, "long32768") / mb(r, "long4096"), 8.5, "<="),
    ("4", "n=32768 / n=4096 time", lambda r: ms(r, "long32768") / ms(r, "long4096"), 68, "<="),
    ("5", "forward+backward / forward, n=1024 (time)", lambda r: ms(r, "bwd1024") / ms(r, "fwd1024"), 3, "<="),
    ("5", "forward+backward peak RSS, n=4096 (MB)", lambda r: mb(r, "bwd4096"), 1024, "<="),
    ("6", "--as-unknown-cpu GFLOP/s / OpenBLAS's pick", lambda r: gf(r, "unknown") / gf(r, "gemm"), 0.8, ">="),
    ("6", "Prescott alone / OpenBLAS's pick (no target)", lambda r: gf(r, "prescott") / gf(r, "gemm"), None, ""),
    ("keep", "traced / untraced, n=1024 (time)", lambda r: ms(r, "traced1024") / ms(r, "fwd1024"), 1.3, "<="),
    ("keep", "the same, mha-batched (time)", lambda r: ms(r, "tracedb1024") / ms(r, "batched1024"), 1.3, "<="),
]
print()
print("| target | what | per round | median | limit | met |")
print("|---|---|---|---|---|---|")
for target, what, f, limit, op in targets:
    values = [f(r) for r in rounds]
    med = statistics.median(values)
    met = "" if limit is None else ("yes" if (med <= limit if op == "<=" else med >= limit) else "**no**")
    print(f"| {target} | {what} | {', '.join(f'{v:.3g}' for v in values)} | {med:.3g} | "
          f"{'' if limit is None else op + ' ' + str(limit)} | {met} |")
kernels = sorted({r[k]["blas"] for r in rounds for k in ("gemm", "unknown")})
print(f"\nkernels: {'; '.join(kernels)}")
EOF
