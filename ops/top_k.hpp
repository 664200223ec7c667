// TopK: the k largest (or smallest) entries of x along `axis` and their positions (ONNX TopK,
// torch.topk: a mixture-of-experts router's top experts). Output 0 ("name:0") holds the values,
// output 1 ("name:1") the positions as whole numbers in the graph's float type (int64 in ONNX);
// both are x's shape with the axis cut to k, 1 <= k <= its length. The order is always sorted:
// largest first (smallest first with largest = 0); of equal values the lower position comes
// first (ONNX's rule); a NaN counts as larger than every number (torch.topk's order). The values
// pass their gradient to the positions they came from; the positions get none.
// Legend: x (outer, len, inner) around the axis; each output (outer, k, inner).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/attrs.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct TopKAttrs {
    Required<int> k;
    int axis = -1;
    int largest = 1;
    int sorted = 1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::TopKAttrs, k, axis, largest, sorted);

namespace attngraph::ops {

struct TopK {
    static constexpr const char* name = "TopK";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = TopKAttrs;

    static std::vector<Shape> infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        if (in[0].empty()) throw ShapeError("x must have at least one axis, got a scalar");
        const std::size_t axis = normalize_axis(a.axis, in[0].size());
        const int k = a.k;
        if (k < 1 || static_cast<std::size_t>(k) > in[0][axis])
            throw ShapeError("k = " + std::to_string(k) + " is not in [1, " + std::to_string(in[0][axis]) +
                             "], the length of axis " + std::to_string(a.axis) + " of x (" + shape_str(in[0]) + ")");
        if (a.largest != 0 && a.largest != 1)
            throw ShapeError("largest must be 0 or 1, got " + std::to_string(a.largest));
        if (a.sorted != 0 && a.sorted != 1) throw ShapeError("sorted must be 0 or 1, got " + std::to_string(a.sorted));
        Shape y = in[0];
        y[axis] = static_cast<std::size_t>(k);
        return {y, y};
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "topk(" + v[0] + ", k=" + std::to_string(a.k.value) + ", axis=" + std::to_string(a.axis) +
               (a.largest ? "" : ", smallest") + ")";
    }

    /// The positions along each line of x of its k picks, in output order: pos[line·k + j].
    template <class T>
    static std::vector<std::size_t> picks(const Attrs& a, const Array<T>& x, AxisLayout& l) {
        l = axis_layout(shape_of(x), normalize_axis(a.axis, x.dimension()));
        const auto k = static_cast<std::size_t>(a.k.value);
        const T* xs = x.data();
        const bool largest = a.largest != 0;
        std::vector<std::size_t> pos(l.outer * l.inner * k);
        parallel_chunks(l.outer * l.inner, grain_for(l.len * 8), [&](std::size_t r0, std::size_t r1) {
            std::vector<std::size_t> order(l.len);
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xr = xs + (r / l.inner) * l.len * l.inner + r % l.inner;
                // a strict order on positions: NaN above every number, equal values by position
                auto before = [&](std::size_t i, std::size_t j) {
                    const T u = xr[i * l.inner], v = xr[j * l.inner];
                    const bool un = std::isnan(u), vn = std::isnan(v);
                    if (un || vn) return un != vn ? (largest ? un : vn) : i < j;
                    if (u != v) return largest ? u > v : u < v;
                    return i < j;
                };
                for (std::size_t i = 0; i < l.len; ++i) order[i] = i;
                std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(), before);
                std::copy(order.begin(), order.begin() + static_cast<long>(k), pos.begin() + static_cast<long>(r * k));
            }
        });
        return pos;
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        AxisLayout l;
        const std::vector<std::size_t> pos = picks(a, *in[0], l);
        const auto k = static_cast<std::size_t>(a.k.value);
        const T* x = in[0]->data();
        T* values = out[0]->data();
        T* positions = out[1]->data();
        for (std::size_t r = 0; r < l.outer * l.inner; ++r) {
            const std::size_t o = r / l.inner, c = r % l.inner;
            for (std::size_t j = 0; j < k; ++j) {
                const std::size_t p = pos[r * k + j], at = (o * k + j) * l.inner + c;
                values[at] = x[(o * l.len + p) * l.inner + c];
                positions[at] = static_cast<T>(p);
            }
        }
    }

    // in the forward pass this was: values[o, j, c] = x[o, pos_j, c]. dx[o, pos_j, c] +=
    // dvalues[o, j, c] (the k positions of a line are distinct); the positions pass nothing.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0] || dout.empty() || !dout[0]) return;
        AxisLayout l;
        const std::vector<std::size_t> pos = picks(a, *in[0], l);
        const auto k = static_cast<std::size_t>(a.k.value);
        const T* dv = dout[0]->data();
        T* dx = din[0]->data();
        for (std::size_t r = 0; r < l.outer * l.inner; ++r) {
            const std::size_t o = r / l.inner, c = r % l.inner;
            for (std::size_t j = 0; j < k; ++j)
                dx[(o * l.len + pos[r * k + j]) * l.inner + c] += dv[(o * k + j) * l.inner + c];
        }
    }
};

}  // namespace attngraph::ops
