"""attngraph from Python: load, build and run attention graphs, read every intermediate as
numpy, patch activations, take gradients, write traces and reports, sweep over datasets.

    import attngraph, numpy as np
    g = attngraph.load("graphs/seed_mha.json")
    r = g.run({"X": np.eye(3, 4, dtype=np.float32)}, trace=True)
    r["head1.A"]                       # numpy, shares the run's buffer
    r2 = g.run(patch={"head2.O": lambda t: t * 0})
"""
import functools as _functools
import html as _html
import json as _json
import numbers as _numbers
import os as _os
import re as _re
from collections.abc import Mapping as _Mapping

import numpy as _np

from . import _core
from ._core import Error, GraphError, IoError, ShapeError

__all__ = [
    "Error", "GraphError", "ShapeError", "IoError", "Graph", "Trace", "Gradients", "NodeTable", "Builder",
    "Value", "load", "parse", "new", "variants", "linear", "matmul", "transpose", "scale", "softmax", "concat",
    "add", "mask_causal", "mask_window", "mask_padding", "mask", "slice", "split", "reshape", "permute", "sweep",
    "default_max_memory", "release_memory",
]


# the CLI's hints in the library's messages, as a Python caller gives the same thing
_HINTS = [
    (r"trace fewer with --only$", "keep fewer with trace=[name globs]"),
    (r"\(replace it with --input (\S+)=FILE\.npy\)", r"(replace it with inputs={'\1': array})"),
    (r"\(use --force to replace it\)", "(use force=True to replace it)"),
    (r"\(use --allow-outside-paths\)", "(use allow_outside_paths=True)"),
    (r"\(--max-memory\)", "(max_memory=)"),
]


def _python_hints(e):
    """`e` (an attngraph.Error) with its CLI hints in Python's spelling, or `e` itself."""
    text = str(e)
    for pattern, repl in _HINTS:
        text = _re.sub(pattern, repl, text)
    return e if text == str(e) else type(e)(text)


def _hinted(fn):
    """`fn` raising its attngraph errors with _python_hints."""
    @_functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Error as e:
            better = _python_hints(e)
            if better is e:
                raise
            raise better from None
    return call


def _non_finite(x):
    """The first NaN or infinite float in `x` (a setting: number, list, numpy array), or None."""
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple, _np.ndarray)):
        for item in (x.tolist() if isinstance(x, _np.ndarray) else x):
            bad = _non_finite(item)
            if bad is not None:
                return bad
        return None
    if isinstance(x, (float, _np.floating)) and not _np.isfinite(x):
        return float(x)
    return None


def _jsonable(x):
    """`x` with numpy scalars and arrays as Python numbers and lists, and NaN and infinities
    as the graph format writes them ("NaN", "Infinity", "-Infinity"): JSON has no such numbers."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, _np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, _np.bool_)):
        return bool(x)
    if isinstance(x, _numbers.Integral):
        return int(x)
    if isinstance(x, (float, _np.floating)):
        x = float(x)
        return x if _np.isfinite(x) else "NaN" if x != x else "Infinity" if x > 0 else "-Infinity"
    return x


def _dumps(x):
    return _json.dumps(_jsonable(x), allow_nan=False)


def _str_list(v, what):
    """`v` (a str or an iterable of str) as a list of str, or a TypeError naming `what`."""
    if isinstance(v, str):
        return [v]
    try:
        items = list(v)
    except TypeError:
        raise TypeError("%s must be a list of str, got %s" % (what, type(v).__name__)) from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError("%s must be a list of str, got %s %r in it" % (what, type(item).__name__, item))
    return items


def _trace_arg(trace):
    """run()'s trace= as the core takes it: a bool or a list of globs."""
    if trace is None or isinstance(trace, (bool, _np.bool_)):
        return bool(trace)
    if isinstance(trace, (_numbers.Number, dict)):
        raise TypeError("trace must be True, False or a list of name globs, got %s %r" % (type(trace).__name__,
                                                                                         trace))
    return _str_list(trace, "trace (True, False or name globs)")


