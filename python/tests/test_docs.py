"""The README's Python example and docs/python.md's first example run as written (issue 15:
"README shows a 10-line Python example"), from a folder where graphs/ is the repository's.
Reference: plain numpy on the seed graph's weights, checked against the seed document (Wo is
the identity and bo zero, so Y = [head1.O | head2.O] and zeroing head2.O zeroes Y's last two
columns)."""
import contextlib
import io
import json
import os
import re

import numpy as np

from conftest import SOURCE


def python_blocks(markdown):
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def run_example(code, tmp_path):
    (tmp_path / "graphs").symlink_to(SOURCE / "graphs")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        scope = {}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "example", "exec"), scope)
    finally:
        os.chdir(cwd)
    return scope


def seed_heads(x):
    """Each head's O of the seed graph for input x: plain numpy on the graph file's weights."""
    w = {k: np.array(v["data"], dtype=np.float64) for k, v in
         json.loads((SOURCE / "graphs" / "seed_mha.json").read_text())["tensors"].items()}
    heads = []
    for h in ("head1", "head2"):
        q, k, v = (x @ w[f"{h}.W{p}"] + w[f"{h}.b{p}"] for p in "qkv")
        s = q @ k.T / np.sqrt(2.0)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        heads.append(a / a.sum(axis=1, keepdims=True) @ v)
    return heads


def check(scope, tmp_path, seed_values):
    # the reference itself against the seed document, at the graph file's own X
    seed_x = np.array(seed_values["X"], dtype=np.float64)
    for name, o in zip(("head1.O", "head2.O"), seed_heads(seed_x)):
        np.testing.assert_allclose(o, np.array(seed_values[name]), atol=1e-5)
    r, ablated = scope["r"], scope["ablated"]
    x = np.eye(3, 4, dtype=np.float32)
    assert np.array_equal(r.graph.run({"X": x})["Y"], r["Y"])
    y = ablated["Y"]
    assert np.array_equal(y[:, 2:], np.zeros((3, 2)))  # head 2 ablated
    # the printed difference is head 2's part of Y alone: the same x in both runs (Wo = I, bo = 0)
    head1, head2 = seed_heads(x.astype(np.float64))
    np.testing.assert_allclose(ablated["Y"] - r.outputs["Y"], np.hstack([np.zeros((3, 2)), -head2]), atol=1e-6)
    np.testing.assert_allclose(y[:, :2], head1, atol=1e-6)
    assert (tmp_path / "trace" / "manifest.json").exists()
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert scope["grads"]["head1.Wq"].shape == (4, 2)
    return y


def test_the_readme_example_runs_as_written(tmp_path, seed_values):
    blocks = python_blocks((SOURCE / "README.md").read_text())
    assert len(blocks) == 1 and len(blocks[0].strip().splitlines()) <= 12
    check(run_example(blocks[0], tmp_path), tmp_path, seed_values)


def test_the_python_docs_first_example_runs_as_written(tmp_path, seed_values):
    block = python_blocks((SOURCE / "docs" / "python.md").read_text())[0]
    check(run_example(block, tmp_path), tmp_path, seed_values)
