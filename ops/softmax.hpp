// Softmax along one axis, numerically stable: y = exp(x - max) / sum(exp(x - max)).
// Legend: x and y have the same shape; seen as (outer, len, inner) around `axis`.
// A row whose every entry is -inf (fully masked) gives all zeros, not NaN; a row with a NaN gives NaN.
#pragma once
#include "engine/parallel.hpp"
#include "engine/softmax_kernel.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct SoftmaxAttrs {
    int axis = -1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SoftmaxAttrs, axis);

namespace attngraph::ops {

struct Softmax {
    static constexpr const char* name = "Softmax";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SoftmaxAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        normalize_axis(a.axis, in[0].size());
        return in[0];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "softmax(" + v[0] + (a.axis == -1 ? "" : ", axis=" + std::to_string(a.axis)) + ")";
    }

    static std::string latex(const Attrs& a, const std::vector<std::string>& v, const std::string& y, const Shape& ys) {
        const bool last = a.axis == -1 || a.axis == static_cast<int>(ys.size()) - 1;
        return y + "=\\mathrm{softmax}\\left(" + v[0] + "\\right)" +
               (last ? "\\quad\\text{(row-wise)}" : "\\quad\\text{(axis " + std::to_string(a.axis) + ")}");
    }

    struct Layout {
        std::size_t outer, len, inner;
    };
    static Layout layout(const Shape& s, int axis) {
        const std::size_t ax = normalize_axis(axis, s.size());
        Layout l{1, s[ax], 1};
        for (std::size_t i = 0; i < ax; ++i) l.outer *= s[i];
        for (std::size_t i = ax + 1; i < s.size(); ++i) l.inner *= s[i];
        return l;
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape shape(in[0]->shape().begin(), in[0]->shape().end());
        const Layout l = layout(shape, a.axis);
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const std::size_t rows = l.outer * l.inner;
        if (l.inner == 1) {  // rows are contiguous: the vectorised kernel
            parallel_chunks(rows, grain_for(l.len * 8), [&](std::size_t r0, std::size_t r1) {
                softmax_rows<T>(x + r0 * l.len, y + r0 * l.len, r1 - r0, l.len, T(1), false);
            });
            return;
        }
        parallel_chunks(rows, grain_for(l.len * 8), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const std::size_t base = (r / l.inner) * l.len * l.inner + r % l.inner;
                const T* xr = x + base;
                T* yr = y + base;
                T mx = -std::numeric_limits<T>::infinity();
                for (std::size_t i = 0; i < l.len; ++i) mx = std::max(mx, xr[i * l.inner]);
                if (mx == -std::numeric_limits<T>::infinity()) {  // every position masked (or a NaN)
                    T fill = T(0);
                    for (std::size_t i = 0; i < l.len; ++i)
                        if (xr[i * l.inner] != xr[i * l.inner]) fill = std::numeric_limits<T>::quiet_NaN();
                    for (std::size_t i = 0; i < l.len; ++i) yr[i * l.inner] = fill;
                    continue;
                }
                T sum = 0;
                for (std::size_t i = 0; i < l.len; ++i) {
                    const T e = std::exp(xr[i * l.inner] - mx);
                    yr[i * l.inner] = e;
                    sum += e;
                }
                const T inv = T(1) / sum;
                for (std::size_t i = 0; i < l.len; ++i) yr[i * l.inner] *= inv;
            }
        });
    }

    // in the forward pass this was: y_i = exp(x_i - max) / sum_j exp(x_j - max), per row
    // dx_i += y_i · (dy_i - sum_j y_j · dy_j)   (a fully masked row has y = 0, so dx = 0)
    template <class T>
    static void backward(const Attrs& a, In<T>, In<T> out, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const Shape shape(out[0]->shape().begin(), out[0]->shape().end());
        const Layout l = layout(shape, a.axis);
        const T* y = out[0]->data();
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        const std::size_t rows = l.outer * l.inner;
        parallel_chunks(rows, grain_for(l.len * 4), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const std::size_t base = (r / l.inner) * l.len * l.inner + r % l.inner;
                // the last axis: the fused attention backward's sum (engine/softmax_kernel.hpp)
                T dot = 0;
                if (l.inner == 1)
                    dot = softmax_backward_dot(y + base, dy + base, l.len);
                else
                    for (std::size_t i = 0; i < l.len; ++i) dot += y[base + i * l.inner] * dy[base + i * l.inner];
                for (std::size_t i = 0; i < l.len; ++i) {
                    const std::size_t at = base + i * l.inner;
                    dx[at] += y[at] * (dy[at] - dot);
                }
            }
        });
    }
};

}  // namespace attngraph::ops