def _by_name(d, what):
    """{name: x} checked: a mapping whose keys are str, or a TypeError naming `what`."""
    if d is None:
        return {}
    if not isinstance(d, _Mapping):
        raise TypeError("%s must be a dict {name: ...}, got %s" % (what, type(d).__name__))
    for k in d:
        if not isinstance(k, str):
            raise TypeError("%s: names must be str, got %s %r" % (what, type(k).__name__, k))
    return d


def _threads(v):
    if isinstance(v, bool) or not isinstance(v, _numbers.Integral):
        raise TypeError("threads must be an int (0: every core), got %s" % type(v).__name__)
    if v < 0:
        raise ValueError("threads must be 0 (every core) or more, got %d" % v)
    return int(v)


def _max_memory(v):
    """max_memory= checked: None (the default limit) or a positive number of bytes."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, _numbers.Integral):
        raise TypeError("max_memory must be a number of bytes (an int), got %s" % type(v).__name__)
    if v <= 0:
        raise ValueError("max_memory must be a positive number of bytes, got %d" % v)
    return int(v)


def default_max_memory():
    """The memory limit of run() and grad() when max_memory= is not given: half of the
    machine's memory, as the CLI's --max-memory default."""
    return _core.default_max_memory()


def release_memory():
    """Frees the buffers that runs' large values (4 MiB or more) left for later runs once
    their arrays were gone (they wait 5 seconds at most, freed at the next run after that);
    gives back how many bytes that was."""
    return _core.release_memory()


class NodeTable(str):
    """`attngraph check`'s node table (print it), with the rows as dicts in `.rows`."""

    rows = ()


class Graph:
    """A validated, shape-inferred graph. Immutable: runs never change it."""

    def __init__(self, core, onnx_names=(), notes=()):
        self._g = core
        #: an imported ONNX model's {ONNX name: attngraph name} (inputs, params, node outputs)
        self.onnx_names = dict(onnx_names)
        #: the importer's remarks ("float16 model runs in f32")
        self.notes = list(notes)
        self._name_set = None

    def _our(self, name):
        """`name`, or the attngraph name of an imported model's ONNX name."""
        if not self.onnx_names or not isinstance(name, str):
            return name
        if self._name_set is None:
            self._name_set = set(self._g.names)
        return name if name in self._name_set else self.onnx_names.get(name, name)

    def _ours(self, by_name):
        """{name: x} with ONNX names of an imported model replaced by attngraph names."""
        if not by_name or not self.onnx_names:
            return dict(by_name or {})
        return {self._our(k): v for k, v in dict(by_name).items()}

    name = property(lambda self: self._g.name)
    dtype = property(lambda self: self._g.dtype)
    tokens = property(lambda self: list(self._g.tokens))
    outputs = property(lambda self: list(self._g.outputs))
    names = property(lambda self: list(self._g.names))

    def shape(self, name):
        return self._g.shape(self._our(name))

    def kind(self, name):
        """"input", "param" or "node"."""
        return self._g.kind(self._our(name))

    def tensor(self, name):
        """The data of an input or param tensor (read-only numpy)."""
        return self._g.tensor(self._our(name))

    @_hinted
    def run(self, inputs=None, trace=False, threads=0, patch=None, tokens=None, max_memory=None):
        """Runs the graph. `inputs` replaces input/param tensors ({name: array}); `trace` is
        a bool or a list of name globs ("head*.A") of the values to keep; `patch` replaces
        node outputs ({name: array} or {name: function(numpy) -> numpy}); `tokens` labels
        the sequence axes. A value over `max_memory` bytes (default: default_max_memory()),
        or with trace=True all values together, is a ShapeError before anything is
        allocated. Returns a Trace. The GIL is released while the graph runs."""
        return Trace(_core.run(self._g, self._ours(_by_name(inputs, "inputs")), _trace_arg(trace), _threads(threads),
                               self._ours(_by_name(patch, "patch")),
                               None if tokens is None else _str_list(tokens, "tokens"),
                               max_memory=_max_memory(max_memory)),
                     self.onnx_names, self.notes)

    @_hinted
    def grad(self, inputs=None, wrt=(), output_grads=None, patch=None, threads=0, tokens=None, max_memory=None):
        """Gradients of L = sum over outputs of sum(G * output) (G all ones unless given in
        `output_grads`) with respect to the `wrt` names (empty: every value). A patched
        value is a constant: no gradient flows through it. `max_memory` as for run()."""
        wrt = [self._our(w) for w in _str_list(() if wrt is None else wrt, "wrt")]
        return Gradients(_core.grad(self._g, self._ours(_by_name(inputs, "inputs")), wrt,
                                    self._ours(_by_name(output_grads, "output_grads")),
                                    self._ours(_by_name(patch, "patch")), _threads(threads),
                                    None if tokens is None else _str_list(tokens, "tokens"),
                                    max_memory=_max_memory(max_memory)),
                         self.onnx_names, self.notes)

    def check(self):
        """The node table of `attngraph check` (a str; `.rows` has one dict per value)."""
        t = NodeTable(self._g.check_table())
        t.rows = self._g.rows()
        return t

    def with_dtype(self, dtype):
        return Graph(self._g.with_dtype(dtype), self.onnx_names, self.notes)

    def to_json(self):
        """The graph file's text (tensors inline)."""
        return self._g.to_json()

    def save(self, path):
        """Writes the graph file (tensors inline) to `path`, atomically (a temporary beside it
        renamed into place); a path that cannot be written is an IoError."""
        self._g.save(_os.fspath(path))

    def __repr__(self):
        return "<attngraph.Graph '%s' %s, %d values, outputs %s>" % (self.name, self.dtype, len(self.names),
                                                                    ", ".join(self.outputs))


