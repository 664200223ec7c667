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
#include "ops/gather.hpp"
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
        if (data.empty()) throw ShapeError("data must have at least one axis, got a scalar");
        const std::size_t axis = normalize_axis(a.axis, data.size());
        if (indices != updates)
            throw ShapeError("indices (" + shape_str(indices) + ") and updates (" + shape_str(updates) +
                             ") must have one shape");
        if (indices.size() != data.size())
            throw ShapeError("indices (" + shape_str(indices) + ") must have data's rank " +
                             std::to_string(data.size()) + ", data is (" + shape_str(data) + ")");
        for (std::size_t d = 0; d < data.size(); ++d)
            if (d != axis && indices[d] > data[d])
                throw ShapeError("indices (" + shape_str(indices) + ") is longer than data (" + shape_str(data) +
                                 ") on axis " + std::to_string(d));
        return data;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "scatter_elements(" + v[0] + ", " + v[1] + ", " + v[2] + ", axis=" + std::to_string(a.axis) +
               (a.reduction == "none" ? "" : ", reduction=" + a.reduction) + ")";
    }

    /// The flat position in data of each update element, in the updates' row-major order.
    template <class T>
    static std::vector<std::size_t> targets(const Attrs& a, const Array<T>& data, const Array<T>& indices) {
        const Shape ds = shape_of(data), is = shape_of(indices);
        const std::size_t axis = normalize_axis(a.axis, ds.size());
        std::vector<std::size_t> pos = Gather::positions(indices, ds[axis], a.axis);
        const auto strides = row_major_strides(ds);
        std::vector<std::size_t> idx(is.size(), 0);  // the multi-index of element e, stepped
        for (std::size_t e = 0; e < pos.size(); ++e) {
            std::size_t off = 0;
            for (std::size_t d = 0; d < is.size(); ++d) off += (d == axis ? pos[e] : idx[d]) * strides[d];
            pos[e] = off;
            for (std::size_t d = is.size(); d-- > 0;) {
                if (++idx[d] < is[d]) break;
                idx[d] = 0;
            }
        }
        return pos;
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const std::vector<std::size_t> at = targets(a, *in[0], *in[1]);  // (checks before writing)
        scatter::forward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(), in[0]->size(),
                         at, 1);
    }

    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        const std::vector<std::size_t> at = targets(a, *in[0], *in[1]);
        scatter::backward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(),
                          dout[0]->data(), din[0] ? din[0]->data() : nullptr, din[2] ? din[2]->data() : nullptr,
                          in[0]->size(), at, 1);
    }
};

}  // namespace attngraph::ops
