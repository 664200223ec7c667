// Add: y = a + b, elementwise with numpy broadcasting (a bias such as ALiBi's -m·|i-j| table
// added to every batch of scores). Legend: a and b broadcast to y's shape.
#pragma once
#include <algorithm>

#include "ops/common.hpp"

namespace attngraph::ops {
struct AddAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::AddAttrs);

namespace attngraph::ops {

struct Add {
    static constexpr const char* name = "Add";
    static constexpr int min_inputs = 2, max_inputs = 2;
    using Attrs = AddAttrs;

    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return broadcast_shapes(in[0], in[1]); }

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + " + " + v[1]; }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const Shape ys = shape_of(*out[0]);
        const Shape as = shape_of(*in[0]), bs = shape_of(*in[1]);
        const T* a = in[0]->data();
        const T* b = in[1]->data();
        T* y = out[0]->data();
        const std::size_t n = out[0]->size();
        if (as == ys && bs == ys) {
            parallel_chunks(n, grain_for(1), [&](std::size_t i0, std::size_t i1) {
                for (std::size_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
            });
            return;
        }
        // a bias: one operand is y's shape, the other y's trailing axes (leading 1s allowed),
        // repeated along the rows
        auto trailing = [&](const Shape& s) {
            std::size_t lead = 0;
            while (lead < s.size() && s[lead] == 1) ++lead;
            return s.size() - lead <= ys.size() && std::equal(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end(),
                                                              ys.end() - static_cast<std::ptrdiff_t>(s.size() - lead));
        };
        if ((as == ys && trailing(bs)) || (bs == ys && trailing(as))) {
            const std::size_t row = as == ys ? in[1]->size() : in[0]->size();
            const std::size_t rows = row ? n / row : 0;
            const bool a_full = as == ys;
            parallel_chunks(rows, grain_for(row), [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r) {
                    T* yr = y + r * row;
                    const T* ar = a_full ? a + r * row : a;
                    const T* br = a_full ? b : b + r * row;
                    for (std::size_t j = 0; j < row; ++j) yr[j] = ar[j] + br[j];
                }
            });
            return;
        }
        const auto sa = broadcast_strides(as, ys), sb = broadcast_strides(bs, ys);
        parallel_chunks(n, grain_for(4), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i)
                y[i] = a[broadcast_offset(i, ys, sa)] + b[broadcast_offset(i, ys, sb)];
        });
    }

    // in the forward pass this was: y = a + b (broadcast). da (db) sums dy over the axes
    // a (b) was broadcast along, in the order of y's elements: a fixed order.
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Shape ys = shape_of(*dout[0]);
        const T* dy = dout[0]->data();
        const std::size_t n = dout[0]->size();
        for (std::size_t k = 0; k < 2; ++k) {
            if (!din[k]) continue;
            const Shape xs = shape_of(*in[k]);
            T* dx = din[k]->data();
            if (xs == ys) {
                for (std::size_t i = 0; i < n; ++i) dx[i] += dy[i];
                continue;
            }
            const auto sx = broadcast_strides(xs, ys);
            for (std::size_t i = 0; i < n; ++i) dx[broadcast_offset(i, ys, sx)] += dy[i];
        }
    }
};

}  // namespace attngraph::ops