class Trace:
    """The values one run kept. `t[name]` is a read-only numpy array sharing the run's
    buffer (the array keeps it alive); `t.outputs` maps output names to arrays."""

    def __init__(self, core, onnx_names=(), notes=()):
        self._r = core
        self._onnx_names, self._notes = dict(onnx_names), list(notes)
        self._graph = None

    def _our(self, name):
        return self.graph._our(name) if self._onnx_names else name

    def __getitem__(self, name):
        return self._r.get(self._our(name))

    def __contains__(self, name):
        return self._our(name) in self._r.names

    def __iter__(self):
        return iter(self._r.names)

    def __len__(self):
        return len(self._r.names)

    def keys(self):
        return self._r.names

    def values(self):
        return [self._r.get(name) for name in self._r.names]

    def items(self):
        return [(name, self._r.get(name)) for name in self._r.names]

    def get(self, name, default=None):
        """`t[name]`, or `default` where the run did not keep `name`."""
        return self[name] if name in self else default

    @property
    def names(self):
        """Names of the kept values, tensors first-use ordered, nodes in graph order."""
        return list(self._r.names)

    @property
    def outputs(self):
        return {name: self._r.get(name) for name in self._r.graph.outputs}

    @property
    def graph(self):
        """The graph that ran (with the inputs given to it), with the ONNX names of the model it came from."""
        if self._graph is None:
            self._graph = Graph(self._r.graph, self._onnx_names, self._notes)
        return self._graph

    tokens = property(lambda self: list(self._r.tokens))
    patched = property(lambda self: list(self._r.patched))

    def seconds(self):
        """Forward wall time of each node, by node name."""
        return self._r.seconds()

    @_hinted
    def save(self, dir, format="npy", force=False):
        """Writes the trace as `attngraph run --trace DIR` does (diff and report read it);
        `format` "npy", "text" or "json" as the CLI's --trace-format."""
        if format not in ("npy", "text", "json"):
            raise ValueError("format must be 'npy', 'text' or 'json', got %r" % (format,))
        self._r.save(_os.fspath(dir), format, bool(force))

    def text(self):
        return self._r.text()

    def report(self, max_side=256):
        """The self-contained HTML report of this trace (as `attngraph report`); matrices
        larger than `max_side` (8 to 4096, as --max-side) a side are shown pooled."""
        if isinstance(max_side, bool) or not isinstance(max_side, _numbers.Integral):
            raise TypeError("max_side must be an int (8 to 4096), got %s" % type(max_side).__name__)
        if not 8 <= max_side <= 4096:
            raise ValueError("max_side must be 8 to 4096 (as attngraph report --max-side), got %d" % max_side)
        return self._r.report(int(max_side))

    def _repr_html_(self):
        page = self.report()
        return ('<iframe style="width:100%%;height:640px;border:0" srcdoc="%s"></iframe>' %
                _html.escape(page, quote=True))

    def __repr__(self):
        return "<attngraph.Trace of '%s': %d values>" % (self._r.graph.name, len(self._r.names))

    def __reduce__(self):
        # the graph as its graph-file text (Graph.__reduce__), the kept values as numpy arrays
        # but those that are the graph's own tensors (its weights, inputs), named only
        core_graph, values, seconds, traced, only, tokens, patched, shared = self._r.state()
        return (_trace_from, (Graph(core_graph, self._onnx_names, self._notes), values, list(seconds), traced,
                              list(only), list(tokens), list(patched), list(shared)))


