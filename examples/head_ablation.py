#!/usr/bin/env python3
"""Head ablation on the seed graph: zero each head's output (head<k>.O) in turn, rerun,
and show how Y changes, printed and as a small bar chart.

    PYTHONPATH=build/release/python python3 examples/head_ablation.py [--out ablation.png]
"""
import argparse
import os
import pathlib

import numpy as np

import attngraph

source = pathlib.Path(os.environ.get("ATTNGRAPH_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[1]))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--graph", default=str(source / "graphs" / "seed_mha.json"))
parser.add_argument("--out", default="head_ablation.png", help="where to write the plot")
args = parser.parse_args()

g = attngraph.load(args.graph)
clean = g.run()["Y"]
heads = sorted(n[: -len(".O")] for n in g.names if n.startswith("head") and n.endswith(".O"))
print("graph %s: Y %s, %d heads" % (g.name, "x".join(map(str, clean.shape)), len(heads)))
print("%-8s %12s %12s  %s" % ("ablated", "max |dY|", "mean |dY|", "most changed Y row (token)"))
changes = []
for head in heads:
    y = g.run(patch={head + ".O": lambda t: t * 0})["Y"]
    d = np.abs(y.astype(np.float64) - clean)
    changes.append(d.mean())
    row = int(d.sum(axis=1).argmax())
    token = g.tokens[row] if len(g.tokens) == d.shape[0] else str(row)
    print("%-8s %12.6f %12.6f  %d (%s)" % (head, d.max(), d.mean(), row, token))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(4, 3))
ax.bar(heads, changes, color="#4c72b0")
ax.set_ylabel("mean |ΔY| when ablated")
ax.set_title("head ablation: " + g.name)
fig.tight_layout()
fig.savefig(args.out, dpi=100)
print("plot written to", args.out)
