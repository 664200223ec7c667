"""attngraph.sweep: many runs of one graph, each reduced to per-node statistics where it ran,
the partial results combined in input order, in-process or over a Dask cluster.

The inputs are cut into chunks of `chunk` consecutive inputs (the same chunks whatever runs
them). A chunk's runs happen on one worker: each run's trace goes through `reduce`, and the
chunk sums what reduce returns, input by input. The chunk sums are then added up in chunk
order. Every addition happens in the same order in-process and on any cluster, so the
result is the same bit for bit.
"""
import hashlib
import numbers
import os
import sys
import time

import numpy as np

__all__ = ["sweep", "SweepResult", "attention_entropy"]


class SweepResult:
    """`total[key]`: the sum over inputs of what reduce returned; `count`: the inputs;
    `mean()`: total / count; `seconds`: wall time; `chunks`: chunks run."""

    def __init__(self, total, count, seconds, chunks):
        self.total, self.count, self.seconds, self.chunks = total, count, seconds, chunks

    def mean(self):
        return {k: v / self.count for k, v in self.total.items()}

    def __getitem__(self, key):
        return self.total[key]

    def __repr__(self):
        return "<attngraph.SweepResult: %d inputs, keys %s>" % (self.count, ", ".join(sorted(self.total)))


def attention_entropy(a):
    """Entropy (nats) of each attention row of `a`, averaged over the rows: one number per
    leading index (per head for a (h, n, m) attention tensor)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a > 0, -a * np.log(a), 0.0)
    return terms.sum(axis=-1).mean(axis=-1)


_GRAPHS = {}  # digest -> Graph, per process (a worker parses a graph once)


def _graph(text, digest, onnx_names):
    g = _GRAPHS.get(digest)
    if g is None:
        import attngraph
        g = _GRAPHS[digest] = attngraph._from_text(text, onnx_names)
    return g


def _add(total, part, where=None):
    """total += part, key by key. `where` ("input 7") checks `part` as reduce()'s result: a
    dict of numbers or arrays, each key of one shape throughout (numpy would broadcast
    (1,) + (5,) without a word)."""
    if where is not None and not isinstance(part, dict):
        raise TypeError("sweep: reduce() must return a dict of numbers or arrays, got %s for %s" %
                        (type(part).__name__, where))
    for k, v in part.items():
        v = np.asarray(v, dtype=np.float64)
        if k in total and total[k].shape != v.shape:
            raise ValueError("sweep: reduce()'s '%s' has shape %s%s, %s before" %
                             (k, v.shape, " for " + where if where else "", total[k].shape))
        total[k] = v.copy() if k not in total else total[k] + v
    return total


def _run_chunk(text, digest, inputs, reduce, trace, threads, onnx_names=(), first=0):
    """Runs one chunk, whose inputs are the sweep's `first`, `first` + 1, ...; returns (sum of
    reduce over its inputs in order, count). An input that fails raises naming its index."""
    import attngraph
    g = _graph(text, digest, onnx_names)
    total = {}
    for i, x in enumerate(inputs, first):
        try:
            t = g.run(x, trace=trace, threads=threads)
        except (attngraph.Error, TypeError, ValueError) as e:  # one line naming the input
            raise type(e)("sweep: input %d: %s" % (i, e)) from None
        try:
            part = reduce(t)
        except Exception as e:
            e.add_note("sweep: raised by reduce() on input %d" % i)
            raise
        _add(total, part, "input %d" % i)
    return total, len(inputs)


def _chunks(inputs_iter, size):
    chunk = []
    for x in inputs_iter:
        chunk.append(x)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Progress:
    """'sweep: 40/100 inputs, 2.1 s' on stderr, rewritten in place; only on a terminal and
    only once the sweep has taken a second."""

    def __init__(self, total, enabled):
        self.total, self.start, self.shown = total, time.monotonic(), False
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.after = 1.0  # seconds before the line appears; ATTNGRAPH_PROGRESS_AFTER as for the CLI
        try:
            self.after = max(0.0, float(os.environ.get("ATTNGRAPH_PROGRESS_AFTER", "1")))
        except ValueError:
            pass

    def update(self, done):
        elapsed = time.monotonic() - self.start
        if not self.enabled or elapsed < self.after:
            return
        of = "/%d" % self.total if self.total is not None else ""
        sys.stderr.write("\rsweep: %d%s inputs, %.1f s " % (done, of, elapsed))
        sys.stderr.flush()
        self.shown = True

    def close(self):
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def sweep(graph, inputs_iter, reduce, client=None, chunk=8, trace=True, threads=1, progress=None):
    """Runs `graph` on every input of `inputs_iter` (dicts {tensor name: array}) and returns
    a SweepResult holding the sum over inputs of `reduce(trace)` (a dict of numbers or
    arrays), computed where the runs happen: traces never travel.

    client: None runs in-process; a dask.distributed Client spreads the chunks over its
    workers. The result is bit-identical either way (chunks of `chunk` inputs, summed in
    input order). `trace` chooses the kept values (True, or globs such as ["*.A"]);
    `threads` is each run's thread count. `progress` (None: when stderr is a terminal)
    shows inputs done and elapsed time on stderr."""
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk < 1:
        raise ValueError("sweep: chunk must be a positive number of inputs, got %r" % (chunk,))
    text = graph.to_json()
    onnx_names = sorted(graph.onnx_names.items())  # an imported model's inputs go by their ONNX names
    digest = hashlib.sha256((text + repr(onnx_names)).encode()).hexdigest()
    total_inputs = len(inputs_iter) if hasattr(inputs_iter, "__len__") else None
    bar = _Progress(total_inputs, progress)
    start = time.monotonic()
    total, count, nchunks = {}, 0, 0
    try:
        if client is None:
            for c in _chunks(inputs_iter, chunk):
                part, n = _run_chunk(text, digest, c, reduce, trace, threads, onnx_names, count)
                _add(total, part)
                count += n
                nchunks += 1
                bar.update(count)
        else:
            from distributed import as_completed
            # the graph text travels with each task: a broadcast scatter of it was lost now and
            # then ("failed to acquire keys", the chunk cancelled) when a worker fetched it
            futures = [client.submit(_run_chunk, text, digest, c, reduce, trace, threads, onnx_names, k * chunk,
                                     pure=False)
                       for k, c in enumerate(_chunks(inputs_iter, chunk))]
            order = {f.key: i for i, f in enumerate(futures)}
            done = [None] * len(futures)
            next_index = 0
            try:
                for f in as_completed(futures):
                    i = order[f.key]
                    if f.status == "error":  # the first failing input in input order is reported, as in
                        client.cancel(futures[i + 1:])  # process: the chunks before this one finish first
                        for j in range(i):
                            if done[j] is None:
                                futures[j].result()
                    done[i] = f.result()
                    f.release()
                    while next_index < len(done) and done[next_index] is not None:  # combine in input order
                        part, n = done[next_index]
                        done[next_index] = ()
                        _add(total, part)
                        count += n
                        next_index += 1
                        bar.update(count)
            except BaseException:  # a chunk failed (or Ctrl-C): the chunks still queued are not run
                client.cancel(futures)
                raise
            nchunks = len(futures)
    finally:
        bar.close()
    return SweepResult(total, count, time.monotonic() - start, nchunks)