class Gradients:
    """dL/dv by name (`g[name]`), and the forward trace of the run they came from."""

    def __init__(self, core, onnx_names=(), notes=()):
        self._g = core
        self._onnx_names, self._notes = dict(onnx_names), list(notes)
        self._graph = None

    def _our(self, name):
        if not self._onnx_names:
            return name
        if self._graph is None:
            self._graph = Graph(self._g.forward.graph, self._onnx_names, self._notes)
        return self._graph._our(name)

    def __getitem__(self, name):
        return self._g.get(self._our(name))

    def __contains__(self, name):
        return self._our(name) in self._g.names

    def __iter__(self):
        return iter(self._g.names)

    def __len__(self):
        return len(self._g.names)

    def keys(self):
        return list(self._g.names)

    def items(self):
        return [(name, self._g.get(name)) for name in self._g.names]

    def get(self, name, default=None):
        """`g[name]`, or `default` where no gradient was asked for `name`."""
        return self[name] if name in self else default

    names = property(lambda self: list(self._g.names))
    forward = property(lambda self: Trace(self._g.forward, self._onnx_names, self._notes))

    @_hinted
    def save(self, dir, force=False):
        """Writes the forward trace and every gradient (grad/<name>.npy), as `attngraph grad --trace`."""
        self._g.save(_os.fspath(dir), force)

    def __reduce__(self):
        # the forward trace as a Trace pickles, the gradients as (name, array) pairs
        return (_gradients_from, (self.forward, list(self._g.state())))


