// Where: y = a where cond is nonzero, else b; the three broadcast to y's shape (numpy rules,
// ONNX Where(condition, X, Y)). cond is 0/1 (a comparison's output) or any float: nonzero is
// true. cond gets no gradient. Legend: cond, a, b broadcast to y.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct WhereAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::WhereAttrs);

namespace attngraph::ops {

struct Where {
    static constexpr const char* name = "Where";
    static constexpr int min_inputs = 3, max_inputs = 3;
    static constexpr std::array<int, 1> no_grad_inputs{0};
    using Attrs = WhereAttrs;

    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return broadcast_all(in); }

    static std::string formula(const Attrs&, const std::vector<std::string>& v) {
        return "where(" + v[0] + ", " + v[1] + ", " + v[2] + ")";
    }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const Shape ys = shape_of(*out[0]);
        const std::array<std::vector<std::size_t>, 3> s{broadcast_strides(shape_of(*in[0]), ys),
                                                        broadcast_strides(shape_of(*in[1]), ys),
                                                        broadcast_strides(shape_of(*in[2]), ys)};
        const T* c = in[0]->data();
        const T* a = in[1]->data();
        const T* b = in[2]->data();
        T* y = out[0]->data();
        parallel_chunks(out[0]->size(), grain_for(4), [&](std::size_t i0, std::size_t i1) {
            broadcast_walk(ys, s, i0, i1, [&](std::size_t i, const std::array<std::size_t, 3>& off) {
                y[i] = c[off[0]] != T(0) ? a[off[1]] : b[off[2]];
            });
        });
    }

    // in the forward pass this was: y = cond ? a : b. da += dy where cond, db += dy elsewhere,
    // each summed over its broadcast axes in the order of y's elements.
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        const Shape ys = shape_of(*out[0]);
        const std::size_t n = out[0]->size();
        const T* dy = dout[0]->data();
        std::vector<char> take_a(n);
        const std::array<std::vector<std::size_t>, 1> sc{broadcast_strides(shape_of(*in[0]), ys)};
        const T* c = in[0]->data();
        broadcast_walk(ys, sc, 0, n,
                       [&](std::size_t i, const std::array<std::size_t, 1>& off) { take_a[i] = c[off[0]] != T(0); });
        if (din[1])
            accumulate_broadcast(shape_of(*in[1]), ys, din[1]->data(),
                                 [&](std::size_t i) { return take_a[i] ? dy[i] : T(0); });
        if (din[2])
            accumulate_broadcast(shape_of(*in[2]), ys, din[2]->data(),
                                 [&](std::size_t i) { return take_a[i] ? T(0) : dy[i]; });
    }
};

}  // namespace attngraph::ops
