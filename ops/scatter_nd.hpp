// ScatterND: y = data with slices of updates written where index tuples point (ONNX ScatterND;
// torch's index_put and `cache[:, pos] = k` export with it; with `reduction` add, mul, max or
// min a write combines with what is there, index_put(accumulate=True) is add). Legend: data and
// y (d0, ..., dr-1); indices (i0, ..., iq-2, k), k <= r: each of its i0·…·iq-2 rows is a tuple
// naming a slice data[t0, ..., tk-1, :, ..., :] of shape (dk, ..., dr-1); updates is
// (i0, ..., iq-2, dk, ..., dr-1), one slice per tuple. A tuple entry tj is a whole number in
// [-dj, dj), negative from the end; one out of range is a ValueError naming it. Tuples are
// written in order, so where two name one slice the later one is kept (ONNX leaves that open)
// and reductions round in that order. indices gets no gradient; ddata and dupdates are in
// ops/scatter_reduction.hpp (reduction none: ddata is dy outside the written slices, dupdates
// the slice of dy each kept tuple wrote, 0 for a tuple overwritten later).
#pragma once
#include <vector>

#include "ops/common.hpp"
#include "ops/gather.hpp"
#include "ops/scatter_reduction.hpp"

namespace attngraph::ops {
struct ScatterNDAttrs {
    std::string reduction = "none";  ///< none, add, mul, max, min (ops/scatter_reduction.hpp)
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ScatterNDAttrs, reduction);

namespace attngraph::ops {

struct ScatterND {
    static constexpr const char* name = "ScatterND";
    static constexpr int min_inputs = 3, max_inputs = 3;
    static constexpr std::array<int, 1> no_grad_inputs{1};
    using Attrs = ScatterNDAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape &data = in[0], &indices = in[1], &updates = in[2];
        scatter::reduction(a.reduction);  // (a known one)
        if (data.empty()) throw ShapeError("data must have at least one axis, got a scalar");
        if (indices.empty() || indices.back() < 1 || indices.back() > data.size())
            throw ShapeError("indices (" + shape_str(indices) + ") must end in a tuple length from 1 to data's rank " +
                             std::to_string(data.size()));
        Shape want(indices.begin(), indices.end() - 1);
        want.insert(want.end(), data.begin() + static_cast<long>(indices.back()), data.end());
        if (updates != want)
            throw ShapeError("updates (" + shape_str(updates) + ") must be (" + shape_str(want) + ") for data (" +
                             shape_str(data) + ") and indices (" + shape_str(indices) + ")");
        return data;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "scatter_nd(" + v[0] + ", " + v[1] + ", " + v[2] +
               (a.reduction == "none" ? "" : ", reduction=" + a.reduction) + ")";
    }

    /// The flat offset in data of the slice each tuple names, in order; the slice's length.
    template <class T>
    static std::vector<std::size_t> targets(const Array<T>& data, const Array<T>& indices, std::size_t& slice) {
        const Shape ds = shape_of(data), is = shape_of(indices);
        const std::size_t k = is.back(), tuples = indices.size() / k;
        const auto strides = row_major_strides(ds);
        slice = strides[k - 1];  // the product of data's axes k, ..., r-1
        std::vector<std::size_t> at(tuples);
        for (std::size_t t = 0; t < tuples; ++t) {
            std::size_t off = 0;
            for (std::size_t j = 0; j < k; ++j)
                off += Gather::checked_position(indices, t * k + j, ds[j], static_cast<int>(j)) * strides[j];
            at[t] = off;
        }
        return at;
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        std::size_t slice = 0;
        const std::vector<std::size_t> at = targets(*in[0], *in[1], slice);  // (checks before writing)
        scatter::forward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(), in[0]->size(),
                         at, slice);
    }

    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T> out, In<T> dout, Out<T> din) {
        std::size_t slice = 0;
        const std::vector<std::size_t> at = targets(*in[0], *in[1], slice);
        scatter::backward(scatter::reduction(a.reduction), in[0]->data(), in[2]->data(), out[0]->data(),
                          dout[0]->data(), din[0] ? din[0]->data() : nullptr, din[2] ? din[2]->data() : nullptr,
                          in[0]->size(), at, slice);
    }
};

}  // namespace attngraph::ops