@_hinted
def load(path, dtype=None, allow_outside_paths=False, input_shapes=None, max_memory=None):
    """Reads a graph file (JSON), or an ONNX model (`.onnx`, imported in memory as the CLI's
    commands import it; docs/onnx.md). `input_shapes` ({ONNX input name: shape or array})
    fixes the shapes of a model's graph inputs, as the CLI takes them from its --input files.
    An imported graph's `onnx_names` maps ONNX names to attngraph names, and run(), grad()
    and patches accept either. A tensor over `max_memory` bytes (default:
    default_max_memory()) is a ShapeError, as for run()."""
    path = _os.fspath(path)
    if path.lower().endswith(".onnx"):
        shapes = {}
        for k, v in _by_name(input_shapes, "input_shapes").items():
            dims = getattr(v, "shape", v)
            if isinstance(dims, _numbers.Integral):
                dims = (dims,)
            try:
                dims = list(dims)
            except TypeError:
                raise TypeError("input_shapes['%s']: expected a shape or an array, got %s" %
                                (k, type(v).__name__)) from None
            if not all(isinstance(d, _numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in dims):
                raise ValueError("input_shapes['%s']: %r is not a shape (sizes are integers >= 0)" % (k, tuple(dims)))
            shapes[k] = [int(d) for d in dims]
        try:
            core, names, notes = _core.load_onnx(path, dtype, shapes, allow_outside_paths, _max_memory(max_memory))
        except ShapeError as e:  # the CLI's hint names its --input files
            hint = _re.sub(r"give it with --input (\S+)=FILE\.npy", r"give it with input_shapes={'\1': shape}", str(e))
            raise ShapeError(hint) from None
        return Graph(core, names, notes)
    if input_shapes:
        raise GraphError("%s: input_shapes applies to ONNX models; give a graph file's inputs to run()" % path)
    return Graph(_core.load(path, dtype, allow_outside_paths, _max_memory(max_memory)))


def parse(text, base_dir="."):
    """A graph from graph-file JSON text (or a dict)."""
    if not isinstance(text, str):
        text = _dumps(text)
    return Graph(_core.parse(text, _os.fspath(base_dir)))


def new(variant="mha-batched", seq=4, d_model=8, heads=2, groups=0, batch=0, kv_seq=0, window=0, causal=False,
        lengths=(), past=0, softcap=None, prefix_length=0, documents=(), dtype="f32", seed=1, name="",
        weights_from=None, prefix="", max_memory=None):
    """A variant with seeded random weights, as `attngraph new VARIANT` (see variants()); the
    arguments are the command's options: `lengths` is --kv-lengths, `past` decode's cached
    tokens, `softcap` the cap c of softcap (default 50), `prefix_length` prefix-lm's P,
    `documents` document's packed lengths. With `weights_from` (a safetensors file), its
    projections are the file's <prefix>q_proj/k_proj/v_proj/o_proj weights and biases (Hugging
    Face names). Sizes whose random tensors need more than a quarter of `max_memory` bytes
    (default: default_max_memory()) are a ShapeError before anything is allocated."""
    sizes = {"seq": seq, "d_model": d_model, "heads": heads, "groups": groups, "batch": batch, "kv_seq": kv_seq,
             "window": window, "past": past, "prefix_length": prefix_length, "seed": seed}
    for key, v in sizes.items():
        sizes[key] = _count(v, key)
    lengths = [_count(v, "lengths[%d]" % i) for i, v in enumerate(_int_list(lengths, "lengths"))]
    documents = [_count(v, "documents[%d]" % i) for i, v in enumerate(_int_list(documents, "documents"))]
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, _numbers.Real):
            raise TypeError("softcap must be a number (the cap c), got %s" % type(softcap).__name__)
        softcap = float(softcap)
    for key, v in (("variant", variant), ("dtype", dtype), ("name", name), ("prefix", prefix)):
        if not isinstance(v, str):
            raise TypeError("%s must be a str, got %s" % (key, type(v).__name__))
    return Graph(_core.new_variant(variant, sizes["seq"], sizes["d_model"], sizes["heads"], sizes["groups"],
                                   sizes["batch"], sizes["kv_seq"], sizes["window"], bool(causal), lengths,
                                   sizes["past"], softcap, sizes["prefix_length"], documents, dtype, sizes["seed"],
                                   name, "" if weights_from is None else _os.fspath(weights_from), prefix,
                                   _max_memory(max_memory)))


def _count(v, what):
    """`v` as a size or count (an int >= 0; numpy's integers too), or a TypeError / ValueError naming `what`."""
    if isinstance(v, (bool, _np.bool_)) or not isinstance(v, _numbers.Integral):
        raise TypeError("%s must be an int, got %s %r" % (what, type(v).__name__, v))
    if v < 0:
        raise ValueError("%s must be 0 or more, got %d" % (what, v))
    return int(v)


def _int_list(v, what):
    """`v` (a list, tuple or 1-D array of ints) as a list, or a TypeError naming `what`."""
    if isinstance(v, (str, bytes)) or _np.ndim(v) != 1:
        raise TypeError("%s must be a list of ints, got %s" % (what, type(v).__name__))
    return list(v)


def variants():
    """{name: description} of the variants new() builds."""
    return dict(_core.variants())


# ---- building graphs from Python ----------------------------------------------------------

