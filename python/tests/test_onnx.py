"""attngraph.load() of an ONNX model (issue 15, part 1: "and .onnx once ONNX import lands"):
the model is imported in memory as the CLI's run/check/grad import it. The model here is
written by this test with a few lines of protobuf encoding (no onnx package involved): one
attention head whose values carry PyTorch-style names ("/attn/Softmax_output_0") and whose
sequence axis is symbolic. Reference values: numpy, written out here; and one ONNX conformance
model (tests/data/onnx, Gemm with every attribute) against its numpy formula."""
import struct

import numpy as np
import pytest

import attngraph


# ---- a minimal protobuf writer (field numbers from onnx.proto) ----------------------------------

def _varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _len(field, payload):
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _int(field, n):
    return _varint(field << 3) + _varint(n)


def _str(field, s):
    return _len(field, s.encode())


def _tensor(name, array):  # TensorProto: dims 1, data_type 2 (1 = FLOAT), name 8, raw_data 9
    a = np.ascontiguousarray(array, dtype="<f4")
    return b"".join(_int(1, d) for d in a.shape) + _int(2, 1) + _str(8, name) + _len(9, a.tobytes())


def _value_info(name, dims):  # ValueInfoProto{name 1, type 2: TypeProto{tensor_type 1{elem_type 1, shape 2}}}
    shape = b"".join(_len(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    return _str(1, name) + _len(2, _len(1, _int(1, 1) + _len(2, shape)))


def _node(op, inputs, outputs, name, perm=None):  # NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
    body = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs) + _str(3, name) + _str(4, op)
    if perm is not None:  # AttributeProto: name 1, ints 8, type 20 (7 = INTS)
        body += _len(5, _str(1, "perm") + b"".join(_int(8, p) for p in perm) + _int(20, 7))
    return body


def attention_model(wq, wk, wv, x="X"):
    nodes = [
        _node("MatMul", [x, "attn.q.weight"], ["/attn/q/MatMul_output_0"], "/attn/q/MatMul"),
        _node("MatMul", [x, "attn.k.weight"], ["/attn/k/MatMul_output_0"], "/attn/k/MatMul"),
        _node("MatMul", [x, "attn.v.weight"], ["/attn/v/MatMul_output_0"], "/attn/v/MatMul"),
        _node("Transpose", ["/attn/k/MatMul_output_0"], ["/attn/Transpose_output_0"], "/attn/Transpose", [1, 0]),
        _node("MatMul", ["/attn/q/MatMul_output_0", "/attn/Transpose_output_0"], ["/attn/MatMul_output_0"],
              "/attn/MatMul"),
        _node("Softmax", ["/attn/MatMul_output_0"], ["/attn/Softmax_output_0"], "/attn/Softmax"),
        _node("MatMul", ["/attn/Softmax_output_0", "/attn/v/MatMul_output_0"], ["Y"], "/attn/MatMul_1"),
    ]
    graph = (b"".join(_len(1, n) for n in nodes) + _str(2, "torch_jit")
             + _len(5, _tensor("attn.q.weight", wq)) + _len(5, _tensor("attn.k.weight", wk))
             + _len(5, _tensor("attn.v.weight", wv))
             + _len(11, _value_info(x, ["seq", wq.shape[0]])) + _len(12, _value_info("Y", ["seq", wv.shape[1]])))
    # ModelProto: ir_version 1, producer_name 2, graph 7, opset_import 8 {domain 1, version 2}
    return _int(1, 8) + _str(2, "test_onnx.py") + _len(7, graph) + _len(8, _str(1, "") + _int(2, 17))


def softmax_rows(s):
    out = np.empty_like(s)
    for i in range(s.shape[0]):  # plain loops: the reference does not share attngraph's kernel
        m = max(s[i])
        e = [np.exp(v - m) for v in s[i]]
        out[i] = [v / sum(e) for v in e]
    return out


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(7)
    w = [rng.standard_normal((4, 4)).astype(np.float32) / 2 for _ in range(3)]
    path = tmp_path / "attn.onnx"
    path.write_bytes(attention_model(*w))
    x = rng.standard_normal((5, 4)).astype(np.float32)
    x64, (wq, wk, wv) = x.astype(np.float64), [a.astype(np.float64) for a in w]
    a = softmax_rows((x64 @ wq) @ (x64 @ wk).T)
    return path, x, a, x64 @ wv


def test_load_onnx_runs_the_model_with_onnx_names(model):
    path, x, a_ref, v_ref = model
    g = attngraph.load(path, input_shapes={"X": x.shape})
    assert g.onnx_names["/attn/Softmax_output_0"] == "attn.Softmax_output_0"
    assert g.onnx_names["attn.q.weight"] == "attn.q.weight" and g.kind("attn.q.weight") == "param"
    assert g.shape("X") == (5, 4) and g.outputs == ["Y"]
    r = g.run({"X": x}, trace=True, threads=2)
    np.testing.assert_allclose(r["attn.Softmax_output_0"], a_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["Y"], a_ref @ v_ref, rtol=1e-5, atol=1e-5)
    # input_shapes may be given as arrays; f64 computes in f64
    g64 = attngraph.load(path, dtype="f64", input_shapes={"X": x})
    y64 = g64.run({"X": x})["Y"]
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, a_ref @ v_ref, rtol=1e-12, atol=1e-12)


