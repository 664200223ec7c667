#pragma once
// The engine's softmax row kernel, vectorised with xsimd and dispatched at run time to the
// widest instruction set the CPU has (AVX-512, AVX2+FMA, or SSE2). The Softmax op and the
// fused attention kernel (engine/optimize.cpp) both call it, so they agree bit for bit.
#include <cstddef>

namespace attngraph {

/// @brief For each of `rows` contiguous rows of `len` values: y = softmax(scale · x), where
/// scale · x is rounded first exactly as the Scale op rounds it (skipped when !scaled).
/// A row whose maximum is -inf (fully masked) gives zeros; one with a NaN, NaN. y may alias x.
template <class T>
void softmax_rows(const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled);

/// @brief softmax_rows on rows of `len` values that are -inf outside a span of columns
/// [lo[r], hi[r]) per row r, computing that span only: row r's column c is x[r·ldx + c - col0]
/// (col0 <= lo[r]), and y (same layout, ldy; may alias x) gets, on the span, the bits
/// softmax_rows gives there (it gives 0 elsewhere; the caller writes those zeros where it
/// needs them). With `scaled` the values are scale·x inside the span, -inf outside (a Mask
/// applied after a Scale). An empty span, or one all -inf, is a fully masked row.
///
/// `last`, when not null, holds one value per row for column len - 1, outside the spans
/// (which end before it) and never scaled: a sink logit after the m = len - 1 keys (gpt-oss).
/// The row's softmax takes it in its lane as softmax_rows does, and last[r] gets its weight.
/// A row with an empty span then gives the sink all the weight (its keys 0).
template <class T>
void softmax_spans(const T* x, std::size_t ldx, T* y, std::size_t ldy, std::size_t col0, std::size_t rows,
                   const std::size_t* lo, const std::size_t* hi, std::size_t len, T scale, bool scaled,
                   T* last = nullptr);

/// @brief sum_i y[i]·dy[i]: the row sum of the softmax backward, dx = y ⊙ (dy − dot). In a fixed
/// order, whatever the CPU: 16 interleaved partial sums (the compiler vectorises them for any
/// instruction set), then added pairwise. A sum in order would chain every addition on the
/// one before, 1024 of them in a row of 1024 keys. The Softmax op's backward on the last axis
/// and the fused attention backward both call it, so they agree bit for bit.
///
/// A span of a masked row (y = 0 outside it, dy finite) gives the whole row's bits: terms
/// y·dy = ±0 change no partial sum (each starts at +0 and cannot become -0), and starting
/// the row at another column rotates the partial sums, which the pairwise tree (it pairs
/// them by residue modulo 8, 4, 2, 1) adds in the same groups, only commuted.
template <class T>
T softmax_backward_dot(const T* y, const T* dy, std::size_t len) {
    constexpr std::size_t lanes = 16;
    T part[lanes] = {};
    const std::size_t body = len - len % lanes;
    for (std::size_t i = 0; i < body; i += lanes)
        for (std::size_t k = 0; k < lanes; ++k) part[k] += y[i + k] * dy[i + k];
    for (std::size_t i = body; i < len; ++i) part[i - body] += y[i] * dy[i];
    for (std::size_t width = lanes / 2; width > 0; width /= 2)
        for (std::size_t k = 0; k < width; ++k) part[k] += part[k + width];
    return part[0];
}

namespace softmax_detail {
// softmax_rows for one xsimd architecture; defined in softmax_kernel_impl.hpp and
// instantiated by softmax_kernel_<arch>.cpp, each compiled for its instruction set.
struct Kernel {
    template <class Arch, class T>
    void operator()(Arch, const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled) const;
};
struct SpanKernel {
    template <class Arch, class T>
    void operator()(Arch, const T* x, std::size_t ldx, T* y, std::size_t ldy, std::size_t col0, std::size_t rows,
                    const std::size_t* lo, const std::size_t* hi, std::size_t len, T scale, bool scaled,
                    T* last) const;
};
}  // namespace softmax_detail

}  // namespace attngraph
