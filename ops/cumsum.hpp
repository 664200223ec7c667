// CumSum: running sums along one axis (ONNX CumSum, numpy.cumsum, torch.cumsum). Legend: x and
// y have one shape, seen as (outer, len, inner) around `axis`; along it
//   y_i = Σ x_j over j ≤ i   (exclusive: j < i; reverse: j ≥ i; both: j > i).
// Each line is summed in sequence, one element after the other (numpy's order), so an inf
// stays an inf and a NaN spoils only the sums after it; the same bits at any thread count
// (a line is never split). Position ids from a padding mask: cumsum(mask) − 1.
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct CumSumAttrs {
    int axis = 0;
    bool exclusive = false;
    bool reverse = false;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::CumSumAttrs, axis, exclusive, reverse);

namespace attngraph::ops {

struct CumSum {
    static constexpr const char* name = "CumSum";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = CumSumAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        if (in[0].empty()) throw ShapeError("CumSum takes a tensor of rank 1 or more, not a scalar");
        normalize_axis(a.axis, in[0].size());
        return in[0];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "cumsum(" + v[0] + ", axis=" + std::to_string(a.axis) + (a.exclusive ? ", exclusive" : "") +
               (a.reverse ? ", reverse" : "") + ")";
    }

    static double flops(const Attrs&, const std::vector<Shape>& in, const std::vector<Shape>&) {
        return static_cast<double>(element_count(in[0]));
    }

    /// y = the running sums of x as the attributes say. The inner axis is walked in blocks of
    /// `block` columns, each block a unit of work: its rows are added one after the other.
    template <class T>
    static void running_sums(const T* x, T* y, const AxisLayout& l, bool exclusive, bool reverse) {
        constexpr std::size_t block = 256;
        const std::size_t blocks = (l.inner + block - 1) / block;
        parallel_chunks(l.outer * blocks, grain_for(l.len * block), [&](std::size_t u0, std::size_t u1) {
            T acc[block];
            for (std::size_t u = u0; u < u1; ++u) {
                const std::size_t o = u / blocks, c0 = (u % blocks) * block;
                const std::size_t w = std::min(block, l.inner - c0);
                const std::size_t base = o * l.len * l.inner + c0;
                std::fill(acc, acc + w, T(0));
                for (std::size_t k = 0; k < l.len; ++k) {
                    const std::size_t i = reverse ? l.len - 1 - k : k;
                    const T* xr = x + base + i * l.inner;
                    T* yr = y + base + i * l.inner;
                    if (exclusive) {
                        for (std::size_t c = 0; c < w; ++c) {
                            const T v = xr[c];  // (x and y may be one buffer: read before writing)
                            yr[c] = acc[c];
                            acc[c] += v;
                        }
                    } else {
                        for (std::size_t c = 0; c < w; ++c) yr[c] = acc[c] += xr[c];
                    }
                }
            }
        });
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape s = shape_of(*in[0]);
        running_sums(in[0]->data(), out[0]->data(), axis_layout(s, normalize_axis(a.axis, s.size())), a.exclusive,
                     a.reverse);
    }

    // in the forward pass this was: y_i = Σ x_j over the j the attributes pick. x_j reaches
    // every y_i whose sum it is in, so dx_j = Σ dy_i over those i: the running sums of dy in
    // the other direction (exclusive stays exclusive).
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const Shape s = shape_of(*in[0]);
        const std::size_t n = in[0]->size();
        std::vector<T> sums(n);
        running_sums(dout[0]->data(), sums.data(), axis_layout(s, normalize_axis(a.axis, s.size())), a.exclusive,
                     !a.reverse);
        T* dx = din[0]->data();
        parallel_chunks(n, grain_for(2), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) dx[i] += sums[i];
        });
    }
};

}  // namespace attngraph::ops