def test_patches_and_gradients_take_onnx_names(model):
    path, x, a_ref, v_ref = model
    g = attngraph.load(path, input_shapes={"X": x.shape})
    uniform = np.full((5, 5), 0.2)
    r = g.run({"X": x}, patch={"/attn/Softmax_output_0": uniform}, trace=True)
    assert r.patched == ["attn.Softmax_output_0"]
    np.testing.assert_allclose(r["Y"], np.tile(v_ref.mean(axis=0), (5, 1)), rtol=1e-5, atol=1e-6)
    # L = sum(Y) with A frozen at 0.2 everywhere: dL/dV = A^T @ ones = 5 * 0.2 = 1 on every entry, so
    # dL/dWv = X^T @ ones; no gradient reaches Q through the constant A
    gr = g.grad({"X": x}, wrt=["attn.v.weight", "/attn/q/MatMul_output_0"], patch={"/attn/Softmax_output_0": uniform})
    np.testing.assert_allclose(gr["attn.v.weight"], x.astype(np.float64).T @ np.ones((5, 4)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gr["attn.q.MatMul_output_0"], np.zeros((5, 4)))


def test_onnx_errors_are_typed(model, tmp_path):
    path, x, _, _ = model
    with pytest.raises(attngraph.ShapeError, match="symbolic dimension 'seq'.*give it with input_shapes=[{]'X': shape[}]$"):
        attngraph.load(path)  # the sequence axis needs a shape
    bad = tmp_path / "text.onnx"
    bad.write_text("this is not a protobuf")
    with pytest.raises(attngraph.Error, match="not an ONNX model"):
        attngraph.load(bad)
    with pytest.raises(attngraph.GraphError, match="input_shapes applies to ONNX models"):
        attngraph.load(tmp_path / "g.json", input_shapes={"X": (1, 2)})


def test_a_conformance_model_matches_its_formula(seed_path):
    model = seed_path.parents[1] / "tests" / "data" / "onnx" / "test_gemm_all_attributes" / "model.onnx"
    g = attngraph.load(model)  # Gemm(transA=1, transB=1, alpha=0.25, beta=0.35): a (4, 3), b (5, 4), c (1, 5)
    rng = np.random.default_rng(3)
    a, b, c = rng.random((4, 3)), rng.random((5, 4)), rng.random((1, 5))
    y = g.run({"a": a, "b": b, "c": c})["y"]
    want = np.zeros((3, 5))
    for i in range(3):
        for j in range(5):
            want[i, j] = 0.25 * sum(a[k, i] * b[j, k] for k in range(4)) + 0.35 * c[0, j]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.fixture
def slash_model(tmp_path):
    """The model with its input named "/in/x" (attngraph name "in.x"), and numpy's Y of an x."""
    rng = np.random.default_rng(11)
    w = [rng.standard_normal((4, 4)).astype(np.float32) / 2 for _ in range(3)]
    path = tmp_path / "slash.onnx"
    path.write_bytes(attention_model(*w, x="/in/x"))
    wq, wk, wv = [a.astype(np.float64) for a in w]

    def y_ref(x):
        x = x.astype(np.float64)
        return softmax_rows((x @ wq) @ (x @ wk).T) @ (x @ wv)

    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(5)]
    return path, xs, y_ref


