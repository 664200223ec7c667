#pragma once
// The machinery of the elementwise ops (Neg, Exp, ..., Mul, Sub, ..., Where): broadcast walks,
// xsimd loops over fixed chunks, and two op bases an op file fills with its arithmetic.
//
// UnaryOp<Op, Attrs>: y = f(x). Op gives apply(attrs, batch) (xsimd; every element, the tail too, goes
// through the batch function, so a value does not depend on where a chunk starts) and
// derivative(attrs, x, y) = dy/dx.
// BinaryOp<Op, Attrs>: y = f(a, b) with numpy broadcasting. Op gives apply(attrs, a, b) (scalar) and,
// unless it has no gradient, partial_a / partial_b (attrs, a, b, y).
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <xsimd/xsimd.hpp>

#include "ops/common.hpp"

namespace attngraph::ops {

// ---- broadcast walks -----------------------------------------------------------------

/// Calls f(i, offsets, count, steps) for the runs along the last axis that make up flat
/// indices [i0, i1) of shape `ys`: elements i .. i + count - 1, where operand k (broadcast
/// with strides[k], from broadcast_strides) reads offsets[k] + j·steps[k] for element i + j.
/// The per-element odometer of a plain walk costs more than the arithmetic it feeds; a run
/// needs one step per operand and element.
template <std::size_t K, class F>
void broadcast_runs(const Shape& ys, const std::array<std::vector<std::size_t>, K>& strides, std::size_t i0,
                    std::size_t i1, F&& f) {
    const std::size_t rank = ys.size();
    if (i0 >= i1) return;
    std::array<std::size_t, K> off{}, steps{};
    if (rank == 0) {  // a scalar: one element
        f(i0, off, std::size_t(1), steps);
        return;
    }
    boost::container::small_vector<std::size_t, 8> idx(rank, 0);
    std::size_t rem = i0;
    for (std::size_t d = rank; d-- > 0;) {
        idx[d] = rem % ys[d];
        rem /= ys[d];
        for (std::size_t k = 0; k < K; ++k) off[k] += idx[d] * strides[k][d];
    }
    const std::size_t last = rank - 1, width = ys[last];
    for (std::size_t k = 0; k < K; ++k) steps[k] = strides[k][last];
    for (std::size_t i = i0;;) {
        const std::size_t count = std::min(width - idx[last], i1 - i);
        f(i, off, count, steps);
        i += count;
        if (i >= i1) return;
        // the start of the next row: the last axis back to 0, carrying into the ones before
        for (std::size_t k = 0; k < K; ++k) off[k] -= idx[last] * steps[k];
        idx[last] = 0;
        for (std::size_t d = last; d-- > 0;) {
            for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
            if (++idx[d] < ys[d]) break;
            for (std::size_t k = 0; k < K; ++k) off[k] -= idx[d] * strides[k][d];
            idx[d] = 0;
        }
    }
}

/// Calls f(i, offsets) for flat indices i in [i0, i1) of shape `ys`, where offsets[k] is the
/// element of operand k (broadcast with strides[k], from broadcast_strides) that i reads.
template <std::size_t K, class F>
void broadcast_walk(const Shape& ys, const std::array<std::vector<std::size_t>, K>& strides, std::size_t i0,
                    std::size_t i1, F&& f) {
    broadcast_runs(
        ys, strides, i0, i1,
        [&](std::size_t i, std::array<std::size_t, K> off, std::size_t count, const std::array<std::size_t, K>& steps) {
            for (std::size_t j = 0; j < count; ++j) {
                f(i + j, std::as_const(off));
                for (std::size_t k = 0; k < K; ++k) off[k] += steps[k];
            }
        });
}

/// The shape all of `in` broadcast to; ShapeError naming every shape otherwise.
inline Shape broadcast_all(const std::vector<Shape>& in) {
    Shape s = in.at(0);
    try {
        for (std::size_t k = 1; k < in.size(); ++k) s = broadcast_shapes(s, in[k]);
    } catch (const ShapeError&) {
        std::vector<std::string> parts;
        for (const auto& x : in) parts.push_back("(" + shape_str(x) + ")");
        throw ShapeError("shapes " + join(parts, ", ") + " do not broadcast");
    }
    return s;
}

/// dx += g[i] for every flat i of shape `ys`, summed into x's (broadcast) element: the
/// reduction over broadcast axes, in the order of y's elements (a fixed order).
template <class T, class G>
void accumulate_broadcast(const Shape& xs, const Shape& ys, T* dx, G&& g) {
    const std::size_t n = element_count(ys);
    if (xs == ys) {
        parallel_chunks(n, grain_for(4), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) dx[i] += g(i);
        });
        return;
    }
    const std::array<std::vector<std::size_t>, 1> s{broadcast_strides(xs, ys)};
    broadcast_walk(ys, s, 0, n, [&](std::size_t i, const std::array<std::size_t, 1>& off) { dx[off[0]] += g(i); });
}

