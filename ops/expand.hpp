// Expand: y = x broadcast to `shape` (ONNX Expand: the result is x's shape and `shape`
// broadcast together, so a 1 in `shape` keeps x's axis). Legend: x broadcasts to y.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ExpandAttrs {
    Required<std::vector<int>> shape;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ExpandAttrs, shape);

namespace attngraph::ops {

struct Expand {
    static constexpr const char* name = "Expand";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = ExpandAttrs;

    static Shape target(const Attrs& a) {
        Shape s;
        for (int d : a.shape.value) {
            if (d < 0) throw ShapeError("shape entry " + std::to_string(d) + " is negative");
            s.push_back(static_cast<std::size_t>(d));
        }
        return s;
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape t = target(a);
        try {
            return broadcast_shapes(in[0], t);
        } catch (const ShapeError&) {
            throw ShapeError("x (" + shape_str(in[0]) + ") does not broadcast to shape [" + shape_str(t) + "]");
        }
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::vector<std::string> parts;
        for (int d : a.shape.value) parts.push_back(std::to_string(d));
        return "expand(" + v[0] + ", [" + join(parts, ",") + "])";
    }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const Shape ys = shape_of(*out[0]);
        const std::array<std::vector<std::size_t>, 1> s{broadcast_strides(shape_of(*in[0]), ys)};
        const T* x = in[0]->data();
        T* y = out[0]->data();
        parallel_chunks(out[0]->size(), grain_for(4), [&](std::size_t i0, std::size_t i1) {
            broadcast_walk(ys, s, i0, i1,
                           [&](std::size_t i, const std::array<std::size_t, 1>& off) { y[i] = x[off[0]]; });
        });
    }

    // in the forward pass this was: y = x broadcast. dx sums dy over the broadcast axes, in the
    // order of y's elements.
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const T* dy = dout[0]->data();
        accumulate_broadcast(shape_of(*in[0]), shape_of(*dout[0]), din[0]->data(),
                             [&](std::size_t i) { return dy[i]; });
    }
};

}  // namespace attngraph::ops