def test_onnx_names_survive_pickling_sweeps_and_traces(slash_model):
    import pickle
    path, xs, y_ref = slash_model
    g = attngraph.load(path, input_shapes={"/in/x": (5, 4)})
    assert g.onnx_names["/in/x"] == "in.x"
    h = pickle.loads(pickle.dumps(g))
    assert h.onnx_names == g.onnx_names and h.notes == g.notes
    np.testing.assert_allclose(h.run({"/in/x": xs[0]})["Y"], y_ref(xs[0]), rtol=1e-5, atol=1e-5)
    # the trace's graph (and the gradients' forward trace's) keeps them
    t = g.run({"/in/x": xs[0]})
    assert t.graph.onnx_names == g.onnx_names
    np.testing.assert_allclose(t.graph.run({"/in/x": xs[1]})["Y"], y_ref(xs[1]), rtol=1e-5, atol=1e-5)
    assert g.grad({"/in/x": xs[0]}).forward.graph.onnx_names == g.onnx_names
    # a sweep's inputs by ONNX name, in-process and on a worker process
    want = sum(y_ref(x) for x in xs)
    data = [{"/in/x": x} for x in xs]
    res = attngraph.sweep(g, data, lambda tr: {"y": tr["Y"]}, chunk=2, trace=False)
    assert res.count == 5 and res.chunks == 3
    np.testing.assert_allclose(res["y"], want, rtol=1e-5, atol=1e-5)
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        remote = attngraph.sweep(g, data, lambda tr: {"y": tr["Y"]}, client=client, chunk=2, trace=False)
    assert remote["y"].tobytes() == res["y"].tobytes()


def test_traces_gradients_and_lookups_take_onnx_names(slash_model):
    path, xs, y_ref = slash_model
    x = xs[0]
    g = attngraph.load(path, input_shapes={"/in/x": (5, 4)})
    assert g.shape("/in/x") == (5, 4) and g.kind("/in/x") == "input"
    assert g.kind("/attn/Softmax_output_0") == "node" and g.shape("/attn/Softmax_output_0") == (5, 5)
    t = g.run({"/in/x": x}, trace=True)
    assert "/attn/Softmax_output_0" in t and "/in/x" in t and "/nope" not in t
    np.testing.assert_array_equal(t["/in/x"], x)
    np.testing.assert_array_equal(t.graph.tensor("/in/x"), x)
    x64 = x.astype(np.float64)
    wq, wk = (g.tensor(n).astype(np.float64) for n in ("attn.q.weight", "attn.k.weight"))
    np.testing.assert_allclose(t["/attn/Softmax_output_0"], softmax_rows((x64 @ wq) @ (x64 @ wk).T), rtol=1e-5,
                               atol=1e-6)
    # dL/dx of L = sum(Y), against central differences of numpy's Y in f64
    gr = g.grad({"/in/x": x}, wrt=["/in/x"])
    assert "/in/x" in gr and "in.x" in gr and "/attn/Softmax_output_0" not in gr
    num = np.zeros((5, 4))
    for i in np.ndindex(5, 4):
        d = np.zeros((5, 4))
        d[i] = 1e-6
        num[i] = (y_ref(x64 + d).sum() - y_ref(x64 - d).sum()) / 2e-6
    np.testing.assert_allclose(gr["/in/x"], num, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(gr["/in/x"], gr["in.x"])
    np.testing.assert_array_equal(gr.forward["/attn/Softmax_output_0"], t["/attn/Softmax_output_0"])
    with pytest.raises(KeyError, match="no gradient of 'attn.Softmax_output_0'"):
        gr["/attn/Softmax_output_0"]


def test_load_holds_tensors_to_max_memory(slash_model, seed_path, seed_values):
    path, _, _ = slash_model
    with pytest.raises(attngraph.ShapeError, match=r"node 'attn.MatMul_output_0' \(MatMul\) output "
                                                   r"'attn.MatMul_output_0' of shape \(3000x3000\) f32 needs 36000000 "
                                                   r"bytes, over the memory limit of 10000000 bytes$"):
        attngraph.load(path, input_shapes={"/in/x": (3000, 4)}, max_memory=10_000_000)
    with pytest.raises(attngraph.ShapeError, match=r"graph input '/in/x' of shape \(3000x4\) has 12000 elements, "
                                                   r"over the limit of 10000 \(max_memory=\)$"):
        attngraph.load(path, input_shapes={"/in/x": (3000, 4)}, max_memory=40_000)
    # a graph file: the seed's largest tensor, Wo, is 4x4 f32 (64 bytes)
    with pytest.raises(attngraph.ShapeError, match=r"tensor 'Wo': shape \(4x4\) has 16 elements, over the limit of 15 "
                                                   r"\(max_memory=\)$"):
        attngraph.load(seed_path, max_memory=60)
    y = attngraph.load(seed_path, max_memory=64).run()["Y"]
    np.testing.assert_allclose(y, np.array(seed_values["Y"]), atol=1e-5)
