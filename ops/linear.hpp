// Linear: y = x·W + b over the last axis of x.
// Legend: x is (..., in), W is (in, out), b is (out) or (1, out), y is (..., out);
// M = the number of rows of x once its leading axes are flattened.
#pragma once
#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct LinearAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::LinearAttrs);

namespace attngraph::ops {

struct Linear {
    static constexpr const char* name = "Linear";
    static constexpr int min_inputs = 2, max_inputs = 3;
    using Attrs = LinearAttrs;

    // x (..., in), W (in, out), b (out) | (1, out) -> y (..., out)
    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) {
        const Shape& x = in[0];
        const Shape& w = in[1];
        if (x.empty()) throw ShapeError("x must have at least one axis");
        if (w.size() != 2) throw ShapeError("W must be 2-D (in x out), got (" + shape_str(w) + ")");
        if (x.back() != w[0])
            throw ShapeError("last axis of x (" + shape_str(x) + ") must equal the rows of W (" + shape_str(w) + ")");
        if (in.size() == 3) {
            const Shape& b = in[2];
            const bool ok = (b.size() == 1 && b[0] == w[1]) || (b.size() == 2 && b[0] == 1 && b[1] == w[1]);
            if (!ok)
                throw ShapeError("b must be (" + std::to_string(w[1]) + ") or (1x" + std::to_string(w[1]) + "), got (" +
                                 shape_str(b) + ")");
        }
        Shape y = x;
        y.back() = w[1];
        return y;
    }

    static std::string formula(const Attrs&, const std::vector<std::string>& v) {
        return v[0] + " · " + v[1] + (v.size() == 3 ? " + " + v[2] : "");
    }

    // 2·M·out·in: the GEMM's multiply-adds (the bias is not counted)
    static double flops(const Attrs&, const std::vector<Shape>& in, const std::vector<Shape>& out) {
        return 2.0 * static_cast<double>(element_count(out[0])) * static_cast<double>(in[0].back());
    }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const Array<T>& x = *in[0];
        const Array<T>& w = *in[1];
        Array<T>& y = *out[0];
        const std::size_t k = w.shape()[0], n = w.shape()[1], m = k ? x.size() / k : y.size() / (n ? n : 1);
        // y = x·W, then + b broadcast over rows (the raw product and the bias, as the seed prints them)
        gemm<T>(false, false, m, n, k, T(1), x.data(), k, w.data(), n, T(0), y.data(), n);
        if (in.size() == 3) {
            const T* b = in[2]->data();
            T* yd = y.data();
            parallel_chunks(m, grain_for(n), [&](std::size_t i0, std::size_t i1) {
                for (std::size_t i = i0; i < i1; ++i)
                    for (std::size_t j = 0; j < n; ++j) yd[i * n + j] += b[j];
            });
        }
    }

    // in the forward pass this was: y = x·W + b   (dy is (M, out))
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Array<T>& x = *in[0];
        const Array<T>& w = *in[1];
        const T* dy = dout[0]->data();
        const std::size_t k = w.shape()[0], n = w.shape()[1], m = dout[0]->size() / (n ? n : 1);
        if (din[0])  // dx (M, in) += dy (M, out) · Wᵀ (out, in)
            gemm<T>(false, true, m, k, n, T(1), dy, n, w.data(), n, T(1), din[0]->data(), k);
        if (din[1])  // dW (in, out) += xᵀ (in, M) · dy (M, out)
            gemm<T>(true, false, k, n, m, T(1), x.data(), k, dy, n, T(1), din[1]->data(), n);
        if (in.size() == 3 && din[2]) {
            // db (out) += sum of dy over its rows: each column sums its rows in order 0..M-1
            T* db = din[2]->data();
            parallel_chunks(n, grain_for(m), [&](std::size_t j0, std::size_t j1) {
                for (std::size_t i = 0; i < m; ++i)
                    for (std::size_t j = j0; j < j1; ++j) db[j] += dy[i * n + j];
            });
        }
    }
};

}  // namespace attngraph::ops
