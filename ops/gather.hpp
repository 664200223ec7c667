// Gather: y = data taken along `axis` at the positions in `indices` (ONNX Gather): with data
// (d0, ..., d_axis, ..., dr) and indices of shape I, y is (d0, ..., d_axis-1, I..., d_axis+1,
// ..., dr). An index is a whole number in [-d_axis, d_axis); a negative one counts from the end.
// Indices are values, known only when the graph runs: an index out of range (or not a whole
// number) is a ValueError naming the index and its position, and the executor adds the node.
// indices gets no gradient. Legend: data (outer, len, inner) around axis; indices (count).
#pragma once
#include <cmath>

#include "ops/common.hpp"

namespace attngraph::ops {
struct GatherAttrs {
    int axis = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::GatherAttrs, axis);

namespace attngraph::ops {

struct Gather {
    static constexpr const char* name = "Gather";
    static constexpr int min_inputs = 2, max_inputs = 2;
    static constexpr std::array<int, 1> no_grad_inputs{1};
    using Attrs = GatherAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape& data = in[0];
        if (data.empty()) throw ShapeError("data must have at least one axis, got a scalar");
        const std::size_t axis = normalize_axis(a.axis, data.size());
        Shape y(data.begin(), data.begin() + static_cast<long>(axis));
        y.insert(y.end(), in[1].begin(), in[1].end());
        y.insert(y.end(), data.begin() + static_cast<long>(axis) + 1, data.end());
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "gather(" + v[0] + ", " + v[1] + ", axis=" + std::to_string(a.axis) + ")";
    }

    /// The position in [0, len) of an index that positions() accepted.
    template <class T>
    static std::size_t position(T v, std::size_t len) noexcept {
        const long i = static_cast<long>(v);
        return static_cast<std::size_t>(i < 0 ? i + static_cast<long>(len) : i);
    }

    /// Checks indices [p0, p1): each a whole number in [-len, len); throws ValueError on the
    /// first bad one. With pos, writes their positions into pos[p0 .. p1) as well.
    template <class T, class P = std::size_t>
    static void positions(const Array<T>& indices, std::size_t len, int axis, std::size_t p0, std::size_t p1,
                          P* pos = nullptr) {
        for (std::size_t p = p0; p < p1; ++p) {
            const std::size_t at = checked_position(indices, p, len, axis);
            if (pos) pos[p] = static_cast<P>(at);
        }
    }

    /// The position in [0, len) of indices[p], a whole number in [-len, len); ValueError naming
    /// it, its place and the axis otherwise (ScatterND checks its tuples' entries with it too).
    template <class T>
    static std::size_t checked_position(const Array<T>& indices, std::size_t p, std::size_t len, int axis) {
        const T v = indices.data()[p];
        const double n = static_cast<double>(len);
        // a whole number in [-n, n) (NaN fails the comparisons)
        if (!(static_cast<double>(v) >= -n && static_cast<double>(v) < n && std::trunc(v) == v))
            bad_index(indices, len, axis, p);
        return position(v, len);
    }

    /// The indices as positions in [0, len); throws ValueError on the first bad one.
    template <class T>
    static std::vector<std::size_t> positions(const Array<T>& indices, std::size_t len, int axis) {
        std::vector<std::size_t> pos(indices.size());
        positions(indices, len, axis, 0, pos.size(), pos.data());
        return pos;
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const AxisLayout l = axis_layout(shape_of(*in[0]), normalize_axis(a.axis, in[0]->dimension()));
        const std::vector<std::size_t> pos = positions(*in[1], l.len, a.axis);
        const std::size_t count = pos.size();
        const T* x = in[0]->data();
        T* y = out[0]->data();
        parallel_chunks(l.outer * count, grain_for(l.inner), [&](std::size_t r0, std::size_t r1) {
            std::size_t o = r0 / count, p = r0 % count;  // r = o·count + p, stepped
            for (std::size_t r = r0; r < r1; ++r) {
                const T* src = x + (o * l.len + pos[p]) * l.inner;
                if (l.inner == 1)  // a gather along the last axis (a bias table's rows by index)
                    y[r] = *src;
                else
                    std::copy(src, src + l.inner, y + r * l.inner);
                if (++p == count) p = 0, ++o;
            }
        });
    }

    // in the forward pass this was: y[o, p, k] = data[o, indices[p], k]. ddata[o, indices[p], k]
    // += dy[o, p, k], p in order (a repeated index adds up); chunks over o write disjoint rows.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const AxisLayout l = axis_layout(shape_of(*in[0]), normalize_axis(a.axis, in[0]->dimension()));
        const std::vector<std::size_t> pos = positions(*in[1], l.len, a.axis);
        const std::size_t count = pos.size();
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        parallel_chunks(l.outer, grain_for(count * l.inner), [&](std::size_t o0, std::size_t o1) {
            for (std::size_t o = o0; o < o1; ++o)
                for (std::size_t p = 0; p < count; ++p) {
                    const T* g = dy + (o * count + p) * l.inner;
                    T* d = dx + (o * l.len + pos[p]) * l.inner;
                    for (std::size_t k = 0; k < l.inner; ++k) d[k] += g[k];
                }
        });
    }

private:
    template <class T>
    [[noreturn]] static void bad_index(const Array<T>& indices, std::size_t len, int axis, std::size_t p) {
        const T v = indices.data()[p];
        const bool whole = std::isfinite(v) && std::trunc(v) == v;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
        const long n = static_cast<long>(len);
        throw ValueError(std::string("index ") + buf + " at flat position " + std::to_string(p) + " of indices (" +
                         shape_str(shape_of(indices)) + ") is " + (whole ? "out of range" : "not a whole number") +
                         " for axis " + std::to_string(axis) + " of size " + std::to_string(len) +
                         " (allowed: " + std::to_string(-n) + " to " + std::to_string(n - 1) + ")");
    }
};

}  // namespace attngraph::ops
