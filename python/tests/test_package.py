"""The attngraph package: load, run, trace, zero-copy arrays, save/diff, grad, new, report,
dtype conversion, errors, building graphs from Python, the GIL released while a graph runs.
Reference values: the seed document's matrices (tests/data/seed_values.json) and numpy."""
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import attngraph


def seed_x():
    return np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=np.float32)


def test_load_run_trace_matches_the_seed_document(seed_path, seed_values):
    g = attngraph.load(seed_path)
    assert g.name == "seed_mha" and g.outputs == ["Y"] and g.dtype == "f32"
    r = g.run(trace=True, threads=2)
    assert set(r.names) == set(seed_values)
    for name, rows in seed_values.items():
        np.testing.assert_allclose(r[name], np.array(rows), atol=1e-5, err_msg=name)
    assert list(r.outputs) == ["Y"]
    assert r["head1.A"].dtype == np.float32


def test_trace_globs_keep_only_matching_values(seed_path):
    r = attngraph.load(seed_path).run(trace=["head*.A"])
    assert set(r.names) == {"head1.A", "head2.A", "Y"}
    with pytest.raises(KeyError, match="not kept"):
        r["head1.S"]
    with pytest.raises(KeyError, match="no value named"):
        r["nope"]


def test_traces_and_gradients_read_as_mappings(seed_path, seed_values):
    """len, items, values and get, as a dict's: dict(r) is {name: array} of the kept values."""
    r = attngraph.load(seed_path).run(trace=["head*.A"])
    assert len(r) == 3 and list(r) == r.names == ["head1.A", "head2.A", "Y"]
    d = dict(r.items())
    assert list(d) == r.names and [a is not None for a in r.values()] == [True] * 3
    np.testing.assert_allclose(d["head2.A"], np.array(seed_values["head2.A"]), atol=1e-5)
    np.testing.assert_allclose(r.values()[2], np.array(seed_values["Y"]), atol=1e-5)
    np.testing.assert_allclose(r.get("Y"), np.array(seed_values["Y"]), atol=1e-5)
    assert r.get("head1.S") is None and r.get("nope", 7) == 7  # not kept, not a value
    g = attngraph.load(seed_path).grad(wrt=["head2.Wv", "X"])
    assert len(g) == 2 and list(g) == g.keys() == g.names == ["X", "head2.Wv"]
    # L = sum(Y), Wo the identity: dL/dWv2[k][c] = sum_j (A2^T 1)_j X[j][k], A2's rows sum to 1
    a2 = np.array(seed_values["head2.A"])
    x = np.array(seed_values["X"])
    np.testing.assert_allclose(dict(g.items())["head2.Wv"], np.repeat((a2.sum(axis=0) @ x)[:, None], 2, axis=1),
                               atol=1e-5)
    assert g.get("head1.Wq") is None and g.get("head1.Wq", 0) == 0


def test_an_empty_trace_list_keeps_only_the_outputs(seed_path, seed_values):
    g = attngraph.load(seed_path)
    for trace in ([], (), False):
        r = g.run(trace=trace)
        assert isinstance(r, attngraph.Trace)
        assert r.names == ["Y"] and "head1.A" not in r
        np.testing.assert_allclose(r["Y"], np.array(seed_values["Y"]), atol=1e-5)
        with pytest.raises(KeyError, match="not kept"):
            r["head1.A"]


def test_arrays_share_the_run_buffer_and_keep_it_alive(seed_path):
    g = attngraph.load(seed_path)
    r = g.run(trace=True)
    a = r["head1.A"]
    b = r["head1.A"]
    assert np.shares_memory(a, b)  # zero-copy: both views of the run's one buffer
    assert not a.flags.writeable and not a.flags.owndata
    before = a.copy()
    del r
    for _ in range(3):
        g.run({"X": np.ones((3, 4), np.float32)}, trace=True)  # later runs never write into it
    np.testing.assert_array_equal(a, before)


def test_large_values_lend_their_buffers_once_let_go():
    # 1024 x 1024 f32 = 4 MiB: once the trace and its arrays are gone, the next run writes
    # into the same buffer; an array still held keeps its numbers through later runs
    attngraph.release_memory()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1024, 1024)).astype(np.float32)
    b = attngraph.Builder("pooled")
    X = b.input("X", x)
    b.output(((X * 2.0).named("a") + X).named("y"))
    g = b.build()

    def address(arr):
        return arr.__array_interface__["data"][0]

    r = g.run(trace=True)
    np.testing.assert_array_equal(r["a"], x * 2)
    np.testing.assert_array_equal(r["y"], x * 3)
    held = r["a"]
    a_address = address(held)
    del r
    assert attngraph.release_memory() == 4 << 20  # y's buffer waited; a's is still held
    r = g.run(trace=True)
    y_address = address(r["y"])
    del r
    r = g.run({"X": -x}, trace=True)
    assert address(r["a"]) == y_address  # the first step took the buffer y let go
    np.testing.assert_array_equal(r["a"], -x * 2)
    np.testing.assert_array_equal(r["y"], -x * 3)
    assert address(held) == a_address
    np.testing.assert_array_equal(held, x * 2)
    del r, held
    assert attngraph.release_memory() == 12 << 20  # a, y and the held one
    assert attngraph.release_memory() == 0


def test_inputs_in_f64_and_other_dtypes_are_converted(seed_path, seed_values):
    g = attngraph.load(seed_path)
    x = seed_x()
    ref = g.run({"X": x})["Y"]
    for conv in (x.astype(np.float64), x.astype(np.int64), x.astype(bool), x.astype(np.float16), x.astype(np.uint8)):
        np.testing.assert_array_equal(g.run({"X": conv})["Y"], ref)
    g64 = attngraph.load(seed_path, dtype="f64")
    y64 = g64.run({"X": x})["Y"]
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, np.array(seed_values["Y"]), atol=1e-5)
    with pytest.raises(attngraph.GraphError, match="not a number"):
        g.run({"X": np.array([["a"] * 4] * 3)})
    # a non-contiguous view is read as its values
    wide = np.zeros((3, 8), np.float32)
    wide[:, ::2] = x
    np.testing.assert_array_equal(g.run({"X": wide[:, ::2]})["Y"], ref)


