// ScatterElements: y = data with updates written at the positions indices name along `axis`
// (ONNX ScatterElements, reduction "none"; torch.Tensor.scatter, index_copy and the slice
// assignments torch exports with it: a KV cache written at its positions). Legend: data and y
// (d0, ..., dr); indices and updates one shape of the same rank, each axis no longer than
// data's (`axis` aside). Element e of updates, at multi-index (i0, ..., ir), goes to y at
// (i0, ..., indices[e], ..., ir), indices[e] replacing the axis coordinate: a whole number in
// [-d_axis, d_axis), negative from the end; one out of range is a ValueError naming it (as
// Gather's). Elements are written in row-major order, so where two name one position the later
// one is kept (ONNX leaves that order open). indices gets no gradient; ddata is dy where no
// update landed, dupdates[e] is dy at e's position for the update that was kept there, else 0.
#pragma once
#include <vector>

#include "ops/common.hpp"
#include "ops/gather.hpp"

namespace attngraph::ops {
struct ScatterElementsAttrs {
    int axis = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ScatterElementsAttrs, axis);

namespace attngraph::ops {

struct ScatterElements {
    static constexpr const char* name = "ScatterElements";
    static constexpr int min_inputs = 3, max_inputs = 3;
    static constexpr std::array<int, 1> no_grad_inputs{1};
    using Attrs = ScatterElementsAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape &data = in[0], &indices = in[1], &updates = in[2];
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
        return "scatter_elements(" + v[0] + ", " + v[1] + ", " + v[2] + ", axis=" + std::to_string(a.axis) + ")";
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
        const T* x = in[0]->data();
        const T* u = in[2]->data();
        T* y = out[0]->data();
        const std::size_t n = in[0]->size();
        parallel_chunks(n, grain_for(1), [&](std::size_t i0, std::size_t i1) { std::copy(x + i0, x + i1, y + i0); });
        for (std::size_t e = 0; e < at.size(); ++e) y[at[e]] = u[e];  // in order: the last write stays
    }

    // in the forward pass this was: y = data, then y[at[e]] = updates[e] for e in order.
    // ddata += dy where nothing was written; dupdates[e] += dy[at[e]] for the e kept there.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const std::vector<std::size_t> at = targets(a, *in[0], *in[1]);
        const std::size_t n = in[0]->size();
        std::vector<std::size_t> writer(n, at.size());  // the update kept at each position (none: at.size())
        for (std::size_t e = 0; e < at.size(); ++e) writer[at[e]] = e;
        const T* dy = dout[0]->data();
        if (din[0]) {
            T* dx = din[0]->data();
            parallel_chunks(n, grain_for(2), [&](std::size_t i0, std::size_t i1) {
                for (std::size_t i = i0; i < i1; ++i)
                    if (writer[i] == at.size()) dx[i] += dy[i];
            });
        }
        if (din[2]) {
            T* du = din[2]->data();
            for (std::size_t e = 0; e < at.size(); ++e)
                if (writer[at[e]] == e) du[e] += dy[at[e]];
        }
    }
};

}  // namespace attngraph::ops
