// GatherElements: y[i0, ..., ir] = data[i0, ..., indices[i0, ..., ir], ..., ir], the index
// replacing the coordinate of `axis` (ONNX GatherElements; torch.gather, take_along_axis: a
// mixture of experts' chosen scores, a beam's kept tokens). Legend: data (d0, ..., dr);
// indices and y one shape of data's rank, no axis longer than data's (`axis` aside). An index is
// a whole number in [-d_axis, d_axis), negative from the end; one out of range is a ValueError
// naming it, as Gather's. indices gets no gradient; ddata[e's position] += dy[e], the elements
// in row-major order (a repeated position adds up). ScatterElements writes where this reads.
#pragma once
#include <vector>

#include "ops/common.hpp"
#include "ops/gather.hpp"

namespace attngraph::ops {
struct GatherElementsAttrs {
    int axis = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::GatherElementsAttrs, axis);

namespace attngraph::ops {

struct GatherElements {
    static constexpr const char* name = "GatherElements";
    static constexpr int min_inputs = 2, max_inputs = 2;
    static constexpr std::array<int, 1> no_grad_inputs{1};
    using Attrs = GatherElementsAttrs;

    /// Checks that indices fits data along `axis` (ScatterElements' rule too): data's rank, no
    /// axis longer than data's but `axis`.
    static void check_along_axis(int axis, const Shape& data, const Shape& indices) {
        if (data.empty()) throw ShapeError("data must have at least one axis, got a scalar");
        const std::size_t ax = normalize_axis(axis, data.size());
        if (indices.size() != data.size())
            throw ShapeError("indices (" + shape_str(indices) + ") must have data's rank " +
                             std::to_string(data.size()) + ", data is (" + shape_str(data) + ")");
        for (std::size_t d = 0; d < data.size(); ++d)
            if (d != ax && indices[d] > data[d])
                throw ShapeError("indices (" + shape_str(indices) + ") is longer than data (" + shape_str(data) +
                                 ") on axis " + std::to_string(d));
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        check_along_axis(a.axis, in[0], in[1]);
        return in[1];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "gather_elements(" + v[0] + ", " + v[1] + ", axis=" + std::to_string(a.axis) + ")";
    }

    /// The flat position in data that each element of indices names, in indices' row-major
    /// order: its own multi-index with the coordinate of `axis` replaced by the index. Throws
    /// ValueError on the first bad index.
    template <class T>
    static std::vector<std::size_t> targets(int axis, const Array<T>& data, const Array<T>& indices) {
        const Shape ds = shape_of(data), is = shape_of(indices);
        const std::size_t ax = normalize_axis(axis, ds.size());
        std::vector<std::size_t> pos = Gather::positions(indices, ds[ax], axis);
        const auto strides = row_major_strides(ds);
        std::vector<std::size_t> idx(is.size(), 0);  // the multi-index of element e, stepped
        for (std::size_t e = 0; e < pos.size(); ++e) {
            std::size_t off = 0;
            for (std::size_t d = 0; d < is.size(); ++d) off += (d == ax ? pos[e] : idx[d]) * strides[d];
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
        const std::vector<std::size_t> at = targets(a.axis, *in[0], *in[1]);
        const T* x = in[0]->data();
        T* y = out[0]->data();
        parallel_chunks(at.size(), grain_for(1), [&](std::size_t e0, std::size_t e1) {
            for (std::size_t e = e0; e < e1; ++e) y[e] = x[at[e]];
        });
    }

    // ddata[at[e]] += dy[e], e in order: one thread, so that a repeated position sums in the
    // same order at any thread count
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const std::vector<std::size_t> at = targets(a.axis, *in[0], *in[1]);
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        for (std::size_t e = 0; e < at.size(); ++e) dx[at[e]] += dy[e];
    }
};

}  // namespace attngraph::ops