def test_errors_carry_the_cli_message(seed_path, tmp_path, cli):
    g = attngraph.load(seed_path)
    with pytest.raises(attngraph.ShapeError) as e:
        g.run({"X": np.zeros((3, 5), np.float32)})
    assert issubclass(attngraph.ShapeError, attngraph.Error)
    np.save(tmp_path / "x.npy", np.zeros((3, 5), np.float32))
    p = subprocess.run([cli, "run", str(seed_path), "--input", "X=%s" % (tmp_path / "x.npy")],
                       capture_output=True, text=True)
    assert p.returncode == 1
    # the CLI adds where the input came from; the rest is the library's one line
    assert str(e.value) in p.stderr
    assert "\n" not in str(e.value)
    with pytest.raises(attngraph.GraphError, match="has no tensor named 'Z'"):
        g.run({"Z": np.zeros(1)})
    bad = tmp_path / "bad.json"
    bad.write_text('{"tensors": {}, "nodes": [{"name": "a", "op": "Nope", "inputs": []}], "outputs": ["a"]}')
    with pytest.raises(attngraph.GraphError) as e:
        attngraph.load(bad)
    p = subprocess.run([cli, "check", str(bad)], capture_output=True, text=True)
    assert p.stderr == "error: %s\n" % e.value
    with pytest.raises(attngraph.IoError):
        attngraph.load(tmp_path / "missing.json")


