// ScatterElements: y = data with updates written at the positions indices name along `axis`
// (ONNX ScatterElements; torch.Tensor.scatter, index_copy and the slice assignments torch
// exports with it: a KV cache written at its positions; with `reduction` add, mul, max or min,
// scatter_add and scatter_reduce: a write combines with what is there). Legend: data and y
// (d0, ..., dr); indices and updates one shape of the same rank, each axis no longer than
// data's (`axis` aside). Element e of updates, at multi-index (i0, ..., ir), goes to y at
// (i0, ..., indices[e], ..., ir), indices[e] replacing the axis coordinate: a whole number in
// [-d_axis, d_axis), negative from the end; one out of range is a ValueError naming it (as
// Gather's). Elements are written in row-major order, so where two name one position the later
// one is kept (ONNX leaves that order open) and reductions round in that order. indices gets no
// gradient; ddata and dupdates are in ops/scatter_reduction.hpp (reduction none: ddata is dy
// where no update landed, dupdates[e] dy at e's position for the update kept there, else 0).
#pragma once
#include <vector>

#include "ops/common.hpp"
#include "ops/gather_elements.hpp"
#include "ops/scatter_reduction.hpp"

namespace attngraph::ops {
struct ScatterElementsAttrs {
    int axis = 0;
    std::string reduction = "none";  ///< none, add, mul, max, min (ops/scatter_reduction.hpp)
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ScatterElementsAttrs, axis, reduction);

namespace attngraph::ops {

struct ScatterElements {
    static constexpr const char* name = "ScatterElements";
    static constexpr int min_inputs = 3, max_inputs = 3;
    static constexpr std::array<int, 1> no_grad_inputs{1};
    using Attrs = ScatterElementsAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape &data = in[0], &indices = in[1], &updates = in[2];
        scatter::reduction(a.reduction);  // (a known one)
        if (indices != updates)
            throw ShapeError("indices (" + shape_str(indices) + ") and updates (" + shape_str(updates) +
                             ") must have one shape");
        GatherElements::check_along_axis(a.axis, data, indices);
        return data;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "scatter_elements(" + v[0] + ", " + v[1] + ", " + v[2] + ", axis=" + std::to_string(a.axis) +
               (a.reduction == "none" ? "" : ", reduction=" + a.reduction) + ")";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const std::vector<std::size_t> at = GatherElements::targets(a.axis, *in[0], *in[1]);  // (checks before writing)
        scatter::forward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(), in[0]->size(),
                         at, 1);
    }

    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        const std::vector<std::size_t> at = GatherElements::targets(a.axis, *in[0], *in[1]);
        scatter::backward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(),
                          dout[0]->data(), din[0] ? din[0]->data() : nullptr, din[2] ? din[2]->data() : nullptr,
                          in[0]->size(), at, 1);
    }
};

}  // namespace attngraph::ops
