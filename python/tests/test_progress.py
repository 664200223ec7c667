"""The progress line (issue 15, part 5): `run`, `grad`, `report`, `bench` and Python's `sweep`
draw "run: 23/23 nodes, 0.0 s" on stderr when stderr is a terminal (here a pseudo-terminal
from os.openpty), never in a pipe, never with --quiet; standard output is the same either
way. ATTNGRAPH_PROGRESS_AFTER=0 shows the line at once (by default only work that takes over
a second shows it), so no test depends on how long anything takes. The counts expected come
from the graph file and the trace's manifest, read here, not from the progress code."""
import json
import os
import re
import subprocess
import sys

import pytest


def read_all(fd):
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every writer of the pty has closed it
            break
        if not chunk:
            break
        out += chunk
    return out


def on_pty(args, cwd, env_extra=None):
    """Runs args with stderr on a pseudo-terminal; returns (exit code, stdout, terminal text)."""
    master, slave = os.openpty()
    env = dict(os.environ, ATTNGRAPH_PROGRESS_AFTER="0", **(env_extra or {}))
    try:
        p = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                           timeout=300)
    finally:
        os.close(slave)
    text = read_all(master).decode()
    os.close(master)
    return p.returncode, p.stdout, text


def in_pipe(args, cwd):
    env = dict(os.environ, ATTNGRAPH_PROGRESS_AFTER="0")
    p = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode()


def last_line(text, command):
    """The progress line as it was last drawn (each redraw starts with \\r and clears the line)."""
    assert text.endswith("\r\n") or text.endswith("\n"), repr(text)
    draws = [d for d in re.split(r"\r\x1b\[K", text) if d.strip()]
    assert draws, repr(text)
    final = draws[-1].strip()
    assert final.startswith(command + ": "), repr(text)
    return final


@pytest.fixture
def work(tmp_path, seed_path, cli):
    """A trace of the seed graph to report on."""
    subprocess.run([cli, "run", str(seed_path), "--trace", "t", "--quiet"], cwd=tmp_path, check=True)
    return tmp_path


def seed_node_count(seed_path):
    return len(json.loads(seed_path.read_text())["nodes"])


def test_run_draws_nodes_done_of_total_on_a_terminal(work, seed_path, cli):
    code, out, text = on_pty([cli, "run", str(seed_path)], work)
    assert code == 0
    n = seed_node_count(seed_path)
    assert re.fullmatch(r"run: %d/%d nodes, \d+\.\d s" % (n, n), last_line(text, "run")), text
    # standard output is what a pipe gets; the pipe's stderr has no progress line
    code2, out2, err2 = in_pipe([cli, "run", str(seed_path)], work)
    assert code2 == 0 and out2 == out and err2 == ""
    assert "nodes" not in out.decode()


def test_grad_draws_the_backward_pass(work, seed_path, cli):
    code, out, text = on_pty([cli, "grad", str(seed_path)], work)
    assert code == 0
    m = re.fullmatch(r"grad: backward (\d+)/(\d+) nodes, \d+\.\d s", last_line(text, "grad"))
    assert m, text
    # every node the backward pass runs is counted; it never runs more than the graph has
    assert m.group(1) == m.group(2) and 0 < int(m.group(2)) <= seed_node_count(seed_path)
    assert in_pipe([cli, "grad", str(seed_path)], work)[1:] == (out, "")


def test_report_draws_values_done_of_the_manifest(work, cli):
    entries = len(json.loads((work / "t" / "manifest.json").read_text())["entries"])
    code, _, text = on_pty([cli, "report", "t", "-o", "r.html"], work)
    assert code == 0 and (work / "r.html").stat().st_size > 1000
    assert re.fullmatch(r"report: %d/%d values, \d+\.\d s" % (entries, entries), last_line(text, "report")), text
    assert in_pipe([cli, "report", "t", "-o", "r2.html"], work) == (0, b"", "")


def test_bench_draws_runs_done(work, cli):
    args = [cli, "bench", "--seq", "8", "--d-model", "8", "--heads", "2", "--reps", "3", "--threads", "1"]
    code, out, text = on_pty(args, work)
    assert code == 0 and json.loads(out)["seq"] == 8
    assert re.fullmatch(r"bench: 4/4 runs, \d+\.\d s", last_line(text, "bench")), text  # a warm-up and 3 reps
    code, out, err = in_pipe(args, work)
    assert code == 0 and err == ""


def test_quiet_turns_it_off_on_a_terminal(work, seed_path, cli):
    for args in (["run", str(seed_path), "--quiet"], ["--quiet", "grad", str(seed_path)],
                 ["report", "t", "-o", "q.html", "-q"]):
        code, out, text = on_pty([cli] + args, work)
        assert (code, out, text) == (0, b"", ""), args


def test_errors_stay_one_line_in_a_pipe(work, seed_path, cli):
    code, out, err = in_pipe([cli, "run", str(seed_path), "--patch", "head9.A=x.npy"], work)
    assert code == 1 and err == "error: patch head9.A: graph 'seed_mha' has no node named 'head9.A'\n"


SWEEP = """
import numpy as np, attngraph
g = attngraph.new("mha-batched", seq=4, d_model=8, heads=2)
rng = np.random.default_rng(0)
inputs = [{"X": rng.standard_normal((1, 4, 8)).astype(np.float32)} for _ in range(6)]
res = attngraph.sweep(g, inputs, lambda t: {"y": t["Y"].sum()}, chunk=2, trace=False)
print(res.count)
"""


def test_sweep_draws_inputs_done_on_a_terminal_only(tmp_path):
    code, out, text = on_pty([sys.executable, "-c", SWEEP], tmp_path)
    assert code == 0 and out == b"6\n"
    draws = [d.strip() for d in text.split("\r") if d.strip()]
    # one draw per chunk of 2 inputs, in input order
    assert [re.sub(r", \d+\.\d s$", "", d) for d in draws] == ["sweep: 2/6 inputs", "sweep: 4/6 inputs",
                                                                "sweep: 6/6 inputs"], text
    assert in_pipe([sys.executable, "-c", SWEEP], tmp_path) == (0, b"6\n", "")
