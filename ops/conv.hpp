// Conv: the convolution (cross-correlation) of ONNX's Conv and torch.nn.Conv1d/2d/3d: a
// vision transformer's patch embedding, Whisper's audio front end. Legend: x (N, C, D1..Dk),
// k = 1, 2 or 3 spatial axes; W (M, C/group, K1..Kk); b (M), optional; y (N, M, O1..Ok) with
//   O_d = (D_d + pad_begin_d + pad_end_d - dilation_d·(K_d - 1) - 1) / stride_d + 1 (floor),
//   y[n, m, o] = b[m] + sum over c in m's group, kernel offsets q of
//                W[m, c, q] · x[n, c, o·stride - pad_begin + q·dilation]  (0 outside x).
// Channels split into `group` groups (C and M divisible by it): output channel m reads the
// input channels of its group only (group = C: a depthwise convolution).
// Each (n, group) is a GEMM: W_g (M/g, C/g·K) · cols (C/g·K, O), cols the patches of x laid out as
// columns (im2col), in chunks of output positions that keep cols within 16 MiB. Backward:
// dW_g += dY_g · colsᵀ over n and chunks in order, dcols = W_gᵀ · dY_g added back into dx patch by
// patch (col2im, each input channel by itself), db = dY summed over n and O in order.
#pragma once
#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct ConvAttrs {
    std::optional<std::vector<int>> strides;    ///< one per spatial axis; default 1
    std::optional<std::vector<int>> pads;       ///< begins, then ends; default 0
    std::optional<std::vector<int>> dilations;  ///< one per spatial axis; default 1
    int group = 1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ConvAttrs, strides, pads, dilations, group);

namespace attngraph::ops {

struct Conv {
    static constexpr const char* name = "Conv";
    static constexpr int min_inputs = 2, max_inputs = 3;
    using Attrs = ConvAttrs;

    /// The geometry of one convolution, from the attributes and the shapes of x and W.
    struct Geometry {
        std::size_t batch = 0, channels = 0, out_channels = 0, groups = 1;
        std::vector<std::size_t> in, kernel, out, stride, dilation;  // per spatial axis
        std::vector<long> pad;                                       // the begin pads
        std::size_t in_size() const { return element_count(in); }
        std::size_t kernel_size() const { return element_count(kernel); }
        std::size_t out_size() const { return element_count(out); }
        std::size_t patch() const { return channels / groups * kernel_size(); }  // rows of cols
    };

    static Geometry geometry(const Attrs& a, const Shape& x, const Shape& w) {
        if (x.size() < 3 || x.size() > 5)
            throw ShapeError("x must be (N, C, D1..Dk) with 1 to 3 spatial axes, got (" + shape_str(x) + ")");
        if (w.size() != x.size())
            throw ShapeError("W (" + shape_str(w) + ") must have x's rank " + std::to_string(x.size()) + ", x is (" +
                             shape_str(x) + ")");
        const std::size_t k = x.size() - 2;
        const auto list = [&](const std::optional<std::vector<int>>& v, std::size_t len, int fallback, const char* what,
                              int least) {
            std::vector<int> r = v ? *v : std::vector<int>(len, fallback);
            if (r.size() != len)
                throw ShapeError(std::string(what) + " has " + std::to_string(r.size()) + " entries, " +
                                 std::to_string(len) + " needed for " + std::to_string(k) + " spatial axes");
            for (int e : r)
                if (e < least)
                    throw ShapeError(std::string(what) + " entry " + std::to_string(e) + " is below " +
                                     std::to_string(least));
            return r;
        };
        const std::vector<int> strides = list(a.strides, k, 1, "strides", 1), pads = list(a.pads, 2 * k, 0, "pads", 0),
                               dilations = list(a.dilations, k, 1, "dilations", 1);
        if (a.group < 1) throw ShapeError("group " + std::to_string(a.group) + " is below 1");
        Geometry g;
        g.batch = x[0];
        g.channels = x[1];
        g.out_channels = w[0];
        g.groups = static_cast<std::size_t>(a.group);
        if (g.channels % g.groups || g.out_channels % g.groups)
            throw ShapeError("group " + std::to_string(a.group) + " does not divide x's channels " +
                             std::to_string(g.channels) + " and W's output channels " + std::to_string(g.out_channels));
        if (w[1] * g.groups != g.channels)
            throw ShapeError("W (" + shape_str(w) + ") must have x's channels / group = " +
                             std::to_string(g.channels / g.groups) + " input channels, x is (" + shape_str(x) + ")");
        for (std::size_t d = 0; d < k; ++d) {
            // (sizes near 2^63 would overflow below: an ONNX model may declare any shape)
            if (double(dilations[d]) * double(w[d + 2]) > 1e18 || double(x[d + 2]) + 2.0 * INT_MAX > 1e18)
                throw ShapeError("spatial axis " + std::to_string(d) + " of x (" + shape_str(x) + ") or W (" +
                                 shape_str(w) + ") is too large");
            const long span = static_cast<long>(dilations[d]) * (static_cast<long>(w[d + 2]) - 1) + 1;
            const long padded = static_cast<long>(x[d + 2]) + pads[d] + pads[d + k];
            if (w[d + 2] == 0 || padded < span)
                throw ShapeError("the kernel (" + shape_str(w) + ", dilations " + std::to_string(dilations[d]) +
                                 ") does not fit spatial axis " + std::to_string(d) + " of x (" + shape_str(x) +
                                 ") padded to " + std::to_string(padded));
            g.in.push_back(x[d + 2]);
            g.kernel.push_back(w[d + 2]);
            g.out.push_back(static_cast<std::size_t>((padded - span) / strides[d] + 1));
            g.stride.push_back(static_cast<std::size_t>(strides[d]));
            g.dilation.push_back(static_cast<std::size_t>(dilations[d]));
            g.pad.push_back(pads[d]);
        }
        return g;
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Geometry g = geometry(a, in[0], in[1]);
        if (in.size() == 3 && in[2] != Shape{g.out_channels})
            throw ShapeError("b must be (" + std::to_string(g.out_channels) + "), got (" + shape_str(in[2]) + ")");
        Shape y = {g.batch, g.out_channels};
        y.insert(y.end(), g.out.begin(), g.out.end());
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "conv(" + v[0] + ", " + v[1] + (v.size() == 3 ? ", " + v[2] : "") +
               (a.group != 1 ? ", group=" + std::to_string(a.group) : "") + ")";
    }

