#pragma once
// The machinery of ReduceSum, ReduceMean and ReduceMax (ONNX semantics): attributes, shape rule,
// and a walk over the reduced elements of each output element in a fixed (row-major) order,
// parallel over output elements, so every output is summed the same way at any thread count.
// Sums accumulate in double, for f32 graphs too.
// Legend: x (input) is reduced along `axes` to y; with keepdims the reduced axes stay as 1.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/common.hpp"

namespace attngraph::ops {

/// ONNX's reduce attributes (opset 18 takes `axes` as an input; here an attribute): no `axes`
/// (or an empty list) reduces every axis, unless noop_with_empty_axes = 1 (then y = x).
#define ATTNGRAPH_REDUCE_ATTRS(Name)          \
    struct Name {                             \
        std::optional<std::vector<int>> axes; \
        int keepdims = 1;                     \
        int noop_with_empty_axes = 0;         \
    };

/// The reduced axes of a rank-`rank` input (sorted, each once); ShapeError otherwise.
template <class A>
std::vector<bool> reduced_axes(const A& a, std::size_t rank) {
    std::vector<bool> reduced(rank, false);
    if (a.keepdims != 0 && a.keepdims != 1)
        throw ShapeError("keepdims must be 0 or 1, got " + std::to_string(a.keepdims));
    if (a.noop_with_empty_axes != 0 && a.noop_with_empty_axes != 1)
        throw ShapeError("noop_with_empty_axes must be 0 or 1, got " + std::to_string(a.noop_with_empty_axes));
    if (!a.axes || a.axes->empty()) {
        if (!a.noop_with_empty_axes) reduced.assign(rank, true);
        return reduced;
    }
    for (int axis : *a.axes) {
        const std::size_t d = normalize_axis(axis, rank);
        if (reduced[d]) throw ShapeError("axis " + std::to_string(axis) + " is listed twice in axes");
        reduced[d] = true;
    }
    return reduced;
}

template <class A>
Shape reduce_shape(const A& a, const Shape& x) {
    const std::vector<bool> reduced = reduced_axes(a, x.size());
    Shape y;
    for (std::size_t d = 0; d < x.size(); ++d) {
        if (!reduced[d])
            y.push_back(x[d]);
        else if (a.keepdims)
            y.push_back(1);
    }
    return y;
}

template <class A>
std::string reduce_formula(const char* fn, const A& a, const std::string& x) {
    std::string s = std::string(fn) + "(" + x;
    if (a.axes && !a.axes->empty()) {
        std::vector<std::string> parts;
        for (int axis : *a.axes) parts.push_back(std::to_string(axis));
        s += ", axes=[" + join(parts, ",") + "]";
    } else if (a.noop_with_empty_axes) {
        s += ", axes=[]";
    }
    if (!a.keepdims) s += ", keepdims=0";
    return s + ")";
}

/// Offsets of input x for each output element (`base`) and for each reduced element (`inner`,
/// row-major over the reduced axes): x's element (o, r) is x[base(o) + inner[r]].
struct ReduceWalk {
    std::vector<std::size_t> inner;
    Shape kept_shape;                      // sizes of the kept axes, in order
    std::vector<std::size_t> kept_stride;  // x's strides of those axes

    std::size_t base(std::size_t o) const {
        std::size_t off = 0;
        for (std::size_t d = kept_shape.size(); d-- > 0;) {
            off += (o % kept_shape[d]) * kept_stride[d];
            o /= kept_shape[d];
        }
        return off;
    }
};

inline ReduceWalk reduce_walk(const std::vector<bool>& reduced, const Shape& xs) {
    ReduceWalk w;
    std::vector<std::size_t> stride(xs.size(), 1);
    for (std::size_t d = xs.size(); d-- > 1;) stride[d - 1] = stride[d] * xs[d];
    Shape rs;
    std::vector<std::size_t> rstride;
    for (std::size_t d = 0; d < xs.size(); ++d) {
        if (reduced[d]) {
            rs.push_back(xs[d]);
            rstride.push_back(stride[d]);
        } else {
            w.kept_shape.push_back(xs[d]);
            w.kept_stride.push_back(stride[d]);
        }
    }
    const std::size_t count = element_count(rs);
    w.inner.resize(count);
    for (std::size_t r = 0; r < count; ++r) {
        std::size_t off = 0, rem = r;
        for (std::size_t d = rs.size(); d-- > 0;) {
            off += (rem % rs[d]) * rstride[d];
            rem /= rs[d];
        }
        w.inner[r] = off;
    }
    return w;
}

enum class ReduceKind { sum, mean, max };

/// y = sum / mean / max of x over the reduced axes.
template <ReduceKind kind, class A>
struct ReduceOp {
    static constexpr int min_inputs = 1, max_inputs = 1;

    static Shape infer_shape(const A& a, const std::vector<Shape>& in) { return reduce_shape(a, in[0]); }

