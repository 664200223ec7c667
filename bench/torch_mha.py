#!/usr/bin/python3
"""PyTorch's nn.MultiheadAttention forward at attngraph bench's sizes, for comparison.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/torch_mha.py [--seq N] [--d-model D]
       [--heads H] [--threads T] [--reps R]
Prints one JSON line like `attngraph bench` (gflops counts the same GEMMs).
"""
import argparse
import json
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--d-model", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=5)
a = p.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(1)
mha = torch.nn.MultiheadAttention(a.d_model, a.heads, batch_first=True).eval()
x = torch.rand(1, a.seq, a.d_model) * 2 - 1
times = []
with torch.no_grad():
    for r in range(a.reps + 1):
        t0 = time.perf_counter()
        mha(x, x, x, need_weights=False)
        if r:
            times.append(time.perf_counter() - t0)
n, d = a.seq, a.d_model
flops = 4 * 2 * n * d * d + 2 * 2 * n * n * d
med = statistics.median(times)
print(json.dumps({"variant": "torch.nn.MultiheadAttention " + torch.__version__, "seq": n, "d_model": d,
                  "heads": a.heads, "threads": a.threads, "median_ms": round(med * 1e3, 3),
                  "min_ms": round(min(times) * 1e3, 3), "gflops": round(flops / med / 1e9, 2)}))
