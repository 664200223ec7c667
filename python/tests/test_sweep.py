"""attngraph.sweep: in-process and on a 2-worker LocalCluster, the same result bit for bit;
checked against a plain loop over the same runs."""
import time

import numpy as np
import attngraph
from attngraph.sweep import attention_entropy


def dataset(n, seq=6, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return [{"X": rng.normal(size=(seq, d)).astype(np.float32)} for _ in range(n)]


def reduce(trace):
    return {"entropy": attention_entropy(trace["A"]), "y_sum": trace["Y"].astype(np.float64).sum()}


def test_in_process_sweep_matches_a_plain_loop():
    g = attngraph.new("mha-batched", seq=6, d_model=16, heads=4)
    data = dataset(20)
    res = attngraph.sweep(g, data, reduce, trace=["A"], chunk=8)
    assert res.count == 20 and res.chunks == 3
    ent = [attention_entropy(g.run(x, trace=["A"])["A"]) for x in data]
    np.testing.assert_allclose(res.mean()["entropy"], np.mean(ent, axis=0), rtol=1e-12)
    assert res["entropy"].shape == (4,)
    # entropies of 6-key attention rows lie in [0, log 6]
    assert np.all(res.mean()["entropy"] >= 0) and np.all(res.mean()["entropy"] <= np.log(6) + 1e-9)


def test_local_cluster_gives_the_same_bits():
    from distributed import Client, LocalCluster

    g = attngraph.new("mha-batched", seq=6, d_model=16, heads=4)
    data = dataset(40, seed=1)
    local = attngraph.sweep(g, data, reduce, trace=["A", "Y"], chunk=4)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        remote = attngraph.sweep(g, data, reduce, client=client, trace=["A", "Y"], chunk=4)
        workers = client.run(lambda: 1)
    assert len(workers) == 2
    assert remote.count == local.count == 40
    for k in local.total:
        assert np.array_equal(local.total[k], remote.total[k]), k
        assert local.total[k].tobytes() == remote.total[k].tobytes()


def test_sweep_progress_only_when_asked(capsys):
    g = attngraph.new("mha-batched", seq=4, d_model=8, heads=2)
    attngraph.sweep(g, dataset(3, seq=4, d=8), lambda t: {"y": t["Y"].sum()}, trace=False)
    assert capsys.readouterr().err == ""


def test_chunk_must_be_a_positive_count():
    import pytest
    g = attngraph.new("mha-batched", seq=4, d_model=8, heads=2)
    for chunk in (0, -3, 2.5):
        with pytest.raises(ValueError, match="sweep: chunk must be a positive number of inputs, got %s" % chunk):
            attngraph.sweep(g, dataset(3, seq=4, d=8), lambda t: {"y": t["Y"].sum()}, chunk=chunk, trace=False)
    res = attngraph.sweep(g, dataset(3, seq=4, d=8), lambda t: {"y": t["Y"].sum()}, chunk=1, trace=False)
    assert res.chunks == 3 and res.count == 3


SLOW_MARK = 100.0  # an input whose X[0, 0] holds this takes a second in reduce()


def reduce_slowly_on_the_mark(trace):
    if trace["X"][0, 0] == SLOW_MARK:
        time.sleep(1.0)
    return reduce(trace)


def test_a_bad_input_is_named_and_the_queued_chunks_are_cancelled():
    """An input that fails stops the sweep with the run's error, prefixed with its index (in
    process and from a cluster's worker); where several fail, the first in input order is
    named, however the chunks complete; a failing reduce() says so in a note; a cluster keeps
    no task of the sweep afterwards."""
    import pytest
    from distributed import Client, LocalCluster

    g = attngraph.new("mha-batched", seq=6, d_model=16, heads=4)
    data = dataset(12)
    data[7] = {"X": np.zeros((6, 9), np.float32)}
    message = r"^sweep: input 7: node 'QKV' \(Linear\): last axis of x \(6x9\)"
    with pytest.raises(attngraph.ShapeError, match=message):
        attngraph.sweep(g, data, reduce, trace=["A", "Y"], chunk=3)
    with pytest.raises(KeyError) as e:
        attngraph.sweep(g, dataset(4), lambda t: {"x": t["nope"]}, chunk=3)
    assert e.value.__notes__ == ["sweep: raised by reduce() on input 0"]
    # inputs 0-6 alone: the plain loop in numpy's float64 sum
    good = attngraph.sweep(g, data[:7], reduce, trace=["A", "Y"], chunk=3)
    y = sum(g.run(x)["Y"].astype(np.float64).sum() for x in data[:7])
    np.testing.assert_allclose(good["y_sum"], y, rtol=1e-12)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        # inputs 7, 19, 31, 43 fail; input 6 (in 7's chunk) is slow, so 19's chunk fails first
        many = [dict(x) for x in data * 4]
        many[6] = {"X": many[6]["X"].copy()}
        many[6]["X"][0, 0] = SLOW_MARK
        with pytest.raises(attngraph.ShapeError, match=message) as e:  # e keeps the sweep's frame alive
            attngraph.sweep(g, many, reduce_slowly_on_the_mark, client=client, trace=["X", "A", "Y"], chunk=3)
        for _ in range(600):  # cancelled tasks leave the scheduler shortly after (a loaded machine: seconds)
            left = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
            if left == 0:
                break
            time.sleep(0.05)
        assert left == 0


def test_what_reduce_returns_is_checked():
    """reduce() returning something else than a dict raised AttributeError ('float' object has
    no attribute 'items'); arrays of another shape for one input were broadcast into the
    total without a word. Both are one line naming the input now."""
    import pytest
    g = attngraph.new("mha-batched", seq=6, d_model=16, heads=4)
    data = dataset(5)
    with pytest.raises(TypeError, match=r"^sweep: reduce\(\) must return a dict of numbers or arrays, "
                                        r"got float for input 0$"):
        attngraph.sweep(g, data, lambda t: float(t["Y"].sum()), trace=False)
    sizes = iter([1, 1, 1, 4, 1])  # input 3 gives 4 numbers where the others give 1
    with pytest.raises(ValueError, match=r"^sweep: reduce\(\)'s 'y' has shape \(4,\) for input 3, \(1,\) before$"):
        attngraph.sweep(g, data, lambda t: {"y": np.full(next(sizes), t["Y"].sum())}, trace=False, chunk=2)
    res = attngraph.sweep(g, data, lambda t: {"y": t["Y"].astype(np.float64).sum(axis=0)}, trace=False, chunk=2)
    np.testing.assert_allclose(res.mean()["y"], np.mean([g.run(x)["Y"].astype(np.float64).sum(axis=0)
                                                         for x in data], axis=0), rtol=1e-12)
