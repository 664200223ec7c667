#!/usr/bin/env python3
"""Per-head attention entropy over a synthetic dataset, with attngraph.sweep: in-process,
then on a Dask LocalCluster of 1 and 2 worker processes (same result bit for bit), with
the throughput of each.

    PYTHONPATH=build/release/python python3 examples/sweep_entropy.py [--inputs 400] [--out entropy.png]
"""
import argparse

import numpy as np

import attngraph
from attngraph.sweep import attention_entropy

def reduce(trace):
    return {"entropy": attention_entropy(trace["A"])}  # A is (heads, n, n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--workers", default="1,2", help="cluster sizes to run (comma-separated; empty: none)")
    parser.add_argument("--out", default="", help="write a bar chart of the entropies here")
    args = parser.parse_args()

    g = attngraph.new("mha-batched", seq=args.seq, d_model=args.d_model, heads=args.heads)
    rng = np.random.default_rng(0)
    # synthetic "prompts": each input a random sequence, some with a repeated token pattern
    data = []
    for i in range(args.inputs):
        x = rng.normal(size=(args.seq, args.d_model)).astype(np.float32)
        if i % 2:
            x[1::2] = x[0]
        data.append({"X": x})



    results = {"in-process": attngraph.sweep(g, data, reduce, trace=["A"], chunk=16)}
    sizes = [int(s) for s in args.workers.split(",") if s]
    if sizes:
        from distributed import Client, LocalCluster

        for n in sizes:
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
                    Client(cluster) as client:
                attngraph.sweep(g, data[:16], reduce, client=client, trace=["A"], chunk=16)  # warm the workers
                results["%d worker%s" % (n, "s" if n > 1 else "")] = attngraph.sweep(
                    g, data, reduce, client=client, trace=["A"], chunk=16)

    base = results["in-process"]
    print("mean attention entropy per head over %d inputs (max log %d = %.4f):" % (base.count, args.seq, np.log(args.seq)))
    for h, e in enumerate(base.mean()["entropy"]):
        print("  head %d: %.6f" % (h, e))
    for name, r in results.items():
        same = np.array_equal(r.total["entropy"], base.total["entropy"])
        print("%-11s %7.1f inputs/s  (%d inputs, %.2f s)%s" % (name, r.count / r.seconds, r.count, r.seconds,
                                                                "" if name == "in-process" else
                                                                ", identical" if same else ", DIFFERENT"))
        if not same:
            raise SystemExit("the sweep's result depends on where it ran")
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 3))
        ax.bar(range(args.heads), base.mean()["entropy"], color="#55a868")
        ax.set_xlabel("head")
        ax.set_ylabel("mean entropy (nats)")
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print("plot written to", args.out)


if __name__ == "__main__":  # Dask starts its workers by spawning this file again
    main()
