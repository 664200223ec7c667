#pragma once
// The kernels of engine/attention_gemm.hpp for one xsimd architecture. Included only by the
// attention_gemm_*.cpp files, each compiled for its instruction set.
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <xsimd/xsimd.hpp>

#include "engine/attention_gemm.hpp"

namespace attngraph::attention_gemm::detail {

// x·y + z rounded once. xsimd 8 has no AVX-512 fma of its own: its generic one is x * y + z,
// one instruction only where the compiler contracts it (g++ does, clang does not), and the
// kernels' bits must not depend on the compiler. (For AVX2 it is FMA3's, one instruction.)
template <class Arch>
[[gnu::always_inline]] inline xsimd::batch<float, Arch> fused(xsimd::batch<float, Arch> x, xsimd::batch<float, Arch> y,
                                                              xsimd::batch<float, Arch> z) {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return _mm512_fmadd_ps(x, y, z);
#endif
    return xsimd::fma(x, y, z);
}

// Register tiles: rows × vectors of accumulators, the vectors of K or V of one step and a
// broadcast weight within the architecture's vector registers (32 with AVX-512, 16 with AVX2).
template <class Arch>
struct Tiles {
    static constexpr bool wide = xsimd::batch<float, Arch>::size == 16;
    static constexpr std::size_t score_rows = wide ? 12 : 6, score_vectors = 2;
    static constexpr std::size_t value_rows = 6, value_vectors = wide ? 4 : 2;
    static constexpr std::size_t value_keys = 256;  ///< a chunk of V: 64 KiB at d_v = 64
};

// R rows of S on the keys of one tile (NV vectors): out[r·ldo + c] for the tile's c. pk: the
// tile's first key in its panel (K's element d of that key at pk[d·panel]).
template <class Arch, std::size_t R, std::size_t NV>
[[gnu::always_inline]] inline void score_tile(const float* q, std::size_t dk, const float* pk, float* out,
                                              std::size_t ldo) {
    using B = xsimd::batch<float, Arch>;
    B acc[R][NV];
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t v = 0; v < NV; ++v) acc[r][v] = B(0.0f);
    for (std::size_t d = 0; d < dk; ++d) {
        B k[NV];
        for (std::size_t v = 0; v < NV; ++v) k[v] = B::load_unaligned(pk + d * panel + v * B::size);
        for (std::size_t r = 0; r < R; ++r) {
            const B x(q[r * dk + d]);
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = fused<Arch>(x, k[v], acc[r][v]);
        }
    }
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t v = 0; v < NV; ++v) acc[r][v].store_unaligned(out + r * ldo + v * B::size);
}

// R rows of S on the keys [from, to) of the tile starting at key t0 (a part of it: through a
// buffer).
template <class Arch, std::size_t R, std::size_t NV>
[[gnu::always_inline]] inline void score_rows(const float* q, std::size_t dk, const float* packed, std::size_t t0,
                                              std::size_t from, std::size_t to, float* s, std::size_t lds) {
    constexpr std::size_t width = NV * xsimd::batch<float, Arch>::size;
    const float* pk = packed + (t0 / panel) * dk * panel + t0 % panel;
    if (t0 >= from && t0 + width <= to) {
        score_tile<Arch, R, NV>(q, dk, pk, s + (t0 - from), lds);
        return;
    }
    alignas(64) float part[R * width];
    score_tile<Arch, R, NV>(q, dk, pk, part, width);
    const std::size_t lo = std::max(t0, from), hi = std::min(t0 + width, to);
    for (std::size_t r = 0; r < R; ++r)
        std::copy(part + r * width + (lo - t0), part + r * width + (hi - t0), s + r * lds + (lo - from));
}

// f.template operator()<R>() for the rows left after the whole tiles (1 ≤ rest < Max): one
// tile of `rest` rows, as fast per row as a whole one.
template <std::size_t Max, class F, std::size_t... R>
inline void with_rest(std::size_t rest, F&& f, std::index_sequence<R...>) {
    static_assert(sizeof...(R) + 1 == Max);
    ((rest == R + 1 ? f.template operator()<R + 1>() : void()), ...);
}

template <class Arch>
void scores(const float* q, std::size_t rows, std::size_t dk, const float* packed, std::size_t from, std::size_t to,
            float* s, std::size_t lds) {
    using T = Tiles<Arch>;
    constexpr std::size_t R = T::score_rows, NV = T::score_vectors;
    constexpr std::size_t width = NV * xsimd::batch<float, Arch>::size;
    static_assert(panel % width == 0, "a tile lies within one panel");
    const std::size_t whole = rows / R * R;
    // key tiles outside, row tiles inside: a tile's K (dk × width) and the rows of Q stay in cache
    for (std::size_t t0 = from / width * width; t0 < to; t0 += width) {
        for (std::size_t r = 0; r < whole; r += R)
            score_rows<Arch, R, NV>(q + r * dk, dk, packed, t0, from, to, s + r * lds, lds);
        if (whole < rows)
            with_rest<R>(
                rows - whole,
                [&]<std::size_t Rest>() {
                    score_rows<Arch, Rest, NV>(q + whole * dk, dk, packed, t0, from, to, s + whole * lds, lds);
                },
                std::make_index_sequence<R - 1>{});
    }
}