// ---- xsimd maps ----------------------------------------------------------------------

/// y[i] = f(batch)(x[i]) over fixed chunks; the tail of a chunk is padded into a full batch.
template <class T, class F>
void simd_map(const T* x, T* y, std::size_t n, F&& f) {
    using B = xsimd::batch<T>;
    constexpr std::size_t W = B::size;
    parallel_chunks(n, grain_for(8), [&](std::size_t i0, std::size_t i1) {
        std::size_t i = i0;
        for (; i + W <= i1; i += W) f(B::load_unaligned(x + i)).store_unaligned(y + i);
        if (i < i1) {
            alignas(64) T buf[W];
            for (std::size_t k = 0; k < W; ++k) buf[k] = i + k < i1 ? x[i + k] : x[i];
            f(B::load_unaligned(buf)).store_unaligned(buf);
            for (std::size_t k = 0; i + k < i1; ++k) y[i + k] = buf[k];
        }
    });
}

/// f applied to each lane of x, through scalars: for the ops whose result the C library gives
/// exactly (or within its ulp) and xsimd's batch functions do not on every target (xsimd 8's
/// SSE2 floor and ceil give +0 for −0 and for ceil(−0.5)). The same bits wherever an element
/// sits in a chunk.
template <class B, class F>
B lanewise(const B& x, F&& f) {
    using T = typename B::value_type;
    alignas(64) T xs[B::size];
    x.store_aligned(xs);
    for (std::size_t k = 0; k < B::size; ++k) xs[k] = f(xs[k]);
    return B::load_aligned(xs);
}

// ---- op bases ------------------------------------------------------------------------

/// y = f(x), elementwise; x and y have one shape.
template <class Op, class A>
struct UnaryOp {
    static constexpr int min_inputs = 1, max_inputs = 1;

    static Shape infer_shape(const A&, const std::vector<Shape>& in) { return in[0]; }

    template <class T>
    static void forward(const A& attrs, In<T> in, Out<T> out) {
        simd_map(in[0]->data(), out[0]->data(), in[0]->size(), [&](const auto& x) { return Op::apply(attrs, x); });
    }

    // in the forward pass this was: y = f(x). dx += dy · f'(x) (f' from x and y).
    template <class T>
    static void backward(const A& attrs, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const T* x = in[0]->data();
        const T* y = out[0]->data();
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        parallel_chunks(in[0]->size(), grain_for(8), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) dx[i] += dy[i] * Op::derivative(attrs, x[i], y[i]);
        });
    }
};

/// A step function y = f(x) (Floor, Ceil, Round, Sign): piecewise constant, so x gets no
/// gradient (torch's floor, ceil, round and sign give 0; here the slot has none, as a
/// comparison's).
template <class Op, class A>
struct StepOp : UnaryOp<Op, A> {
    static constexpr std::array<int, 1> no_grad_inputs{0};

    template <class T>
    static void backward(const A&, In<T>, In<T>, In<T>, Out<T>) {}
};

/// y = f(a, b), elementwise with numpy broadcasting.
template <class Op, class A>
struct BinaryOp {
    static constexpr int min_inputs = 2, max_inputs = 2;