    template <class T>
    static void forward(const A& a, In<T> in, Out<T> out) {
        const ReduceWalk w = reduce_walk(reduced_axes(a, in[0]->dimension()), shape_of(*in[0]));
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const std::size_t count = w.inner.size();
        parallel_chunks(out[0]->size(), grain_for(count), [&](std::size_t o0, std::size_t o1) {
            for (std::size_t o = o0; o < o1; ++o) {
                const T* xb = x + w.base(o);
                if constexpr (kind == ReduceKind::max) {
                    // a NaN is the maximum (numpy, PyTorch): std::max(m, NaN) would keep m
                    T m = -std::numeric_limits<T>::infinity();
                    for (std::size_t r = 0; r < count; ++r) {
                        const T v = xb[w.inner[r]];
                        if (m < v || v != v) m = v;
                        if (m != m) break;
                    }
                    y[o] = m;
                } else {
                    double s = 0;  // f32 too: a long sum stays accurate
                    for (std::size_t r = 0; r < count; ++r) s += static_cast<double>(xb[w.inner[r]]);
                    y[o] = static_cast<T>(kind == ReduceKind::mean ? s / static_cast<double>(count) : s);
                }
            }
        });
    }

    // in the forward pass this was: y[o] = Σ_r x[o, r] (sum), that / count (mean), max_r x[o, r]
    // (max; a NaN among them is the maximum). dx[o, r] += dy[o] (sum), dy[o] / count (mean); for
    // max, dy[o] goes to the first r where x[o, r] equals the maximum (ties: the first in
    // row-major order), or is NaN.
    template <class T>
    static void backward(const A& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const ReduceWalk w = reduce_walk(reduced_axes(a, in[0]->dimension()), shape_of(*in[0]));
        const T* x = in[0]->data();
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        const std::size_t count = w.inner.size();
        // each x element belongs to one output element: chunks over outputs write disjoint dx
        parallel_chunks(dout[0]->size(), grain_for(count), [&](std::size_t o0, std::size_t o1) {
            for (std::size_t o = o0; o < o1; ++o) {
                const std::size_t b = w.base(o);
                if constexpr (kind == ReduceKind::max) {
                    if (count == 0) continue;
                    // the first maximum, or the first NaN (the forward's maximum; PyTorch's max
                    // along an axis routes the gradient to it too)
                    std::size_t arg = 0;
                    for (std::size_t r = 1; r < count && x[b + w.inner[arg]] == x[b + w.inner[arg]]; ++r)
                        if (x[b + w.inner[r]] > x[b + w.inner[arg]] || x[b + w.inner[r]] != x[b + w.inner[r]]) arg = r;
                    dx[b + w.inner[arg]] += dy[o];
                } else {
                    const T g = kind == ReduceKind::mean ? dy[o] / static_cast<T>(count) : dy[o];
                    for (std::size_t r = 0; r < count; ++r) dx[b + w.inner[r]] += g;
                }
            }
        });
    }
};

/// ArgMax and ArgMin (ONNX's): y = the position along `axis` of the largest (smallest) x, the
/// first one where several tie (the last with select_last_index); a NaN counts as the extreme,
/// as numpy.argmax and numpy.argmin count it. keepdims (default 1) keeps the axis as 1. The
/// positions are whole numbers in the graph's float type; x gets no gradient (y is piecewise
/// constant). Legend: x (outer, len, inner) around the axis, y (outer, inner).
template <class A, bool largest>
struct ArgReduceOp {
    static constexpr int min_inputs = 1, max_inputs = 1;
    static constexpr std::array<int, 1> no_grad_inputs{0};

    static Shape infer_shape(const A& a, const std::vector<Shape>& in) {
        if (in[0].empty()) throw ShapeError("x must have at least one axis, got a scalar");
        if (a.keepdims != 0 && a.keepdims != 1)
            throw ShapeError("keepdims must be 0 or 1, got " + std::to_string(a.keepdims));
        const std::size_t axis = normalize_axis(a.axis, in[0].size());
        Shape y = in[0];
        if (a.keepdims)
            y[axis] = 1;
        else
            y.erase(y.begin() + static_cast<long>(axis));
        return y;
    }

    static std::string formula(const A& a, const std::vector<std::string>& v) {
        return std::string(largest ? "argmax(" : "argmin(") + v[0] + ", axis=" + std::to_string(a.axis) +
               (a.keepdims ? "" : ", keepdims=0") + (a.select_last_index ? ", select_last_index=1" : "") + ")";
    }

    template <class T>
    static void forward(const A& a, In<T> in, Out<T> out) {
        const AxisLayout l = axis_layout(shape_of(*in[0]), normalize_axis(a.axis, in[0]->dimension()));
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const bool last = a.select_last_index != 0;
        parallel_chunks(l.outer * l.inner, grain_for(l.len), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xr = x + (r / l.inner) * l.len * l.inner + r % l.inner;
                std::size_t best = 0;
                T b = xr[0];
                for (std::size_t i = 1; i < l.len; ++i) {
                    const T v = xr[i * l.inner];
                    // a NaN is the extreme: the first one stays (the last, with select_last_index)
                    const bool take = std::isnan(b)   ? last && std::isnan(v)
                                      : std::isnan(v) ? true
                                                      : (largest ? v > b : v < b) || (last && v == b);
                    if (take) best = i, b = v;
                }
                y[r] = static_cast<T>(best);
            }
        });
    }
};

}  // namespace attngraph::ops