class Builder:
    """Builds a graph from Python with the op functions and operators:

        b = attngraph.Builder("attn")
        x, wq = b.input("X", x_data), b.param("Wq", wq_data)
        q = attngraph.linear(x, wq).named("Q")
        a = attngraph.softmax((q @ k.mT) * (1 / np.sqrt(dk))).named("A")
        b.output(a @ v)
        g = b.build()

    Shapes are inferred as each node is added; a bad one raises ShapeError naming the node."""

    def __init__(self, name="graph", dtype="f32", tokens=()):
        self.name, self.dtype, self.tokens = name, dtype, list(tokens)
        self._tensors, self._nodes, self._outputs = [], [], []
        self._shapes, self._counter = {}, 0

    def _tensor(self, name, kind, data):
        self._check_new(name)
        if data is None or isinstance(data, (str, bytes)):
            raise TypeError("%s %s: expected a numeric array, got %s" % (kind, name, type(data).__name__))
        try:
            data = _np.array(data)  # a copy: the caller's array may change before build()
        except ValueError:  # a ragged list
            raise TypeError("%s %s: expected a numeric array, got %s (numpy cannot read it as an array)" %
                            (kind, name, type(data).__name__)) from None
        if data.dtype.kind not in "fiub":  # refused here, at the line that gave it, not at build()
            raise TypeError("%s %s: expected a numeric array, got an array of %s" % (kind, name, data.dtype))
        self._tensors.append((name, kind, data))
        self._shapes[name] = tuple(data.shape)
        return Value(self, name)

    def input(self, name, data):
        return self._tensor(name, "input", data)

    def param(self, name, data):
        return self._tensor(name, "param", data)

    def _check_new(self, name):
        if name in self._shapes:
            raise GraphError("graph '%s': the name '%s' is taken" % (self.name, name))

    def node(self, op, inputs, attrs=None, name=None):
        """Adds a node of `op` (e.g. "MatMul") reading `inputs` (Values); returns its Value,
        or a list of Values for a multi-output op."""
        for v in inputs:
            if not isinstance(v, Value) or v.builder is not self:
                raise GraphError("%s: every input must be a Value of this builder, got %r" % (op, v))
        if name is None:
            self._counter += 1
            name = "%s_%d" % (op, self._counter)
            while name in self._shapes:
                self._counter += 1
                name = "%s_%d" % (op, self._counter)
        self._check_new(name)
        attrs = dict(attrs or {})
        for key, value in attrs.items():  # JSON carries no NaN or infinity, so no op can take one
            bad = _non_finite(value)
            if bad is not None:
                raise GraphError("node '%s' (%s): attribute '%s' must be finite, got %s" % (name, op, key, bad))
        attrs_text = _dumps(attrs)
        names = [v.name for v in inputs]
        shapes = _core.infer(op, attrs_text, [list(self._shapes[n]) for n in names], name, names)
        self._nodes.append([name, op, names, attrs_text])
        if len(shapes) == 1:
            self._shapes[name] = tuple(shapes[0])
            return Value(self, name)
        outs = []
        for k, s in enumerate(shapes):
            self._shapes["%s:%d" % (name, k)] = tuple(s)
            outs.append(Value(self, "%s:%d" % (name, k)))
        self._shapes[name] = None
        return outs

    def _rename(self, old, new):
        if any(old in n[2] for n in self._nodes) or old in self._outputs:
            raise GraphError("cannot rename '%s': it is already used" % old)
        for n in self._nodes:
            if n[0] == old:
                self._check_new(new)
                n[0] = new
                self._shapes[new] = self._shapes.pop(old)
                return
        raise GraphError("only a node can be renamed, and '%s' is not one" % old)

    def output(self, *values):
        for v in values:
            self._outputs.append(v.name)

    def build(self):
        return Graph(_core.build(self.name, self.dtype, self.tokens, self._tensors, self._nodes, self._outputs))


