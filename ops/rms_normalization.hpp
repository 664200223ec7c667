// RMSNormalization (ONNX opset 23): y = x / sqrt(mean(x², normalized axes) + epsilon) · scale,
// the normalized axes being `axis` to the last. Legend: x (outer, N) with N the product of
// x.shape[axis:]; scale broadcasts to x.shape[axis:]; r = 1/sqrt(mean(x²) + epsilon) per row.
// `stash_type` is accepted and ignored (sums are in the graph's float type).
#pragma once
#include <cmath>

#include "ops/normalization.hpp"

namespace attngraph::ops {
struct RMSNormalizationAttrs {
    int axis = -1;
    double epsilon = 1e-5;
    int stash_type = 1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::RMSNormalizationAttrs, axis, epsilon, stash_type);

namespace attngraph::ops {

struct RMSNormalization {
    static constexpr const char* name = "RMSNormalization";
    static constexpr int min_inputs = 2, max_inputs = 2;
    using Attrs = RMSNormalizationAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape norm = normalized_shape(in[0], a.axis);
        if (!(a.epsilon >= 0) || !std::isfinite(a.epsilon))
            throw ShapeError("epsilon must be finite and >= 0, got " + format_number(a.epsilon));
        check_norm_param("scale", in[1], norm, in[0], a.axis);
        return in[0];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return v[0] + " / sqrt(mean(" + v[0] + "², axes " + std::to_string(a.axis) + "..) + " +
               format_number(a.epsilon) + ") * " + v[1];
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape xs = shape_of(*in[0]), norm = normalized_shape(xs, a.axis);
        const std::size_t n = element_count(norm), rows = n ? in[0]->size() / n : 0;
        const auto ss = broadcast_strides(shape_of(*in[1]), norm);
        const T* x = in[0]->data();
        const T* s = in[1]->data();
        T* y = out[0]->data();
        const T eps = static_cast<T>(a.epsilon);
        parallel_chunks(rows, grain_for(3 * n), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xr = x + r * n;
                T sq = 0;
                for (std::size_t i = 0; i < n; ++i) sq += xr[i] * xr[i];
                const T inv = T(1) / std::sqrt(sq / static_cast<T>(n) + eps);
                for (std::size_t i = 0; i < n; ++i) y[r * n + i] = xr[i] * inv * s[broadcast_offset(i, norm, ss)];
            }
        });
    }

    // in the forward pass this was: y_i = x_i · r · s_i, r = (Σ x² / N + eps)^-1/2.
    // dx_i += r s_i dy_i - x_i r³ / N · Σ_j dy_j s_j x_j;  ds_i += Σ_rows dy_i x_i r (rows in order).
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Shape xs = shape_of(*in[0]), norm = normalized_shape(xs, a.axis);
        const std::size_t n = element_count(norm), rows = n ? in[0]->size() / n : 0;
        const auto ss = broadcast_strides(shape_of(*in[1]), norm);
        const T* x = in[0]->data();
        const T* s = in[1]->data();
        const T* dy = dout[0]->data();
        const T eps = static_cast<T>(a.epsilon);
        std::vector<T> inv(rows);
        for (std::size_t r = 0; r < rows; ++r) {
            T sq = 0;
            for (std::size_t i = 0; i < n; ++i) sq += x[r * n + i] * x[r * n + i];
            inv[r] = T(1) / std::sqrt(sq / static_cast<T>(n) + eps);
        }
        if (din[0]) {
            T* dx = din[0]->data();
            parallel_chunks(rows, grain_for(3 * n), [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r) {
                    const T* xr = x + r * n;
                    const T* g = dy + r * n;
                    T dot = 0;
                    for (std::size_t i = 0; i < n; ++i) dot += g[i] * s[broadcast_offset(i, norm, ss)] * xr[i];
                    const T k = inv[r] * inv[r] * inv[r] * dot / static_cast<T>(n);
                    for (std::size_t i = 0; i < n; ++i)
                        dx[r * n + i] += inv[r] * s[broadcast_offset(i, norm, ss)] * g[i] - xr[i] * k;
                }
            });
        }
        if (din[1]) {
            T* ds = din[1]->data();
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < n; ++i)
                    ds[broadcast_offset(i, norm, ss)] += dy[r * n + i] * x[r * n + i] * inv[r];
        }
    }
};

}  // namespace attngraph::ops
