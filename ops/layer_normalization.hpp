// LayerNormalization (ONNX opset 17): y = (x - mean) / sqrt(var + epsilon) · scale + bias over
// the axes `axis` to the last. Legend: x (outer, N) with N the product of x.shape[axis:];
// scale and bias broadcast to x.shape[axis:]; per row mean μ, variance σ² (biased: / N),
// r = 1/sqrt(σ² + epsilon), x̂ = (x - μ)·r.
// Outputs: y, and with `stats` = 1 also Mean and InvStdDev (x.shape[:axis] followed by 1s),
// ONNX's optional outputs. ONNX decides that by the node's output list; a graph file node
// has no list, so the attribute `stats` (not in ONNX) says it. `stash_type` is accepted and
// ignored.
#pragma once
#include <cmath>

#include "ops/normalization.hpp"

namespace attngraph::ops {
struct LayerNormalizationAttrs {
    int axis = -1;
    double epsilon = 1e-5;
    int stash_type = 1;
    int stats = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::LayerNormalizationAttrs, axis, epsilon, stash_type, stats);

namespace attngraph::ops {

struct LayerNormalization {
    static constexpr const char* name = "LayerNormalization";
    static constexpr int min_inputs = 2, max_inputs = 3;
    using Attrs = LayerNormalizationAttrs;

    static std::vector<Shape> infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Shape norm = normalized_shape(in[0], a.axis);
        if (!(a.epsilon >= 0) || !std::isfinite(a.epsilon))
            throw ShapeError("epsilon must be finite and >= 0, got " + format_number(a.epsilon));
        if (a.stats != 0 && a.stats != 1) throw ShapeError("stats must be 0 or 1, got " + std::to_string(a.stats));
        check_norm_param("scale", in[1], norm, in[0], a.axis);
        if (in.size() == 3) check_norm_param("bias", in[2], norm, in[0], a.axis);
        if (!a.stats) return {in[0]};
        Shape stat(in[0].begin(), in[0].end() - static_cast<long>(norm.size()));
        stat.resize(in[0].size(), 1);
        return {in[0], stat, stat};
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "(" + v[0] + " - mean) / sqrt(var + " + format_number(a.epsilon) + ") * " + v[1] +
               (v.size() == 3 ? " + " + v[2] : "") + "  (axes " + std::to_string(a.axis) + "..)";
    }

    /// Per row: mean and 1/sqrt(var + eps).
    template <class T>
    static void row_stats(const T* x, std::size_t rows, std::size_t n, T eps, std::vector<T>& mean,
                          std::vector<T>& inv) {
        mean.resize(rows);
        inv.resize(rows);
        parallel_chunks(rows, grain_for(2 * n), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xr = x + r * n;
                T s = 0;
                for (std::size_t i = 0; i < n; ++i) s += xr[i];
                const T mu = s / static_cast<T>(n);
                T v = 0;
                for (std::size_t i = 0; i < n; ++i) v += (xr[i] - mu) * (xr[i] - mu);
                mean[r] = mu;
                inv[r] = T(1) / std::sqrt(v / static_cast<T>(n) + eps);
            }
        });
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape xs = shape_of(*in[0]), norm = normalized_shape(xs, a.axis);
        const std::size_t n = element_count(norm), rows = n ? in[0]->size() / n : 0;
        const auto ss = broadcast_strides(shape_of(*in[1]), norm);
        const bool has_bias = in.size() == 3;
        const auto bs = has_bias ? broadcast_strides(shape_of(*in[2]), norm) : std::vector<std::size_t>{};
        const T* x = in[0]->data();
        const T* s = in[1]->data();
        const T* b = has_bias ? in[2]->data() : nullptr;
        T* y = out[0]->data();
        std::vector<T> mean, inv;
        row_stats(x, rows, n, static_cast<T>(a.epsilon), mean, inv);
        parallel_chunks(rows, grain_for(2 * n), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r)
                for (std::size_t i = 0; i < n; ++i) {
                    const T xhat = (x[r * n + i] - mean[r]) * inv[r];
                    y[r * n + i] =
                        xhat * s[broadcast_offset(i, norm, ss)] + (b ? b[broadcast_offset(i, norm, bs)] : T(0));
                }
        });
        if (out.size() == 3) {
            std::copy(mean.begin(), mean.end(), out[1]->data());
            std::copy(inv.begin(), inv.end(), out[2]->data());
        }
    }

    // in the forward pass this was: y_i = x̂_i s_i + b_i, x̂ = (x - μ) r (and Mean = μ,
    // InvStdDev = r). With g_i = dy_i s_i:
    //   dx_i += r (g_i - mean(g) - x̂_i mean(g x̂)) + dMean / N - dInvStdDev · r² x̂_i / N
    //   ds_i += Σ_rows dy_i x̂_i,  db_i += Σ_rows dy_i  (rows in order)
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Shape xs = shape_of(*in[0]), norm = normalized_shape(xs, a.axis);
        const std::size_t n = element_count(norm), rows = n ? in[0]->size() / n : 0;
        const auto ss = broadcast_strides(shape_of(*in[1]), norm);
        const T* x = in[0]->data();
        const T* s = in[1]->data();
        const T* dy = dout[0]->data();
        const T* dmean = dout.size() == 3 ? dout[1]->data() : nullptr;
        const T* dinv = dout.size() == 3 ? dout[2]->data() : nullptr;
        std::vector<T> mean, inv;
        row_stats(x, rows, n, static_cast<T>(a.epsilon), mean, inv);
        const T nn = static_cast<T>(n);
        if (din[0]) {
            T* dx = din[0]->data();
            parallel_chunks(rows, grain_for(4 * n), [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r) {
                    T sum_g = 0, sum_gx = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                        const T g = dy[r * n + i] * s[broadcast_offset(i, norm, ss)];
                        sum_g += g;
                        sum_gx += g * (x[r * n + i] - mean[r]) * inv[r];
                    }
                    const T mg = sum_g / nn, mgx = sum_gx / nn;
                    const T extra_mean = dmean ? dmean[r] / nn : T(0);
                    const T extra_inv = dinv ? dinv[r] * inv[r] * inv[r] / nn : T(0);
                    for (std::size_t i = 0; i < n; ++i) {
                        const T xhat = (x[r * n + i] - mean[r]) * inv[r];
                        const T g = dy[r * n + i] * s[broadcast_offset(i, norm, ss)];
                        dx[r * n + i] += inv[r] * (g - mg - xhat * mgx) + extra_mean - extra_inv * xhat;
                    }
                }
            });
        }
        if (din[1]) {
            T* ds = din[1]->data();
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < n; ++i)
                    ds[broadcast_offset(i, norm, ss)] += dy[r * n + i] * (x[r * n + i] - mean[r]) * inv[r];
        }
        if (in.size() == 3 && din[2]) {
            const auto bs = broadcast_strides(shape_of(*in[2]), norm);
            T* db = din[2]->data();
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < n; ++i) db[broadcast_offset(i, norm, bs)] += dy[r * n + i];
        }
    }
};

}  // namespace attngraph::ops