class Value:
    """A value of a graph under construction. Operators: a @ b (MatMul), a + b (Add),
    a * s and s * a for a number s (Scale), a / s, a.mT (last two axes swapped),
    a.transpose(perm)."""

    __array_priority__ = 1000  # numpy scalars defer to our __rmul__

    def __init__(self, builder, name):
        self.builder, self.name = builder, name

    @property
    def shape(self):
        return self.builder._shapes[self.name]

    def named(self, name):
        """Renames this node (before anything reads it); returns the renamed Value."""
        self.builder._rename(self.name, name)
        self.name = name
        return self

    def __matmul__(self, other):
        return matmul(self, other)

    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self)

    def __mul__(self, other):
        if isinstance(other, Value):
            raise GraphError("Value * Value: attngraph has no elementwise product; * takes a number (Scale)")
        return scale(self, float(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return scale(self, 1.0 / float(other))

    def __neg__(self):
        return scale(self, -1.0)

    @property
    def mT(self):
        return transpose(self)

    @property
    def T(self):
        return transpose(self, list(reversed(range(len(self.shape)))))

    def transpose(self, perm=None):
        return transpose(self, perm)

    def reshape(self, *shape):
        if len(shape) == 1 and _np.ndim(shape[0]) == 1:  # a list, tuple or array of sizes
            shape = shape[0]
        return reshape(self, list(shape))

    def __getitem__(self, k):
        raise GraphError("index a multi-output op's result list, or use attngraph.slice(x, axis, start, end)")

    def __repr__(self):
        return "<attngraph.Value '%s' %s>" % (self.name, "x".join(map(str, self.shape or ())))


def _b(*values):
    for v in values:
        if isinstance(v, Value):
            return v.builder
    raise GraphError("an op needs at least one Value")


def linear(x, w, b=None, name=None):
    return _b(x).node("Linear", [x, w] + ([b] if b is not None else []), None, name)


def matmul(a, b, name=None):
    return _b(a, b).node("MatMul", [a, b], None, name)


def transpose(x, perm=None, name=None):
    return _b(x).node("Transpose", [x], {"perm": list(perm)} if perm is not None else None, name)


def scale(x, factor, name=None):
    return _b(x).node("Scale", [x], {"factor": float(factor)}, name)


def softmax(x, axis=-1, name=None):
    return _b(x).node("Softmax", [x], {"axis": axis}, name)


def concat(xs, axis=-1, name=None):
    return _b(*xs).node("Concat", list(xs), {"axis": axis}, name)


def add(a, b, name=None):
    return _b(a, b).node("Add", [a, b], None, name)


def mask_causal(x, name=None):
    return _b(x).node("Mask", [x], {"pattern": "causal"}, name)


def mask_window(x, window, causal=False, name=None):
    return _b(x).node("Mask", [x], {"pattern": "window", "window": window, "causal": causal}, name)


def mask_padding(x, lengths, name=None):
    return _b(x).node("Mask", [x], {"pattern": "padding", "lengths": list(lengths)}, name)


def mask(x, keep, name=None):
    return _b(x).node("Mask", [x, keep], None, name)


def slice(x, axis, start, end, name=None):
    return _b(x).node("Slice", [x], {"axis": axis, "start": start, "end": end}, name)


def split(x, parts_or_sizes, axis=-1, name=None):
    attrs = {"axis": axis}
    if isinstance(parts_or_sizes, _numbers.Integral) or _np.ndim(parts_or_sizes) == 0:
        attrs["parts"] = parts_or_sizes
    else:
        attrs["sizes"] = list(parts_or_sizes)
    out = _b(x).node("Split", [x], attrs, name)
    return out if isinstance(out, list) else [out]


def reshape(x, shape, name=None):
    return _b(x).node("Reshape", [x], {"shape": list(shape)}, name)


def permute(x, perm, name=None):
    return _b(x).node("Permute", [x], {"perm": list(perm)}, name)


from .sweep import sweep  # noqa: E402


def _from_text(text, onnx_names=(), notes=()):
    """A graph from its graph-file text and, for an imported model, its ONNX names and notes."""
    return Graph(_core.parse(text, "."), onnx_names, notes)


def _from_state(text, tensors, onnx_names=(), notes=()):
    """A graph from its graph-file text without values and its tensors as arrays (_graph_reduce)."""
    return Graph(_core.graph_from_state(text, tensors), onnx_names, notes)


def _graph_reduce(self):
    text, tensors = self._g.state()
    return (_from_state, (text, tensors, self.onnx_names, self.notes))


# graphs pickle as their graph-file text without values and their tensors as arrays (Dask
# ships them so); pickles of their whole text (_from_text) still load
Graph.__reduce__ = _graph_reduce


def _gradients_from(forward, grads):
    """Gradients again from their pickled parts (Gradients.__reduce__)."""
    return Gradients(_core.grad_from(forward._r, grads), forward._onnx_names, forward._notes)


def _trace_from(graph, values, seconds, traced, only, tokens, patched, shared=()):
    """A Trace again from its pickled parts (Trace.__reduce__); `shared` names the kept values
    that are the graph's own tensors (none in pickles written before it)."""
    return Trace(_core.result_from(graph._g, values, seconds, traced, only, tokens, patched, list(shared)),
                 graph.onnx_names, graph.notes)
