// MatMul: c = a·b over the last two axes, batched over the leading axes with numpy
// broadcasting. Legend: a is (..., m, k), b is (..., k, n), c is (batch..., m, n).
#pragma once
#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "ops/common.hpp"

namespace attngraph::ops {
struct MatMulAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::MatMulAttrs);

namespace attngraph::ops {

struct MatMul {
    static constexpr const char* name = "MatMul";
    static constexpr int min_inputs = 2, max_inputs = 2;
    using Attrs = MatMulAttrs;

    static Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) {
        const Shape& a = in[0];
        const Shape& b = in[1];
        if (a.size() < 2 || b.size() < 2)
            throw ShapeError("both operands need at least 2 axes, got (" + shape_str(a) + ") · (" + shape_str(b) + ")");
        if (a[a.size() - 1] != b[b.size() - 2])
            throw ShapeError("inner dimensions differ: (" + shape_str(a) + ") · (" + shape_str(b) + ")");
        Shape c;
        try {
            c = broadcast_shapes(batch_of(a), batch_of(b));
        } catch (const ShapeError&) {
            throw ShapeError("batch axes do not broadcast: (" + shape_str(a) + ") · (" + shape_str(b) + ")");
        }
        c.push_back(a[a.size() - 2]);
        c.push_back(b[b.size() - 1]);
        return c;
    }

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + " · " + v[1]; }

    // explain: "a · b = y", each with its shape
    static std::string latex(const Attrs&, const std::vector<std::string>& v, const std::string& y, const Shape&) {
        return v[0] + "\\cdot " + v[1] + "=" + y;
    }

    // 2·m·n·k: one multiply-add per element of c and step of the inner axis
    static double flops(const Attrs&, const std::vector<Shape>& in, const std::vector<Shape>& out) {
        return 2.0 * static_cast<double>(element_count(out[0])) * static_cast<double>(in[0].back());
    }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const Shape as(in[0]->shape().begin(), in[0]->shape().end());
        const Shape bs(in[1]->shape().begin(), in[1]->shape().end());
        const Shape cs(out[0]->shape().begin(), out[0]->shape().end());
        const std::size_t m = as[as.size() - 2], k = as.back(), n = bs.back();
        const Shape batch = batch_of(cs);
        const std::size_t batches = element_count(batch);
        const auto sa = broadcast_strides(batch_of(as), batch);
        const auto sb = broadcast_strides(batch_of(bs), batch);
        const T* a = in[0]->data();
        const T* b = in[1]->data();
        T* c = out[0]->data();
        if (bs.size() == 2 && element_count(batch_of(as)) == batches) {
            // a 2-D right operand (a weight): the batches of `a` are rows of one GEMM, as in
            // Linear, so that MatMul + Add (an ONNX export's Linear) gives Linear's bits
            gemm<T>(false, false, batches * m, n, k, T(1), a, k, b, n, T(0), c, n);
            return;
        }
        parallel_chunks(batches, 1, [&](std::size_t b0, std::size_t b1) {
            for (std::size_t i = b0; i < b1; ++i) {
                const T* ai = a + broadcast_offset(i, batch, sa) * m * k;
                const T* bi = b + broadcast_offset(i, batch, sb) * k * n;
                gemm<T>(false, false, m, n, k, T(1), ai, k, bi, n, T(0), c + i * m * n, n);
            }
        });
    }

    /// For each batch of an operand (after its own batch shape), the output batches that
    /// read it, in increasing order: a broadcast operand gathers several.
    static std::vector<std::vector<std::size_t>> readers(const Shape& operand_batch, const Shape& batch) {
        const auto strides = broadcast_strides(operand_batch, batch);
        std::vector<std::vector<std::size_t>> r(element_count(operand_batch));
        for (std::size_t i = 0; i < element_count(batch); ++i) r[broadcast_offset(i, batch, strides)].push_back(i);
        return r;
    }

    // in the forward pass this was: c_i (m, n) = a_i (m, k) · b_i (k, n) for every batch i
    // da_j += sum over the batches i reading a_j of dc_i · b_iᵀ, in increasing i (likewise db)
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Shape as(in[0]->shape().begin(), in[0]->shape().end());
        const Shape bs(in[1]->shape().begin(), in[1]->shape().end());
        const Shape cs(dout[0]->shape().begin(), dout[0]->shape().end());
        const std::size_t m = as[as.size() - 2], k = as.back(), n = bs.back();
        const Shape batch = batch_of(cs);
        const auto sa = broadcast_strides(batch_of(as), batch);
        const auto sb = broadcast_strides(batch_of(bs), batch);
        const T* a = in[0]->data();
        const T* b = in[1]->data();
        const T* dc = dout[0]->data();
        if (din[0]) {
            const auto groups = readers(batch_of(as), batch);
            T* da = din[0]->data();
            parallel_chunks(groups.size(), 1, [&](std::size_t j0, std::size_t j1) {
                for (std::size_t j = j0; j < j1; ++j)
                    for (std::size_t i : groups[j])  // da_j (m, k) += dc_i (m, n) · b_iᵀ (n, k)
                        gemm<T>(false, true, m, k, n, T(1), dc + i * m * n, n,
                                b + broadcast_offset(i, batch, sb) * k * n, n, T(1), da + j * m * k, k);
            });
        }
        if (din[1]) {
            const auto groups = readers(batch_of(bs), batch);
            T* db = din[1]->data();
            parallel_chunks(groups.size(), 1, [&](std::size_t j0, std::size_t j1) {
                for (std::size_t j = j0; j < j1; ++j)
                    for (std::size_t i : groups[j])  // db_j (k, n) += a_iᵀ (k, m) · dc_i (m, n)
                        gemm<T>(true, false, k, n, m, T(1), a + broadcast_offset(i, batch, sa) * m * k, k,
                                dc + i * m * n, n, T(1), db + j * k * n, n);
            });
        }
    }
};

}  // namespace attngraph::ops
