// Concat: joins x1, x2, ... along `axis`. Every input has the same shape except on that
// axis; seen as (outer, len_i, inner) around it, y is (outer, sum len_i, inner).
#pragma once
#include "engine/parallel.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct ConcatAttrs {
    int axis = -1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ConcatAttrs, axis);

namespace attngraph::ops {

struct Concat {
    static constexpr const char* name = "Concat";
    static constexpr int min_inputs = 1, max_inputs = -1;
    using Attrs = ConcatAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const std::size_t ax = normalize_axis(a.axis, in[0].size());
        Shape y = in[0];
        for (std::size_t i = 1; i < in.size(); ++i) {
            bool ok = in[i].size() == y.size();
            for (std::size_t d = 0; ok && d < y.size(); ++d) ok = d == ax || in[i][d] == y[d];
            if (!ok)
                throw ShapeError("input " + std::to_string(i) + " (" + shape_str(in[i]) + ") does not match input 0 (" +
                                 shape_str(in[0]) + ") outside axis " + std::to_string(a.axis));
            y[ax] += in[i][ax];
        }
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "concat(" + join(v, ", ") + (a.axis == -1 ? "" : ", axis=" + std::to_string(a.axis)) + ")";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape ys(out[0]->shape().begin(), out[0]->shape().end());
        const std::size_t ax = normalize_axis(a.axis, ys.size());
        std::size_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < ax; ++i) outer *= ys[i];
        for (std::size_t i = ax + 1; i < ys.size(); ++i) inner *= ys[i];
        const std::size_t row = ys[ax] * inner;
        T* y = out[0]->data();
        parallel_chunks(outer, grain_for(row), [&](std::size_t o0, std::size_t o1) {
            std::size_t offset = 0;
            for (const Array<T>* x : in) {
                const std::size_t len = x->shape()[ax] * inner;
                const T* xd = x->data();
                for (std::size_t o = o0; o < o1; ++o) std::copy(xd + o * len, xd + (o + 1) * len, y + o * row + offset);
                offset += len;
            }
        });
    }

    // in the forward pass this was: copy x_i[o, :] into y[o, offset_i : offset_i + len_i]
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Shape ys(dout[0]->shape().begin(), dout[0]->shape().end());
        const std::size_t ax = normalize_axis(a.axis, ys.size());
        std::size_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < ax; ++i) outer *= ys[i];
        for (std::size_t i = ax + 1; i < ys.size(); ++i) inner *= ys[i];
        const std::size_t row = ys[ax] * inner;
        const T* dy = dout[0]->data();
        std::size_t offset = 0;
        for (std::size_t k = 0; k < in.size(); ++k) {
            const std::size_t len = in[k]->shape()[ax] * inner;
            if (din[k]) {
                T* dx = din[k]->data();
                parallel_chunks(outer, grain_for(len), [&](std::size_t o0, std::size_t o1) {
                    for (std::size_t o = o0; o < o1; ++o)
                        for (std::size_t i = 0; i < len; ++i) dx[o * len + i] += dy[o * row + offset + i];
                });
            }
            offset += len;
        }
    }
};

}  // namespace attngraph::ops