// R rows of O on NV vectors of its columns: o[r·ldo + c] = Σ_j a[r·ar + j·ac]·v[j·ldv + c] over
// `keys` keys, from 0 (first) or going on from o's partial sums (the same chain). A's
// strides: (lda, 1) as stored, (1, lda) transposed.
template <class Arch, std::size_t R, std::size_t NV>
[[gnu::always_inline]] inline void value_tile(const float* a, std::size_t ar, std::size_t ac, const float* v,
                                              std::size_t ldv, std::size_t keys, float* o, std::size_t ldo,
                                              bool first) {
    using B = xsimd::batch<float, Arch>;
    B acc[R][NV];
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t c = 0; c < NV; ++c) acc[r][c] = first ? B(0.0f) : B::load_unaligned(o + r * ldo + c * B::size);
    for (std::size_t j = 0; j < keys; ++j) {
        B x[NV];
        for (std::size_t c = 0; c < NV; ++c) x[c] = B::load_unaligned(v + j * ldv + c * B::size);
        for (std::size_t r = 0; r < R; ++r) {
            const B w(a[r * ar + j * ac]);
            for (std::size_t c = 0; c < NV; ++c) acc[r][c] = fused<Arch>(w, x[c], acc[r][c]);
        }
    }
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t c = 0; c < NV; ++c) acc[r][c].store_unaligned(o + r * ldo + c * B::size);
}

template <class Arch, std::size_t NV>
void value_columns(const float* a, std::size_t ar, std::size_t ac, std::size_t rows, const float* v, std::size_t ldv,
                   std::size_t keys, float* o, std::size_t ldo, bool accumulate) {
    constexpr std::size_t R = Tiles<Arch>::value_rows, chunk = Tiles<Arch>::value_keys;
    const std::size_t whole = rows / R * R;
    // chunks of keys outside, row tiles inside: a chunk of V stays in cache for all the rows
    // (V whole, a long sequence's, would be read from memory again for every row tile); no
    // keys: one pass of none, O = 0 (or as it was, accumulating)
    for (std::size_t j0 = 0; j0 < keys || j0 == 0; j0 += chunk) {
        const std::size_t n = std::min(chunk, keys - j0);
        const float* vj = v + j0 * ldv;
        const bool first = j0 == 0 && !accumulate;
        for (std::size_t r = 0; r < whole; r += R)
            value_tile<Arch, R, NV>(a + r * ar + j0 * ac, ar, ac, vj, ldv, n, o + r * ldo, ldo, first);
        if (whole < rows)
            with_rest<R>(
                rows - whole,
                [&]<std::size_t Rest>() {
                    value_tile<Arch, Rest, NV>(a + whole * ar + j0 * ac, ar, ac, vj, ldv, n, o + whole * ldo, ldo,
                                               first);
                },
                std::make_index_sequence<R - 1>{});
    }
}

template <class Arch>
void product(const float* a, std::size_t ar, std::size_t ac, std::size_t rows, const float* v, std::size_t ldv,
             std::size_t keys, std::size_t dv, float* o, std::size_t ldo, bool accumulate) {
    constexpr std::size_t W = xsimd::batch<float, Arch>::size, NV = Tiles<Arch>::value_vectors;
    static_assert(NV <= 4);
    for (std::size_t c = 0; c < dv; c += NV * W) {
        switch (std::min(NV, (dv - c) / W)) {  // the last columns: fewer vectors
            case 4:
                value_columns<Arch, 4>(a, ar, ac, rows, v + c, ldv, keys, o + c, ldo, accumulate);
                break;
            case 3:
                value_columns<Arch, 3>(a, ar, ac, rows, v + c, ldv, keys, o + c, ldo, accumulate);
                break;
            case 2:
                value_columns<Arch, 2>(a, ar, ac, rows, v + c, ldv, keys, o + c, ldo, accumulate);
                break;
            default:
                value_columns<Arch, 1>(a, ar, ac, rows, v + c, ldv, keys, o + c, ldo, accumulate);
                break;
        }
    }
}

template <class Arch>
void weighted_sum(const float* a, std::size_t lda, std::size_t rows, const float* v, std::size_t keys, std::size_t dv,
                  float* o) {
    product<Arch>(a, lda, 1, rows, v, dv, keys, dv, o, dv, false);
}

template <class Arch>
constexpr Kernels kernels_for(const char* isa) {
    return Kernels{isa, xsimd::batch<float, Arch>::size, &scores<Arch>, &weighted_sum<Arch>, &product<Arch>};
}

}  // namespace attngraph::attention_gemm::detail
