// Slice: y = x[..., start:end, ...] on one axis (a head's columns of a fused QKV projection).
// Legend: x seen as (outer, len, inner) around `axis`; y is (outer, end - start, inner).
// start and end may be negative (counted from the end, as in Python).
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct SliceAttrs {
    int axis = -1;
    Required<int> start;
    Required<int> end;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SliceAttrs, axis, start, end);

namespace attngraph::ops {

struct Slice {
    static constexpr const char* name = "Slice";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SliceAttrs;

    struct Range {
        std::size_t axis, begin, end;
    };
    static Range range(const Attrs& a, const Shape& x) {
        if (x.empty()) throw ShapeError("cannot slice a scalar");
        const std::size_t ax = normalize_axis(a.axis, x.size());
        const long len = static_cast<long>(x[ax]);
        const long b = a.start.value < 0 ? a.start.value + len : a.start.value;
        const long e = a.end.value < 0 ? a.end.value + len : a.end.value;
        if (b < 0 || e > len || b >= e)
            throw ShapeError("range [" + std::to_string(a.start.value) + ", " + std::to_string(a.end.value) +
                             ") is empty or outside axis " + std::to_string(a.axis) + " of length " +
                             std::to_string(len) + " of x (" + shape_str(x) + ")");
        return {ax, static_cast<std::size_t>(b), static_cast<std::size_t>(e)};
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Range r = range(a, in[0]);
        Shape y = in[0];
        y[r.axis] = r.end - r.begin;
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return v[0] + "[" + std::to_string(a.start.value) + ":" + std::to_string(a.end.value) +
               (a.axis == -1 ? "" : ", axis=" + std::to_string(a.axis)) + "]";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Range r = range(a, shape_of(*in[0]));
        const AxisLayout l = axis_layout(shape_of(*in[0]), r.axis);
        const std::size_t row = (r.end - r.begin) * l.inner;
        const T* x = in[0]->data();
        T* y = out[0]->data();
        for (std::size_t o = 0; o < l.outer; ++o) {
            const T* src = x + (o * l.len + r.begin) * l.inner;
            std::copy(src, src + row, y + o * row);
        }
    }

    // in the forward pass this was: y = x[start:end] on axis; dx[start:end] += dy.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const Range r = range(a, shape_of(*in[0]));
        const AxisLayout l = axis_layout(shape_of(*in[0]), r.axis);
        const std::size_t row = (r.end - r.begin) * l.inner;
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        for (std::size_t o = 0; o < l.outer; ++o) {
            T* dst = dx + (o * l.len + r.begin) * l.inner;
            for (std::size_t k = 0; k < row; ++k) dst[k] += dy[o * row + k];
        }
    }
};

}  // namespace attngraph::ops