    static Shape infer_shape(const A&, const std::vector<Shape>& in) { return broadcast_shapes(in[0], in[1]); }

    template <class T>
    static void forward(const A& attrs, In<T> in, Out<T> out) {
        const Shape ys = shape_of(*out[0]), as = shape_of(*in[0]), bs = shape_of(*in[1]);
        const T* a = in[0]->data();
        const T* b = in[1]->data();
        T* y = out[0]->data();
        const std::size_t n = out[0]->size();
        if (as == ys && bs == ys) {
            parallel_chunks(n, grain_for(1), [&](std::size_t i0, std::size_t i1) {
                for (std::size_t i = i0; i < i1; ++i) y[i] = Op::apply(attrs, a[i], b[i]);
            });
            return;
        }
        const std::array<std::vector<std::size_t>, 2> s{broadcast_strides(as, ys), broadcast_strides(bs, ys)};
        parallel_chunks(n, grain_for(4), [&](std::size_t i0, std::size_t i1) {
            broadcast_runs(ys, s, i0, i1,
                           [&](std::size_t i, const std::array<std::size_t, 2>& off, std::size_t count,
                               const std::array<std::size_t, 2>& step) {
                               const T* ar = a + off[0];
                               const T* br = b + off[1];
                               T* yr = y + i;
                               // the common runs with their steps known, so that the loop vectorises
                               if (step[0] == 1 && step[1] == 1)
                                   for (std::size_t j = 0; j < count; ++j) yr[j] = Op::apply(attrs, ar[j], br[j]);
                               else if (step[0] == 1 && step[1] == 0)
                                   for (std::size_t j = 0; j < count; ++j) yr[j] = Op::apply(attrs, ar[j], *br);
                               else if (step[0] == 0 && step[1] == 1)
                                   for (std::size_t j = 0; j < count; ++j) yr[j] = Op::apply(attrs, *ar, br[j]);
                               else
                                   for (std::size_t j = 0; j < count; ++j)
                                       yr[j] = Op::apply(attrs, ar[j * step[0]], br[j * step[1]]);
                           });
        });
    }

    // in the forward pass this was: y = f(a, b) (broadcast). da (db) sums dy · ∂f/∂a (∂f/∂b)
    // over the axes a (b) was broadcast along, in the order of y's elements.
    template <class T>
    static void backward(const A& attrs, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        const Shape ys = shape_of(*out[0]), as = shape_of(*in[0]), bs = shape_of(*in[1]);
        const T* a = in[0]->data();
        const T* b = in[1]->data();
        const T* y = out[0]->data();
        const T* dy = dout[0]->data();
        const std::size_t n = out[0]->size();
        // the operands' values at each output element
        std::vector<T> av(n), bv(n);
        const std::array<std::vector<std::size_t>, 2> s{broadcast_strides(as, ys), broadcast_strides(bs, ys)};
        broadcast_walk(ys, s, 0, n, [&](std::size_t i, const std::array<std::size_t, 2>& off) {
            av[i] = a[off[0]];
            bv[i] = b[off[1]];
        });
        if (din[0])
            accumulate_broadcast(as, ys, din[0]->data(),
                                 [&](std::size_t i) { return dy[i] * Op::partial_a(attrs, av[i], bv[i], y[i]); });
        if (din[1])
            accumulate_broadcast(bs, ys, din[1]->data(),
                                 [&](std::size_t i) { return dy[i] * Op::partial_b(attrs, av[i], bv[i], y[i]); });
    }
};

/// A comparison: y = (a ⋈ b) ? 1 : 0 with broadcasting; no gradient for either input.
template <class Op, class A>
struct CompareOp : BinaryOp<Op, A> {
    static constexpr std::array<int, 2> no_grad_inputs{0, 1};

    // y is piecewise constant in a and b: nothing to add
    template <class T>
    static void backward(const A&, In<T>, In<T>, In<T>, Out<T>) {}
};

}  // namespace attngraph::ops
