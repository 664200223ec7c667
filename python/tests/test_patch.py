"""Activation patching from Python: arrays and hooks, downstream recomputed, gradients
through a patched value as a constant, bad patches. The seed's Wo is the identity and bo
zero, so Y = [head1.O | head2.O] (hand computation)."""
import threading

import numpy as np
import pytest

import attngraph


def test_array_patch_recomputes_downstream(seed_path, seed_values):
    g = attngraph.load(seed_path)
    for threads in (1, 2):
        r = g.run(trace=True, patch={"head2.A": np.full((3, 3), 1 / 3)}, threads=threads)
        # head2.O = mean of head2.V's rows = [1/3, 1/3]
        np.testing.assert_allclose(r["Y"][:, 2:], np.full((3, 2), 1 / 3), atol=1e-6)
        np.testing.assert_allclose(r["Y"][:, :2], np.array(seed_values["head1.O"]), atol=1e-5)
        np.testing.assert_allclose(r["head2.S"], np.array(seed_values["head2.S"]), atol=1e-5)
        assert r.patched == ["head2.A"]


def test_hooks_get_numpy_and_return_the_replacement(seed_path, seed_values):
    g = attngraph.load(seed_path)
    seen = []

    def zero(t):
        seen.append((t.copy(), threading.current_thread() is threading.main_thread()))
        return t * 0

    r = g.run(patch={"head2.O": zero}, threads=2)
    np.testing.assert_allclose(seen[0][0], np.array(seed_values["head2.O"]), atol=1e-5)
    np.testing.assert_array_equal(r["Y"][:, 2:], np.zeros((3, 2), np.float32))
    np.testing.assert_allclose(r["Y"][:, :2], np.array(seed_values["head1.O"]), atol=1e-5)
    # reversing the keys of head1's attention: head1.O rows become A[:, ::-1] @ V
    r = g.run(trace=True, patch={"head1.A": lambda t: t[:, ::-1]})
    a = np.array(seed_values["head1.A"])[:, ::-1]
    np.testing.assert_allclose(r["head1.O"], a @ np.array(seed_values["head1.V"]), atol=1e-5)


def test_hooks_run_one_at_a_time_and_exceptions_propagate(seed_path):
    g = attngraph.new("mha", seq=4, d_model=8, heads=4)
    active, most = [0], [0]
    lock = threading.Lock()

    def hook(t):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        s = sum(range(20000))  # Python work while holding the GIL
        with lock:
            active[0] -= 1
        return t + 0 * s

    heads = [n for n in g.names if n.endswith(".A")]
    assert len(heads) == 4
    g.run(patch={h: hook for h in heads}, threads=4)
    assert most[0] == 1

    class Boom(Exception):
        pass

    def bad(t):
        raise Boom("no")

    with pytest.raises(Boom):
        attngraph.load(seed_path).run(patch={"head1.A": bad}, threads=2)
    with pytest.raises(attngraph.ShapeError, match="head1.A"):
        attngraph.load(seed_path).run(patch={"head1.A": lambda t: t[:2]})


def test_bad_patches(seed_path):
    g = attngraph.load(seed_path)
    with pytest.raises(attngraph.GraphError, match="has no node named 'head9.A'"):
        g.run(patch={"head9.A": np.zeros((3, 3))})
    with pytest.raises(attngraph.ShapeError, match="outputs 3x3"):
        g.run(patch={"head2.A": np.zeros((2, 3))})
    with pytest.raises(attngraph.GraphError) as e:  # the hint in Python's spelling, not the CLI's --input
        g.run(patch={"X": np.zeros((3, 4))})
    assert str(e.value) == ("patch X: 'X' is an input tensor, not a node output "
                            "(replace it with inputs={'X': array})")
    with pytest.raises(attngraph.GraphError, match="node output"):
        g.run({"head1.A": np.zeros((3, 3))})


def test_gradients_treat_the_patched_value_as_a_constant(seed_path):
    g = attngraph.load(seed_path)
    uniform = np.full((3, 3), 1 / 3, np.float32)
    gr = g.grad(wrt=["head2.Wv", "head2.Wq", "head1.Wq"], patch={"head2.A": uniform})
    # L = sum(Y); Y[:, 2:] = A2 X Wv2 with A2 uniform: dL/dWv2[k][c] = sum_j X[j][k] = 2, 2, 1, 1
    np.testing.assert_allclose(gr["head2.Wv"], np.repeat([[2.0], [2.0], [1.0], [1.0]], 2, axis=1), atol=1e-5)
    # nothing flows through the constant to head2's queries
    assert not np.any(gr["head2.Wq"])
    clean = g.grad(wrt=["head2.Wq"])
    assert np.any(clean["head2.Wq"] != 0)
    # the same through a hook
    gh = g.grad(wrt=["head2.Wv"], patch={"head2.A": lambda t: uniform})
    np.testing.assert_array_equal(gh["head2.Wv"], gr["head2.Wv"])


def seed_y_with_head2(seed_values, a2):
    """The seed's Y (Wo = I, bo = 0: [head1.O | head2.O]) with head2.A replaced by `a2`, in numpy."""
    return np.hstack([np.array(seed_values["head1.O"]), np.asarray(a2, np.float64) @ np.array(seed_values["head2.V"])])


def test_hooks_returning_something_else_than_the_value(seed_path, seed_values):
    """A hook's result is checked as returned: not an array is a TypeError naming the hook, a
    value of another shape a ShapeError before it is copied (a huge one was a MemoryError
    from copying it first); a list or another dtype is converted."""
    g = attngraph.load(seed_path)
    for returned, name in ((None, "NoneType"), ("abc", "str"), ({"a": 1}, "dict")):
        with pytest.raises(TypeError, match=r"^patch hook of 'head2.A' returned %s, not a numeric array" % name):
            g.run(patch={"head2.A": lambda t, returned=returned: returned})
    huge = np.broadcast_to(np.float32(0), (200000, 200000))  # 160 GB as f32, no memory as a view
    with pytest.raises(attngraph.ShapeError, match=r"^patch hook of 'head2.A' returned 200000x200000, "
                                                   r"the node's output is 3x3$"):
        g.run(patch={"head2.A": lambda t: huge})
    with pytest.raises(attngraph.ShapeError, match="returned 3x3x1, the node's output is 3x3"):
        g.run(patch={"head2.A": lambda t: t[..., None]})
    with pytest.raises(TypeError, match="output_grads Y: expected a numeric numpy array, got NoneType"):
        g.grad(wrt=["Wo"], output_grads={"Y": None})
    uniform = [[1 / 3] * 3] * 3
    for hook in (lambda t: uniform, lambda t: np.asfortranarray(np.array(uniform, np.float64)),
                 lambda t: np.full((3, 6), 1 / 3, np.float16)[:, ::2]):
        np.testing.assert_allclose(g.run(patch={"head2.A": hook})["Y"], seed_y_with_head2(seed_values, uniform),
                                   atol=1e-3)