def test_save_writes_the_cli_trace_format(seed_path, tmp_path, cli):
    g = attngraph.load(seed_path)
    g.run(trace=True).save(tmp_path / "py")
    subprocess.run([cli, "run", str(seed_path), "--trace", str(tmp_path / "cli")], check=True, capture_output=True)
    p = subprocess.run([cli, "diff", str(tmp_path / "py"), str(tmp_path / "cli")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all 33 common values agree" in p.stdout
    for name in ("head1.A", "Y"):
        assert (tmp_path / "py" / (name + ".npy")).read_bytes() == (tmp_path / "cli" / (name + ".npy")).read_bytes()
    p = subprocess.run([cli, "report", str(tmp_path / "py"), "-o", str(tmp_path / "r.html")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with pytest.raises(attngraph.IoError):
        g.run(trace=True).save(tmp_path / "py")  # not empty, no force
    g.run(trace=True).save(tmp_path / "py", force=True)


def test_report_and_repr_html(seed_path):
    r = attngraph.load(seed_path).run(trace=True, tokens=["a", "bb", "ccc"])
    page = r.report()
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype html")
    assert "head2.A" in page and "ccc" in page
    frame = r._repr_html_()
    assert frame.startswith("<iframe") and "head2.A" in frame
    assert r.tokens == ["a", "bb", "ccc"]


def test_report_of_a_trace_with_empty_values():
    """Values without elements whose last two axes are not empty ((B, 0, h, d_k) after the
    permute of an empty sequence, or a batch of 0) made the report read past them: the
    process died (segfault). Each shows as an empty matrix now."""
    g = attngraph.new("causal", batch=2, seq=3, d_model=4, heads=1)
    for x in (np.zeros((2, 0, 4), np.float32), np.zeros((0, 3, 4), np.float32)):
        r = g.run({"X": x}, trace=True)
        # numpy: an empty sequence (or batch) in, the same empty shape out
        assert r["Y"].shape == x.shape and r["O_rows"].size == 0
        page = r.report()
        assert page.startswith("<!DOCTYPE html>") and "O_rows" in page and "O_concat" in page
    assert g.grad({"X": np.zeros((0, 3, 4))}).forward.report().startswith("<!DOCTYPE html>")


def test_new_refuses_sizes_the_machine_cannot_hold():
    """Random tensors over a quarter of max_memory are a ShapeError before they are allocated
    (std::bad_alloc, a MemoryError, or the system's OOM killer before)."""
    with pytest.raises(attngraph.ShapeError, match=r"variant 'mha' \(seq 4, d_model 1000000, heads 2\): a tensor "
                       r"of shape \(1000000x500000\) f32 needs 2000000000000 bytes"):
        attngraph.new("mha", seq=4, d_model=10**6, heads=2)
    # X 4x8, per head Wq/Wk/Wv 8x4 with 1x4 biases, Wo 8x8, bo 1x8: 320 floats, 1280 bytes
    assert attngraph.new("mha", seq=4, d_model=8, heads=2, max_memory=5120).tensor("bo").shape == (1, 8)
    with pytest.raises(attngraph.ShapeError, match=r"\(1x8\) f32 needs 32 bytes after 1248 bytes of the others, "
                       r"over 1279 bytes"):
        attngraph.new("mha", seq=4, d_model=8, heads=2, max_memory=5116)
    with pytest.raises(ValueError, match="max_memory must be a positive number of bytes"):
        attngraph.new("mha", max_memory=0)


def test_tokens_label_the_trace(seed_path, tmp_path):
    r = attngraph.load(seed_path).run(trace=True, tokens=["x", "y", "z"])
    r.save(tmp_path / "t")
    assert json.loads((tmp_path / "t" / "manifest.json").read_text())["tokens"] == ["x", "y", "z"]
    assert "x" in r.text()
    # tokens that label no axis (5 for a sequence of 3) are refused before the run, not dropped
    g = attngraph.load(seed_path)
    what = r"tokens: 5 tokens, but no value of graph 'seed_mha' has a row or column axis of 5; its inputs: X \(3x4\)"
    with pytest.raises(attngraph.ShapeError, match=what):
        g.run(trace=True, tokens=list("abcde"))
    with pytest.raises(attngraph.ShapeError, match=what):
        g.grad(wrt=["X"], tokens=list("abcde"))
    # with another sequence length given, the tokens count against it
    x5 = np.arange(20, dtype=np.float32).reshape(5, 4)
    assert g.run({"X": x5}, trace=True, tokens=list("abcde")).tokens == list("abcde")
    with pytest.raises(attngraph.ShapeError, match="tokens: 3 tokens, .* its inputs: X \\(5x4\\)"):
        g.run({"X": x5}, tokens=["x", "y", "z"])


def test_grad_against_numpy():
    # L = sum(softmax(X W) V): checked against finite differences in f64 and the closed form for V
    rng = np.random.default_rng(3)
    x, w, v = rng.normal(size=(3, 4)), rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    b = attngraph.Builder("small", dtype="f64")
    X, W, V = b.input("X", x), b.param("W", w), b.param("V", v)
    A = attngraph.softmax(X @ W).named("A")
    b.output((A @ V).named("Y"))
    g = b.build()
    gr = g.grad(wrt=["W", "V", "A"])
    s = x @ w
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    np.testing.assert_allclose(gr["V"], a.T @ np.ones((3, 2)), rtol=1e-12)
    np.testing.assert_allclose(gr["A"], np.ones((3, 2)) @ v.T, rtol=1e-12)

    def loss(w_):
        s_ = x @ w_
        a_ = np.exp(s_ - s_.max(-1, keepdims=True))
        a_ /= a_.sum(-1, keepdims=True)
        return (a_ @ v).sum()

    num = np.zeros_like(w)
    for i in np.ndindex(*w.shape):
        d = np.zeros_like(w)
        d[i] = 1e-6
        num[i] = (loss(w + d) - loss(w - d)) / 2e-6
    np.testing.assert_allclose(gr["W"], num, atol=1e-7)
    np.testing.assert_allclose(gr.forward["Y"], a @ v, rtol=1e-12)
    gy = np.full((3, 2), 2.0)
    np.testing.assert_allclose(g.grad(wrt="V", output_grads={"Y": gy})["V"], a.T @ gy, rtol=1e-12)


def test_new_variant_and_check_table(cli, tmp_path):
    g = attngraph.new("gqa", seq=5, d_model=8, heads=4, groups=2)
    assert g.shape("X") == (5, 8) and g.shape("Y") == (5, 8)
    p = subprocess.run([cli, "new", "gqa", "--seq", "5", "--d-model", "8", "--heads", "4", "--groups", "2",
                        "-o", str(tmp_path / "g.json")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([cli, "check", str(tmp_path / "g.json")], capture_output=True, text=True)
    assert [l.rstrip() for l in p.stdout.splitlines()] == attngraph.load(tmp_path / "g.json").check().splitlines()
    table = g.check()
    assert "A                    Softmax    2x2x5x5      S" in table
    row = next(r for r in table.rows if r["name"] == "A")
    assert row["op"] == "Softmax" and row["shape"] == (2, 2, 5, 5)
    r_py = g.run({"X": np.ones((5, 8), np.float32)})
    r_cli = attngraph.load(tmp_path / "g.json").run({"X": np.ones((5, 8), np.float32)})
    np.testing.assert_array_equal(r_py["Y"], r_cli["Y"])
    assert "gqa" in attngraph.variants()
    with pytest.raises(attngraph.GraphError):
        attngraph.new("gqa", heads=4, groups=3)


def test_new_takes_every_variant_option():
    # softcap: the capped scores are c tanh(S / c) of the traced scores (numpy's tanh)
    t = attngraph.new("softcap", seq=5, d_model=8, heads=2, softcap=0.1, seed=3).run(trace=True)
    np.testing.assert_allclose(t["S_capped"], 0.1 * np.tanh(t["S"] / 0.1), rtol=1e-6, atol=1e-7)
    assert np.abs(t["S"]).max() > 0.2 and np.abs(t["S_capped"]).max() < 0.1
    # prefix-lm: every query sees the P = 2 first keys, and the keys j <= i after them
    i, j = np.indices((6, 6))
    keep = (j < 2) | (j <= i)
    a = attngraph.new("prefix-lm", batch=1, seq=6, d_model=8, heads=2, prefix_length=2).run(trace=True)["A"]
    assert (a[..., ~keep] == 0).all() and (a[..., keep] > 0).all()
    # document: packed documents of 2 and 3 tokens, each query sees its own document's keys
    doc = np.array([0, 0, 1, 1, 1])
    keep = doc[:, None] == doc[None, :]
    a = attngraph.new("document", batch=1, seq=5, d_model=8, heads=2, documents=[2, 3]).run(trace=True)["A"]
    assert (a[..., ~keep] == 0).all() and (a[..., keep] > 0).all()
    # decode: 3 cached keys and values before the new token
    g = attngraph.new("decode", seq=1, past=3, d_model=8, heads=2)
    assert g.shape("past_key")[-2:] == (3, 4) and g.shape("past_value")[-2:] == (3, 4)
    with pytest.raises(attngraph.GraphError, match="sum to 4, not to seq 5"):
        attngraph.new("document", batch=1, seq=5, d_model=8, heads=2, documents=[2, 2])
    with pytest.raises(attngraph.GraphError, match="prefix length"):
        attngraph.new("mha", prefix_length=2)


def test_builder_operators_match_numpy():
    rng = np.random.default_rng(0)
    x, wq, wk, wv = (rng.normal(size=s).astype(np.float32) for s in [(3, 4), (4, 2), (4, 2), (4, 2)])
    b = attngraph.Builder("attn", tokens=["a", "b", "c"])
    X = b.input("X", x)
    q = attngraph.linear(X, b.param("Wq", wq)).named("Q")
    k = attngraph.linear(X, b.param("Wk", wk)).named("K")
    v = attngraph.linear(X, b.param("Wv", wv)).named("V")
    s = ((q @ k.mT) * (1 / np.sqrt(2))).named("S")
    a = attngraph.softmax(s).named("A")
    o = (a @ v).named("O")
    y = (o + o).transpose([1, 0]).named("Yt")
    assert y.shape == (2, 3)
    b.output(y)
    g = b.build()
    r = g.run(trace=True)
    s_ref = (x @ wq) @ (x @ wk).T / np.sqrt(2)
    a_ref = np.exp(s_ref - s_ref.max(-1, keepdims=True))
    a_ref /= a_ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(r["A"], a_ref, rtol=1e-5)
    np.testing.assert_allclose(r["Yt"], (2 * a_ref @ (x @ wv)).T, rtol=1e-5)
    assert g.tokens == ["a", "b", "c"]
    with pytest.raises(attngraph.ShapeError, match="MatMul"):
        q @ q
    with pytest.raises(attngraph.GraphError):
        q * q


def test_graph_pickles_as_its_file(seed_path):
    import pickle
    g = attngraph.load(seed_path)
    h = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(g.run()["Y"], h.run()["Y"])
    assert h.to_json() == g.to_json()
    # the file's text without values and the tensors as arrays: their bytes and a little more
    # (as decimal text they took eight times their bytes)
    big = attngraph.new("mha-batched", seq=4, d_model=256, heads=4, dtype="f64")
    tensor_bytes = sum(big.tensor(n).nbytes for n in ("X", "Wqkv", "bqkv", "Wo", "bo"))
    assert tensor_bytes == 8 * (4 * 256 + 256 * 768 + 768 + 256 * 256 + 256)
    data = pickle.dumps(big)
    assert tensor_bytes < len(data) < tensor_bytes + 16384
    back = pickle.loads(data)
    assert back.dtype == "f64"
    for n in ("X", "Wqkv", "bqkv", "Wo", "bo"):
        np.testing.assert_array_equal(back.tensor(n), big.tensor(n))
    np.testing.assert_array_equal(back.run()["Y"], big.run()["Y"])
    # pickles of the whole text, as graphs were pickled before, still load
    old = attngraph._from_text(g.to_json())
    np.testing.assert_array_equal(old.run()["Y"], g.run()["Y"])


def test_graph_save_is_atomic_and_typed(seed_path, seed_values, tmp_path):
    g = attngraph.load(seed_path)
    out = tmp_path / "seed_copy.json"
    g.save(out)
    np.testing.assert_allclose(attngraph.load(out).run()["Y"], np.array(seed_values["Y"]), atol=1e-5)
    with pytest.raises(attngraph.IoError, match="no_such_dir"):
        g.save(tmp_path / "no_such_dir" / "g.json")
    with pytest.raises(attngraph.IoError, match="names no file"):
        g.save(str(tmp_path) + "/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed_copy.json"]  # no temporary left


def test_traces_pickle(seed_path, seed_values, tmp_path):
    """A Trace pickles (multiprocessing, joblib, a file): the graph as its file, the kept values
    as arrays, and what marks the run (kept globs, tokens, patched values). It was a
    TypeError: cannot pickle 'attngraph._core.Result' object."""
    import pickle
    g = attngraph.load(seed_path)
    uniform = np.full((3, 3), 1 / 3)
    r = g.run(trace=True, tokens=["a", "b", "c"], patch={"head2.A": uniform})
    back = pickle.loads(pickle.dumps(r))
    assert back.names == r.names and back.tokens == ["a", "b", "c"] and back.patched == ["head2.A"]
    for name in ("head1.A", "head1.O", "head2.S"):  # upstream of the patch: the document's values
        np.testing.assert_allclose(back[name], np.array(seed_values[name]), atol=1e-5)
    np.testing.assert_allclose(back["Y"][:, 2:], uniform @ np.array(seed_values["head2.V"]), atol=1e-6)
    assert not back["Y"].flags.writeable and back["Y"].dtype == np.float32
    back.save(tmp_path / "t")
    assert json.loads((tmp_path / "t" / "manifest.json").read_text())["tokens"] == ["a", "b", "c"]
    assert "head2.A" in back.report()
    # globs kept, an f64 graph's dtype, and the forward trace of gradients
    only = pickle.loads(pickle.dumps(g.with_dtype("f64").run(trace=["head*.A"])))
    assert only.names == ["head1.A", "head2.A", "Y"] and only["Y"].dtype == np.float64
    np.testing.assert_allclose(only["head2.A"], np.array(seed_values["head2.A"]), atol=1e-6)
    fwd = pickle.loads(pickle.dumps(g.grad(wrt=["Wo"]).forward))
    np.testing.assert_allclose(fwd["Y"], np.array(seed_values["Y"]), atol=1e-5)


def test_a_pickled_trace_holds_the_weights_once():
    """The graph's own tensors (weights, inputs) a trace keeps are pickled with the graph only,
    by name in the trace: they were stored twice, as graph-file text and as arrays."""
    import pickle
    g = attngraph.new("mha-batched", seq=4, d_model=256, heads=4)
    r = g.run(trace=True)
    leaves = {n: r[n] for n in r.names if n in ("X", "Wqkv", "bqkv", "Wo", "bo")}
    assert set(leaves) == {"X", "Wqkv", "bqkv", "Wo", "bo"}
    leaf_bytes = sum(a.nbytes for a in leaves.values())
    node_bytes = sum(r[n].nbytes for n in r.names if n not in leaves)
    assert leaf_bytes > 1_000_000 > 10 * node_bytes  # Wqkv 256x768 and Wo 256x256 in f32
    size = len(pickle.dumps(r))
    # the graph (text and tensors), the nodes' arrays and their names: well under the weights again
    assert size < len(pickle.dumps(g)) + node_bytes + 65536
    back = pickle.loads(pickle.dumps(r))
    assert back.names == r.names
    for n in r.names:
        np.testing.assert_array_equal(back[n], r[n])
    # a pickle written before (every kept value as an array) still loads
    old = attngraph._trace_from(g, {n: r[n] for n in r.names}, [0.0] * 20, True, [], [], [])
    for n in r.names:
        np.testing.assert_array_equal(old[n], r[n])


def test_gradients_pickle(seed_path, tmp_path):
    """Gradients pickle as their forward Trace and (name, array) pairs; it was a TypeError."""
    import pickle
    g = attngraph.load(seed_path)
    uniform = np.full((3, 3), 1 / 3, np.float32)
    back = pickle.loads(pickle.dumps(g.grad(wrt=["head2.Wv", "head2.Wq"], patch={"head2.A": uniform})))
    assert back.names == ["head2.Wq", "head2.Wv"] and "head2.Wv" in back and "head1.Wq" not in back
    # L = sum(Y), Y[:, 2:] = A2 X Wv2 with A2 uniform: dL/dWv2[k][c] = sum_j X[j][k] = 2, 2, 1, 1
    np.testing.assert_allclose(back["head2.Wv"], np.repeat([[2.0], [2.0], [1.0], [1.0]], 2, axis=1), atol=1e-5)
    np.testing.assert_array_equal(back["head2.Wq"], np.zeros((4, 2)))  # nothing flows through the constant
    assert back.forward.patched == ["head2.A"]
    np.testing.assert_array_equal(back.forward["head2.A"], uniform)
    back.save(tmp_path / "g")
    np.testing.assert_allclose(np.load(tmp_path / "g" / "grad" / "head2.Wv.npy"), back["head2.Wv"])


def test_the_gil_is_released_while_a_graph_runs():
    # one thread runs a large graph once (8 GFLOP: about 0.1 s on one core); the main thread
    # counts in Python meanwhile, a tick per 0.5 ms sleep. With the GIL held for the whole run
    # it could not count until the run returned. (A run of 1 GFLOP, a few ms, left too few
    # ticks on a loaded machine.)
    g = attngraph.new("mha-batched", seq=1024, d_model=768, heads=12)
    x = np.ones((1024, 768), np.float32)
    ticks = []
    started, finished = threading.Event(), threading.Event()

    def work():
        started.set()
        g.run({"X": x}, threads=1)
        finished.set()

    t = threading.Thread(target=work)
    t.start()
    started.wait()
    while not finished.is_set():
        ticks.append(1)
        time.sleep(0.0005)
    t.join()
    assert len(ticks) > 10


def test_ctrl_c_stops_a_run_after_its_current_step():
    """SIGINT during a run of the main thread raises KeyboardInterrupt once the step under way
    ends; it came only when the whole run had returned. The graph runs as before afterwards."""
    import signal
    n, steps = 1024, 24
    b = attngraph.Builder("chain")
    x = np.random.default_rng(0).normal(size=(n, n)).astype(np.float32)
    h = b.input("X", x)
    w = b.param("W", np.eye(n, dtype=np.float32))  # X·I·I·... = X, each product a full GEMM
    for i in range(steps):
        h = (h @ w).named("H%d" % i)
    b.output(h)
    g = b.build()
    start = time.monotonic()
    np.testing.assert_array_equal(g.run(threads=1)["H%d" % (steps - 1)], x)
    whole = time.monotonic() - start
    timer = threading.Timer(0.1, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        g.run(threads=1)
    stopped = time.monotonic() - start
    timer.join()
    assert stopped < 0.1 + 0.5 * (whole - 0.1), (stopped, whole)  # a step is 1/24 of the run
    np.testing.assert_array_equal(g.run(threads=1)["H%d" % (steps - 1)], x)
    # a gradient run too
    timer = threading.Timer(0.1, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        g.grad(wrt=["W"], threads=1)
    stopped = time.monotonic() - start
    timer.join()
    assert stopped < 0.1 + 0.5 * (whole - 0.1), (stopped, whole)


def test_runs_refuse_values_over_the_memory_limit(seed_path, seed_values):
    # the default limit, as the CLI's --max-memory: half of the machine's memory. X of 3e6 rows
    # makes head1.S_raw 3e6 x 3e6 f32 (36 TB): refused before anything is allocated. The
    # child's address space is capped, so a regression fails with MemoryError, not by swapping.
    script = """if True:
        import os, resource, sys
        import numpy as np, attngraph
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        g = attngraph.load(sys.argv[1])
        try:
            g.run({"X": np.zeros((3000000, 4), np.float32)}, trace=True)
        except Exception as e:
            print(type(e).__name__, e)
        print(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    """
    p = subprocess.run([sys.executable, "-c", script, str(seed_path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    error, half = p.stdout.splitlines()
    assert error == ("ShapeError node 'head1.S_raw' (MatMul) output 'head1.S_raw' of shape (3000000x3000000) f32 "
                     "needs 36000000000000 bytes, over the memory limit of %s bytes" % half)
    assert attngraph.default_max_memory() == int(half)

    g = attngraph.load(seed_path)
    x = np.zeros((3000, 4), np.float32)  # head1.S_raw: 3000 x 3000 x 4 = 36000000 bytes
    over = "node 'head1.S_raw' [(]MatMul[)] output 'head1.S_raw' of shape [(]3000x3000[)] f32 needs 36000000 bytes, " \
           "over the memory limit of 10000000 bytes$"
    with pytest.raises(attngraph.ShapeError, match=over):
        g.run({"X": x}, max_memory=10_000_000)
    with pytest.raises(attngraph.ShapeError, match=over):
        g.grad({"X": x}, wrt=["head1.Wq"], max_memory=10_000_000)
    # an input or a patch over the limit is refused before it is copied
    with pytest.raises(attngraph.ShapeError, match="^input X: shape [(]3000x4[)] f32 needs 48000 bytes, over the "
                                                   "memory limit of 40000 bytes$"):
        g.run({"X": x}, max_memory=40_000)
    with pytest.raises(attngraph.ShapeError, match="^patch head1.A: shape [(]3000x3000[)] f32 needs 36000000 bytes"):
        g.run(patch={"head1.A": np.zeros((3000, 3000))}, max_memory=10_000_000)
    # trace=True keeps every value: the seed's 33 values, f32, must fit together
    total = sum(np.array(v).size * 4 for v in seed_values.values())
    with pytest.raises(attngraph.ShapeError, match="its 33 values together need %d bytes, over the memory limit of "
                                                   "%d bytes; keep fewer with trace=" % (total, total - 1)):
        g.run(trace=True, max_memory=total - 1)
    np.testing.assert_allclose(g.run(trace=True, max_memory=total)["head1.A"], np.array(seed_values["head1.A"]),
                               atol=1e-5)
    np.testing.assert_allclose(g.run(max_memory=total - 1)["Y"], np.array(seed_values["Y"]), atol=1e-5)
    with pytest.raises(ValueError, match="max_memory must be a positive number of bytes, got 0"):
        g.run(max_memory=0)
    with pytest.raises(TypeError, match="max_memory must be a number of bytes"):
        g.run(max_memory="1G")


def test_builder_settings_take_numpy_integers():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4))
    b = attngraph.Builder("np", dtype="f64")
    X = b.input("X", x)
    i64 = np.int64
    outs = {
        "soft": attngraph.softmax(X, axis=i64(1)),
        "resh": X.reshape(np.array([6, 4])),
        "resh1": X.reshape(i64(24)),
        "perm": X.transpose(np.array([1, 0, 2])),
        "pad": attngraph.mask_padding(X, np.array([1, 2])),
        "win": attngraph.mask_window(X, i64(2), causal=np.bool_(True)),
        "cut": attngraph.slice(X, np.int32(2), i64(1), np.uint8(3)),
        "half": attngraph.split(X, i64(2))[1],
        "sizes": attngraph.split(X, np.array([1, 3]))[1],
        "half2": X * np.float32(0.5),
    }
    b.output(*outs.values())
    t = b.build().run()
    r = {name: t[v.name] for name, v in outs.items()}
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(r["soft"], e / e.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_array_equal(r["resh"], x.reshape(6, 4))
    np.testing.assert_array_equal(r["resh1"], x.reshape(24))
    np.testing.assert_array_equal(r["perm"], x.transpose(1, 0, 2))
    j = np.arange(4)
    np.testing.assert_array_equal(r["pad"], np.where(j[None, None, :] < np.array([1, 2])[:, None, None], x, -np.inf))
    i = np.arange(3)[:, None]
    np.testing.assert_array_equal(r["win"], np.where((i - j >= 0) & (i - j < 2), x, -np.inf))  # 0 <= i - j < w
    np.testing.assert_array_equal(r["cut"], x[:, :, 1:3])
    np.testing.assert_array_equal(r["half"], x[:, :, 2:])
    np.testing.assert_array_equal(r["sizes"], x[:, :, 1:])
    np.testing.assert_array_equal(r["half2"], x * 0.5)


def test_non_finite_settings_are_typed_errors():
    b = attngraph.Builder("nan")
    x = b.input("X", np.ones((3, 3), np.float32))
    with pytest.raises(attngraph.GraphError, match=r"^node 'Scale_1' \(Scale\): attribute 'factor' must be finite, "
                                                   r"got nan$"):
        attngraph.scale(x, float("nan"))
    with pytest.raises(attngraph.GraphError, match=r"^node 'Scale_2' \(Scale\): attribute 'factor' must be finite, "
                                                   r"got inf$"):
        x * float("inf")
    with pytest.raises(attngraph.GraphError, match=r"^node 'w' \(Mask\): attribute 'window' must be finite, got nan$"):
        attngraph.mask_window(x, float("nan"), name="w")
    with pytest.raises(attngraph.GraphError, match=r"attribute 'factor' must be finite, got -inf"):
        b.node("Scale", [x], {"factor": np.float32("-inf")})
    b.output((x * 2.0).named("Y"))
    np.testing.assert_array_equal(b.build().run()["Y"], np.full((3, 3), 2.0))  # the failed nodes left nothing
    # a dict for parse(): NaN and infinities as the graph format writes them ("NaN", "Infinity")
    doc = {"tensors": {"X": {"kind": "input", "data": [[float("nan"), float("inf"), -np.inf, 1.5]]}},
           "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": np.float64(2)}}]}
    y = attngraph.parse(doc).run()["Y"]
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf and y[0, 2] == -np.inf and y[0, 3] == 3.0
    doc["nodes"][0]["attrs"]["factor"] = float("nan")
    with pytest.raises(attngraph.GraphError, match=r"node 'Y' \(Scale\): attribute 'factor' has the wrong type"):
        attngraph.parse(doc)


def test_builder_refuses_tensor_data_that_is_not_numbers_at_the_call():
    """b.input(name, None) was taken and failed at build() as a GraphError about numpy's
    "object" dtype, far from the line that gave it."""
    b = attngraph.Builder("b")
    for data, what in ((None, "got NoneType"), ("abc", "got str"), ([["a", "b"]], "got an array of <U1"),
                       ([[1, 2], [3]], r"got list \(numpy cannot read it as an array\)")):
        with pytest.raises(TypeError, match="^input X: expected a numeric array, %s$" % what):
            b.input("X", data)
    with pytest.raises(TypeError, match="^param W: expected a numeric array, got NoneType$"):
        b.param("W", None)
    x = b.input("X", [[0.0, 1.0, 2.0]])  # the name is still free; a list of numbers is data
    b.output(attngraph.softmax(x).named("A"))
    e = np.exp([0.0, 1.0, 2.0])
    np.testing.assert_allclose(b.build().run()["A"], [e / e.sum()], rtol=1e-6)


def test_builder_copies_tensor_data_at_the_call():
    x, w = np.eye(2, 3, dtype=np.float32), np.ones((3, 2), np.float32)
    b = attngraph.Builder("copy")
    X, W = b.input("X", x), b.param("W", w)
    b.output((X @ W).named("Y"))
    x[:] = 7  # after input()/param(), before build(): the graph keeps what was given
    w[:] = 5
    g = b.build()
    np.testing.assert_array_equal(g.tensor("X"), np.eye(2, 3))
    np.testing.assert_array_equal(g.run()["Y"], np.ones((2, 2)))


def test_bad_argument_types_name_the_argument(seed_path, seed_values, tmp_path):
    g = attngraph.load(seed_path)
    x = seed_x()
    for kwargs, error, what in [
        (dict(trace=1), TypeError, "trace must be True, False or a list of name globs, got int 1"),
        (dict(trace=[1]), TypeError, "trace .* must be a list of str, got int 1 in it"),
        (dict(inputs={1: x}), TypeError, "inputs: names must be str, got int 1"),
        (dict(inputs=[x]), TypeError, "inputs must be a dict"),
        (dict(patch={3: x}), TypeError, "patch: names must be str, got int 3"),
        (dict(tokens=[1, 2, 3]), TypeError, "tokens must be a list of str"),
        (dict(threads="2"), TypeError, "threads must be an int"),
        (dict(threads=-1), ValueError, "threads must be 0"),
    ]:
        with pytest.raises(error, match=what):
            g.run(**kwargs)
    with pytest.raises(TypeError, match="wrt must be a list of str, got int 1"):
        g.grad(wrt=[1])
    with pytest.raises(TypeError, match="output_grads: names must be str"):
        g.grad(output_grads={0: np.ones((3, 4))})
    # numpy's bools are bools
    r = g.run(trace=np.bool_(True))
    assert set(r.names) == set(seed_values)
    np.testing.assert_allclose(r["head1.A"], np.array(seed_values["head1.A"]), atol=1e-5)
    assert g.run(trace=np.bool_(False)).names == ["Y"]
    # an ONNX model's input_shapes: sizes are integers >= 0
    onnx = seed_path.parents[1] / "tests" / "data" / "onnx" / "test_gemm_all_attributes" / "model.onnx"
    with pytest.raises(ValueError, match=r"input_shapes\['X'\]: \(-1, 4\) is not a shape"):
        attngraph.load(onnx, input_shapes={"X": (-1, 4)})
    with pytest.raises(ValueError, match=r"input_shapes\['X'\]: \(2.5, 4\) is not a shape"):
        attngraph.load(onnx, input_shapes={"X": (2.5, 4)})
    with pytest.raises(TypeError, match="input_shapes: names must be str"):
        attngraph.load(onnx, input_shapes={0: (1, 4)})


def test_values_that_are_not_arrays_are_type_errors(seed_path, seed_values):
    """None, a str or a ragged list given as an input or a patch is a TypeError naming it (it
    was a GraphError about numpy's "object" dtype, or a ShapeError); lists of numbers are read."""
    g = attngraph.load(seed_path)
    for value, name in ((None, "NoneType"), ("abc", "str"), ([[1, 2], [3]], "list")):
        with pytest.raises(TypeError, match=r"^input X: expected a numeric numpy array, got %s" % name):
            g.run({"X": value})
        with pytest.raises(TypeError, match=r"^patch head2.A: expected a numeric numpy array, got %s" % name):
            g.run(patch={"head2.A": value})
    with pytest.raises(attngraph.GraphError, match="numpy dtype <U1 is not a number"):  # an array, of str
        g.run({"X": np.array([["a"] * 4] * 3)})
    np.testing.assert_allclose(g.run({"X": seed_values["X"]})["Y"], np.array(seed_values["Y"]), atol=1e-5)


def test_argument_values_of_save_report_and_new(seed_path, tmp_path):
    """save's format, report's max_side (as --max-side, 8 to 4096) and new's sizes: a
    ValueError or TypeError naming the argument, not pybind11's list of signatures."""
    r = attngraph.load(seed_path).run(trace=True)
    with pytest.raises(ValueError, match="^format must be 'npy', 'text' or 'json', got 'csv'$"):
        r.save(tmp_path / "t", format="csv")
    for side in (0, 7, -1, 4097):
        with pytest.raises(ValueError, match=r"^max_side must be 8 to 4096 \(as attngraph report --max-side\), "
                                             r"got %d$" % side):
            r.report(max_side=side)
    with pytest.raises(TypeError, match="^max_side must be an int"):
        r.report(max_side=8.5)
    assert r.report(max_side=np.int64(8)).startswith("<!DOCTYPE html>")
    with pytest.raises(ValueError, match="^seq must be 0 or more, got -1$"):
        attngraph.new("mha-batched", seq=-1)
    with pytest.raises(TypeError, match="^d_model must be an int, got float 8.0$"):
        attngraph.new("mha-batched", d_model=8.0)
    with pytest.raises(ValueError, match=r"^lengths\[1\] must be 0 or more, got -2$"):
        attngraph.new("causal", batch=2, lengths=[3, -2])
    with pytest.raises(TypeError, match="^lengths must be a list of ints, got int$"):
        attngraph.new("causal", batch=2, lengths=3)
    with pytest.raises(TypeError, match="^softcap must be a number"):
        attngraph.new("softcap", softcap="1")
    # numpy integers and arrays are sizes: X (B, n, d), and key padding from lengths
    g = attngraph.new("causal", batch=np.int64(2), seq=np.int32(4), d_model=8, lengths=np.array([4, 2]))
    assert g.shape("X") == (2, 4, 8)
    a = g.run(trace=["A"])["A"]
    np.testing.assert_array_equal(a[1, :, :, 2:], np.zeros((2, 4, 2)))  # keys 2, 3 of sequence 1 padded
    np.testing.assert_allclose(a.sum(-1), np.ones((2, 2, 4)), rtol=1e-6)


def test_file_errors_name_the_path_given(seed_path, seed_values, tmp_path):
    """A folder given as a graph file said "no such graph file"; a trace folder that cannot be
    made named the hidden temporary folder beside it, not the one given."""
    with pytest.raises(attngraph.IoError, match="^%s: is a directory, not a graph file$" % tmp_path):
        attngraph.load(tmp_path)
    with pytest.raises(attngraph.IoError, match="^%s: no such graph file$" % (tmp_path / "nope.json")):
        attngraph.load(tmp_path / "nope.json")
    r = attngraph.load(seed_path).run(trace=True)
    with pytest.raises(attngraph.IoError, match=r"^/proc/attngraph-trace: cannot create \(.*; writing through "
                                                r"/proc/\.attngraph-trace\.tmp-"):
        r.save("/proc/attngraph-trace")  # /proc takes no new folder, not even from root
    r.save(tmp_path / "t")
    np.testing.assert_allclose(np.load(tmp_path / "t" / "head1.A.npy"), np.array(seed_values["head1.A"]), atol=1e-5)


def test_a_binary_file_read_as_a_graph_keeps_its_message(tmp_path):
    """The JSON parser quotes the bytes it read; bytes that are not UTF-8 (a .npy file's
    magic 0x93) made the GraphError's message empty."""
    np.save(tmp_path / "x.npy", np.ones(3))
    with pytest.raises(attngraph.GraphError) as e:
        attngraph.load(tmp_path / "x.npy")
    assert str(e.value).startswith("%s: malformed JSON: parse error at line 1, column 1" % (tmp_path / "x.npy"))
    assert "last read: '\\x93'" in str(e.value)


def test_errors_give_hints_in_python_spelling(seed_path, tmp_path):
    g = attngraph.load(seed_path)
    g.run(trace=True).save(tmp_path / "t")
    with pytest.raises(attngraph.IoError) as e:
        g.run(trace=True).save(tmp_path / "t")
    assert str(e.value) == "%s: directory exists and is not empty (use force=True to replace it)" % (tmp_path / "t")
    with pytest.raises(attngraph.IoError, match=r"not empty \(use force=True to replace it\)$"):
        g.grad(wrt=["head1.Wq"]).save(tmp_path / "t")
    g.grad(wrt=["head1.Wq"]).save(tmp_path / "t", force=True)
    # an "npy" path leaving the graph file's folder
    (tmp_path / "sub").mkdir()
    np.save(tmp_path / "w.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    (tmp_path / "sub" / "g.json").write_text(json.dumps({
        "tensors": {"W": {"kind": "input", "npy": "../w.npy"}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["W"], "attrs": {"factor": 2}}]}))
    with pytest.raises(attngraph.GraphError, match=r"leaves the graph file's folder \(use allow_outside_paths=True\)$"):
        attngraph.load(tmp_path / "sub" / "g.json")
    y = attngraph.load(tmp_path / "sub" / "g.json", allow_outside_paths=True).run()["Y"]
    np.testing.assert_array_equal(y, 2 * np.arange(6).reshape(2, 3))


def test_wrt_none_is_every_value(seed_path):
    g = attngraph.load(seed_path)
    gr = g.grad(wrt=None)
    assert sorted(gr.names) == sorted(g.names) and len(gr.names) == 33
    np.testing.assert_array_equal(gr["head1.Wq"], g.grad(wrt=["head1.Wq"])["head1.Wq"])


def test_floats_beyond_f32s_range_are_refused(seed_path, seed_values):
    """An f64 value an f32 graph cannot hold (it would become inf) is a GraphError naming the
    input and the index, as in an .npy file; inf given as such and 3e38 pass."""
    g = attngraph.load(seed_path)
    x = np.array(seed_values["X"], dtype=np.float64)
    big = x.copy()
    big[1, 2] = -1e39
    with pytest.raises(attngraph.GraphError, match=r"input X: value -1e\+39 at flat index 6 is beyond f32's range"):
        g.run({"X": big})
    y = g.run({"X": x})["Y"]  # float64 within range: the seed's Y
    np.testing.assert_allclose(y, np.array(seed_values["Y"]), atol=1e-5)
    edge = x.copy()
    edge[0, 0] = np.inf
    assert np.isinf(g.run({"X": edge}, trace=["X"])["X"][0, 0])
    x64 = attngraph.load(seed_path, dtype="f64").run({"X": big}, trace=["X"])["X"]  # f64 holds it
    assert x64.dtype == np.float64 and x64[1, 2] == -1e39
    # integers the dtype cannot hold exactly, as in an .npy file: beyond 2^24 in f32, 2^53 in f64
    ints = np.full((3, 4), 2**24, np.int64)
    assert g.run({"X": ints}, trace=["X"])["X"][2, 3] == 2**24
    ints[2, 3] = -(2**24) - 1
    with pytest.raises(attngraph.GraphError, match=r"input X: integer -16777217 at flat index 11 is beyond 2\^24"):
        g.run({"X": ints})
    g64 = attngraph.load(seed_path, dtype="f64")
    assert g64.run({"X": ints}, trace=["X"])["X"][2, 3] == -(2**24) - 1
    with pytest.raises(attngraph.GraphError, match=r"integer 9007199254740993 at flat index 0 is beyond 2\^53"):
        g64.run({"X": np.full((3, 4), 2**53 + 1, np.uint64)})