    // 2·N·M·O·(C/group)·K: the GEMMs' multiply-adds
    static double flops(const Attrs&, const std::vector<Shape>& in, const std::vector<Shape>& out) {
        if (in[1].empty() || in[1][0] == 0) return 0;
        return 2.0 * static_cast<double>(element_count(out[0])) * static_cast<double>(element_count(in[1])) /
               static_cast<double>(in[1][0]);
    }

    /// Output positions per column chunk: cols holds at most about 2^22 values (16 MiB in f32)
    /// whatever the kernel (a 64x64 kernel at stride 1 would otherwise make cols 4096 times y),
    /// in whole GEMM column blocks; a constant of the geometry, never of the thread count.
    static std::size_t chunk_of(const Geometry& g) {
        const std::size_t cap = std::size_t(1) << 22, P = std::max<std::size_t>(g.patch(), 1);
        const std::size_t c = std::max(gemm_col_block, cap / P / gemm_col_block * gemm_col_block);
        return std::min(c, std::max<std::size_t>(g.out_size(), 1));
    }

    /// For row r of cols (an input channel of the group and a kernel offset) and each output
    /// position o in [o0, o1), in order: the flat offset in that channel of x, or -1 where o's
    /// tap falls in the padding. Calls f(o - o0, offset).
    template <class F>
    static void taps(const Geometry& g, std::size_t r, std::size_t o0, std::size_t o1, F&& f) {
        const std::size_t k = g.in.size(), K = g.kernel_size();
        std::size_t q = r % K, rest = o0;
        std::vector<long> shift(k);     // per axis: the tap's position for o_d = 0
        std::vector<std::size_t> o(k);  // o0's multi-index, then stepped
        for (std::size_t d = k; d-- > 0;) {
            shift[d] = static_cast<long>((q % g.kernel[d]) * g.dilation[d]) - g.pad[d];
            q /= g.kernel[d];
            o[d] = rest % g.out[d];
            rest /= g.out[d];
        }
        for (std::size_t i = o0; i < o1; ++i) {
            long off = 0;
            bool inside = true;
            for (std::size_t d = 0; d < k; ++d) {
                const long p = static_cast<long>(o[d] * g.stride[d]) + shift[d];
                inside = inside && p >= 0 && p < static_cast<long>(g.in[d]);
                off = off * static_cast<long>(g.in[d]) + p;
            }
            f(i - o0, inside ? off : -1L);
            for (std::size_t d = k; d-- > 0;) {
                if (++o[d] < g.out[d]) break;
                o[d] = 0;
            }
        }
    }

