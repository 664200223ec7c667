"""The README's Python example and docs/python.md's first example run as written (issue 15:
"README shows a 10-line Python example"), from a folder where graphs/ is the repository's.
Reference: the seed document (Wo is the identity and bo zero, so Y = [head1.O | head2.O] and
zeroing head2.O zeroes Y's last two columns)."""
import contextlib
import io
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


def check(scope, tmp_path):
    r, ablated = scope["r"], scope["ablated"]
    x = np.eye(3, 4, dtype=np.float32)
    assert np.array_equal(r.graph.run({"X": x})["Y"], r["Y"])
    y = ablated["Y"]
    assert np.array_equal(y[:, 2:], np.zeros((3, 2)))  # head 2 ablated
    # ablated runs the graph's own X (the seed document's), whose head 1 the document gives
    assert (tmp_path / "trace" / "manifest.json").exists()
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert scope["grads"]["head1.Wq"].shape == (4, 2)
    return y


def test_the_readme_example_runs_as_written(tmp_path, seed_values):
    blocks = python_blocks((SOURCE / "README.md").read_text())
    assert len(blocks) == 1 and len(blocks[0].strip().splitlines()) <= 12
    y = check(run_example(blocks[0], tmp_path), tmp_path)
    np.testing.assert_allclose(y[:, :2], np.array(seed_values["head1.O"]), atol=1e-5)


def test_the_python_docs_first_example_runs_as_written(tmp_path, seed_values):
    block = python_blocks((SOURCE / "docs" / "python.md").read_text())[0]
    y = check(run_example(block, tmp_path), tmp_path)
    np.testing.assert_allclose(y[:, :2], np.array(seed_values["head1.O"]), atol=1e-5)
