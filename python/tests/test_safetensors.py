"""Safetensors weights written from numpy (the format: an 8-byte little-endian header
length, a JSON header, raw data), F32, F16 and BF16; `new(..., weights_from=)` against a
numpy implementation of Hugging Face-style grouped-query attention."""
import json
import struct
import subprocess

import numpy as np
import pytest

import attngraph


def bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even (as torch converts)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: {key: (dtype name, numpy array of the raw values' dtype)}."""
    header, blobs, offset = {}, [], 0
    for key, (dtype, arr) in tensors.items():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[key] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def graph_doc(entry):
    return {"name": "st", "tensors": {"X": {"kind": "input", "data": [[1, 0, 0], [0, 1, 0]]}, "W": entry},
            "nodes": [{"name": "Y", "op": "MatMul", "inputs": ["X", "W"]}], "outputs": ["Y"]}


def test_f32_f16_bf16_entries(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(2, 3)).astype(np.float32)  # (out, in) as torch keeps it
    write_safetensors(tmp_path / "m.safetensors", {
        "w32": ("F32", w), "w16": ("F16", w.astype(np.float16)), "wbf": ("BF16", bf16_bits(w))})
    expect = {"w32": w, "w16": w.astype(np.float16).astype(np.float32),
              "wbf": (bf16_bits(w).astype(np.uint32) << 16).view(np.float32)}
    for key, ref in expect.items():
        (tmp_path / "g.json").write_text(json.dumps(graph_doc(
            {"safetensors": "m.safetensors", "key": key, "transpose": True})))
        g = attngraph.load(tmp_path / "g.json")
        np.testing.assert_array_equal(g.tensor("W"), ref.T, err_msg=key)
        np.testing.assert_array_equal(g.run()["Y"], ref.T[:2], err_msg=key)
    assert not np.array_equal(expect["wbf"], w)  # bf16 really rounded


def test_errors_name_file_and_key(tmp_path, cli):
    write_safetensors(tmp_path / "m.safetensors", {"w": ("F32", np.ones((2, 3), np.float32)),
                                                   "n": ("I64", np.ones(2, np.int64))})
    (tmp_path / "g.json").write_text(json.dumps(graph_doc({"safetensors": "m.safetensors", "key": "x"})))
    with pytest.raises(attngraph.IoError) as e:
        attngraph.load(tmp_path / "g.json")
    assert "m.safetensors: no tensor 'x'" in str(e.value)
    p = subprocess.run([cli, "check", str(tmp_path / "g.json")], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr == "error: %s\n" % e.value
    (tmp_path / "g.json").write_text(json.dumps(graph_doc({"safetensors": "m.safetensors", "key": "n"})))
    with pytest.raises(attngraph.IoError, match="key 'n': dtype I64 is not supported"):
        attngraph.load(tmp_path / "g.json")
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "m.safetensors").write_bytes(data[:-10])
    (tmp_path / "g.json").write_text(json.dumps(graph_doc({"safetensors": "m.safetensors", "key": "w"})))
    with pytest.raises(attngraph.IoError, match="truncated"):
        attngraph.load(tmp_path / "g.json")


def test_transpose_of_a_tensor_not_2d_names_its_rank(tmp_path):
    """It said "this one is 3" for a 1-D tensor of 3 values."""
    v = np.array([1.0, 2.0, 3.0], np.float32)
    write_safetensors(tmp_path / "m.safetensors", {"v": ("F32", v), "c": ("F32", np.ones((1, 2, 3), np.float32))})
    for key, rank in (("v", r"1-D \(3\)"), ("c", r"3-D \(1x2x3\)")):
        (tmp_path / "g.json").write_text(json.dumps(graph_doc({"safetensors": "m.safetensors", "key": key,
                                                               "transpose": True})))
        with pytest.raises(attngraph.IoError, match=r"key '%s': \"transpose\" needs a 2-D tensor, this one is %s$"
                                                    % (key, rank)):
            attngraph.load(tmp_path / "g.json")
    # without "transpose", the vector is read as it is: softmax([1, 2, 3]) in numpy
    (tmp_path / "g.json").write_text(json.dumps({
        "tensors": {"W": {"kind": "param", "safetensors": "m.safetensors", "key": "v"}},
        "nodes": [{"name": "Y", "op": "Softmax", "inputs": ["W"]}], "outputs": ["Y"]}))
    e = np.exp(v - v.max())
    np.testing.assert_allclose(attngraph.load(tmp_path / "g.json").run()["Y"], e / e.sum(), rtol=1e-6)


def hf_attention(x, q, k, v, o, bq, bo, heads, groups):
    """Plain numpy: Hugging Face-style attention (weights (out, in), repeat_kv for groups)."""
    n, d = x.shape
    dk = d // heads
    Q = (x @ q.T + bq).reshape(n, heads, dk).transpose(1, 0, 2)
    K = (x @ k.T).reshape(n, groups, dk).transpose(1, 0, 2)
    V = (x @ v.T).reshape(n, groups, dk).transpose(1, 0, 2)
    K = np.repeat(K, heads // groups, axis=0)
    V = np.repeat(V, heads // groups, axis=0)
    s = Q @ K.transpose(0, 2, 1) / np.sqrt(dk)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    out = (a @ V).transpose(1, 0, 2).reshape(n, d)
    return out @ o.T + bo


def test_new_weights_from_matches_hugging_face_attention(tmp_path, cli):
    rng = np.random.default_rng(5)
    d, heads, groups, n = 8, 4, 2, 5
    dk = d // heads
    q, o = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    k, v = rng.normal(size=(groups * dk, d)), rng.normal(size=(groups * dk, d))
    bq, bo = rng.normal(size=d), rng.normal(size=d)
    p = "model.layers.0.self_attn."
    tensors = {p + "q_proj.weight": q, p + "k_proj.weight": k, p + "v_proj.weight": v, p + "o_proj.weight": o,
               p + "q_proj.bias": bq, p + "o_proj.bias": bo}
    write_safetensors(tmp_path / "m.safetensors", {key: ("F32", t.astype(np.float32)) for key, t in tensors.items()})
    g = attngraph.new("gqa", seq=n, d_model=d, heads=heads, groups=groups, dtype="f64",
                      weights_from=tmp_path / "m.safetensors", prefix=p)
    x = rng.normal(size=(n, d))
    f32 = {key: t.astype(np.float32).astype(np.float64) for key, t in tensors.items()}
    ref = hf_attention(x, *(f32[p + s] for s in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                 "o_proj.weight", "q_proj.bias", "o_proj.bias")), heads, groups)
    np.testing.assert_allclose(g.run({"X": x})["Y"], ref, rtol=1e-10, atol=1e-12)
    # the CLI builds the same graph
    r = subprocess.run([cli, "new", "gqa", "--seq", str(n), "--d-model", str(d), "--heads", str(heads), "--groups",
                        str(groups), "--dtype", "f64", "--weights-from", "m.safetensors", "--prefix", p, "-o", "g.json"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(attngraph.load(tmp_path / "g.json").run({"X": x})["Y"], g.run({"X": x})["Y"])