    /// cols (patch x (o1 - o0)): the patches of output positions [o0, o1) of one group of one
    /// image, x_ng pointing at the group's first channel.
    template <class T>
    static void im2col(const Geometry& g, const T* x_ng, std::size_t o0, std::size_t o1, T* cols) {
        const std::size_t K = g.kernel_size(), w = o1 - o0, D = g.in_size();
        parallel_chunks(g.patch(), grain_for(w), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xc = x_ng + (r / K) * D;
                T* row = cols + r * w;
                taps(g, r, o0, o1, [&](std::size_t i, long off) { row[i] = off < 0 ? T(0) : xc[off]; });
            }
        });
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Geometry g = geometry(a, shape_of(*in[0]), shape_of(*in[1]));
        const std::size_t Mg = g.out_channels / g.groups, P = g.patch(), O = g.out_size(), Cg = g.channels / g.groups,
                          D = g.in_size(), chunk = chunk_of(g);
        std::vector<T> cols(P * chunk);
        const T *x = in[0]->data(), *w = in[1]->data();
        T* y = out[0]->data();
        for (std::size_t n = 0; n < g.batch; ++n)
            for (std::size_t grp = 0; grp < g.groups; ++grp)
                for (std::size_t o0 = 0; o0 < O; o0 += chunk) {  // y_ng[:, o0:o1] = W_g · cols
                    const std::size_t o1 = std::min(O, o0 + chunk);
                    im2col(g, x + (n * g.channels + grp * Cg) * D, o0, o1, cols.data());
                    gemm<T>(false, false, Mg, o1 - o0, P, T(1), w + grp * Mg * P, P, cols.data(), o1 - o0, T(0),
                            y + (n * g.out_channels + grp * Mg) * O + o0, O);
                }
        if (in.size() == 3) {
            const T* b = in[2]->data();
            parallel_chunks(g.batch * g.out_channels, grain_for(O), [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r)
                    for (std::size_t i = 0; i < O; ++i) y[r * O + i] += b[r % g.out_channels];
            });
        }
    }

    // in the forward pass this was: y_ng[:, o0:o1] (M/g, o1 - o0) = W_g (M/g, P) · cols (P, o1 - o0) + b
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Geometry g = geometry(a, shape_of(*in[0]), shape_of(*in[1]));
        const std::size_t Mg = g.out_channels / g.groups, P = g.patch(), O = g.out_size(), Cg = g.channels / g.groups,
                          D = g.in_size(), K = g.kernel_size(), chunk = chunk_of(g);
        const T *x = in[0]->data(), *w = in[1]->data(), *dy = dout[0]->data();
        std::vector<T> cols(P * chunk);
        for (std::size_t n = 0; n < g.batch; ++n)
            for (std::size_t grp = 0; grp < g.groups; ++grp)
                for (std::size_t o0 = 0; o0 < O; o0 += chunk) {
                    const std::size_t o1 = std::min(O, o0 + chunk), width = o1 - o0;
                    const T* dyg = dy + (n * g.out_channels + grp * Mg) * O + o0;
                    if (din[1]) {  // dW_g (M/g, P) += dY_g[:, o0:o1] · colsᵀ
                        im2col(g, x + (n * g.channels + grp * Cg) * D, o0, o1, cols.data());
                        gemm<T>(false, true, Mg, P, width, T(1), dyg, O, cols.data(), width, T(1),
                                din[1]->data() + grp * Mg * P, P);
                    }
                    if (din[0]) {  // dcols (P, width) = W_gᵀ (P, M/g) · dY_g[:, o0:o1], then into dx
                        gemm<T>(true, false, P, width, Mg, T(1), w + grp * Mg * P, P, dyg, O, T(0), cols.data(), width);
                        T* dx = din[0]->data() + (n * g.channels + grp * Cg) * D;
                        // a channel's rows are its K kernel offsets: channels add apart, offsets in order
                        parallel_chunks(Cg, grain_for(K * width), [&](std::size_t c0, std::size_t c1) {
                            for (std::size_t c = c0; c < c1; ++c)
                                for (std::size_t r = c * K; r < (c + 1) * K; ++r) {
                                    const T* row = cols.data() + r * width;
                                    taps(g, r, o0, o1, [&](std::size_t i, long off) {
                                        if (off >= 0) dx[c * D + static_cast<std::size_t>(off)] += row[i];
                                    });
                                }
                        });
                    }
                }
        if (in.size() == 3 && din[2]) {  // db[m] += dY[n, m, :] summed over n, then O, in order
            T* db = din[2]->data();
            parallel_chunks(g.out_channels, grain_for(g.batch * O), [&](std::size_t m0, std::size_t m1) {
                for (std::size_t m = m0; m < m1; ++m)
                    for (std::size_t n = 0; n < g.batch; ++n)
                        for (std::size_t i = 0; i < O; ++i) db[m] += dy[(n * g.out_channels + m) * O + i];
            });
        }
    }
};

}  // namespace attngraph::ops
