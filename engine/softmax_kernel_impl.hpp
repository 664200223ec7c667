#pragma once
// The body of softmax_rows for one xsimd architecture. Included only by the
// softmax_kernel*.cpp files, each compiled for its instruction set.
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "engine/simd_exp.hpp"
#include "engine/softmax_kernel.hpp"

namespace attngraph::softmax_detail {

// One row in three passes: y = scale·x and its maximum; y = exp(y - max) and their sum;
// y *= 1/sum. The tail (len % lanes) goes through a padded batch so every value takes the
// same exp.
//
// exp through simd_exp (engine/simd_exp.hpp): -inf (a masked score, the tail's padding), a
// huge negative difference and NaN take no undefined path through xsimd's exp, and every
// argument in [-1000, 0] (all the others here) gives xsimd::exp's bits.

// What a row whose maximum is -inf gives: 0 when every value is -inf (a fully masked row), NaN
// when one is NaN (the maximum passes NaN by; numpy and PyTorch give NaN there).
template <class T>
T no_max_fill(const T* v, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i)
        if (v[i] != v[i]) return std::numeric_limits<T>::quiet_NaN();
    return T(0);
}

// softmax_row on a row shorter than a batch (a tiny graph's): the whole row is the padded
// tail, and this is softmax_row's arithmetic on it without the passes over an empty body
// (the body's sum is +0, as hadd of a zero batch gives). y may be x.
template <class Arch, class T>
void softmax_short_row(const T* x, T* y, std::size_t len, T scale, bool scaled) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::size_t lanes = B::size;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    alignas(64) T part[lanes];
    T mx = neg_inf;
    for (std::size_t i = 0; i < len; ++i) {
        const T v = scaled ? scale * x[i] : x[i];
        part[i] = v;
        mx = mx < v ? v : mx;
    }
    if (mx == neg_inf) {
        const T fill = no_max_fill(part, len);
        for (std::size_t i = 0; i < len; ++i) y[i] = fill;
        return;
    }
    for (std::size_t i = len; i < lanes; ++i) part[i] = neg_inf;
    simd_exp(B::load_aligned(part) - B::broadcast(mx)).store_aligned(part);
    T sum = T(0);
    for (std::size_t i = 0; i < len; ++i) sum += part[i];
    const T inv = T(1) / sum;
    for (std::size_t i = 0; i < len; ++i) y[i] = part[i] * inv;
}

template <class Arch, class T>
void softmax_row(const T* x, T* y, std::size_t len, T scale, bool scaled) {
    if (len < xsimd::batch<T, Arch>::size) return softmax_short_row<Arch, T>(x, y, len, scale, scaled);
    using B = xsimd::batch<T, Arch>;
    constexpr std::size_t lanes = B::size;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const std::size_t body = len - len % lanes;
    alignas(64) T tail[lanes];

    B vmax = B::broadcast(neg_inf);
    const B vscale = B::broadcast(scale);
    for (std::size_t i = 0; i < body; i += lanes) {
        B v = B::load_unaligned(x + i);
        if (scaled) v = vscale * v;
        v.store_unaligned(y + i);
        vmax = xsimd::max(vmax, v);
    }
    vmax.store_aligned(tail);
    T mx = neg_inf;
    for (std::size_t i = 0; i < lanes; ++i) mx = mx < tail[i] ? tail[i] : mx;
    for (std::size_t i = body; i < len; ++i) {
        const T v = scaled ? scale * x[i] : x[i];
        y[i] = v;
        mx = mx < v ? v : mx;
    }
    if (mx == neg_inf) {
        const T fill = no_max_fill(y, len);
        for (std::size_t i = 0; i < len; ++i) y[i] = fill;
        return;
    }

    const B vmx = B::broadcast(mx);
    B vsum = B::broadcast(T(0));
    for (std::size_t i = 0; i < body; i += lanes) {
        const B e = simd_exp(B::load_unaligned(y + i) - vmx);
        e.store_unaligned(y + i);
        vsum += e;
    }
    T sum = xsimd::hadd(vsum);
    if (body < len) {
        for (std::size_t i = 0; i < lanes; ++i) tail[i] = body + i < len ? y[body + i] : neg_inf;
        const B e = simd_exp(B::load_aligned(tail) - vmx);
        e.store_aligned(tail);
        for (std::size_t i = body; i < len; ++i) {
            y[i] = tail[i - body];
            sum += y[i];
        }
    }

    const B vinv = B::broadcast(T(1) / sum);
    for (std::size_t i = 0; i < body; i += lanes) (B::load_unaligned(y + i) * vinv).store_unaligned(y + i);
    const T inv = T(1) / sum;
    for (std::size_t i = body; i < len; ++i) y[i] *= inv;
}

// softmax_row on a row of `len` values that are -inf outside the span [first, end) of
// columns, given only that span: x and y point at column `first` and hold end - first values.
// y gets what softmax_row gives on those columns, bit for bit (it gives 0 on the others):
// every column sits in the lane it has in softmax_row (column c in lane c % lanes of the
// batch at c - c % lanes, and columns from len - len % lanes on in the padded tail), a batch
// the span only partly covers is padded with -inf as the masked columns are, and the batches
// the span misses would only have added exp(-inf) = 0 to the sums. With `scaled`, the values
// are scale·x inside the span and -inf outside (a Mask after a Scale), whatever the sign of
// scale.
//
// `last`, when not null, is the value of column len - 1 (a sink logit after the keys, never
// scaled; the span then ends before it): it joins the row in its lane, the body's last batch
// or the tail (added to the tail's sum last, as softmax_row adds it), and gets its weight
// back. An empty span (first == end) then leaves the row to that column alone.
template <class Arch, class T>
void softmax_span_row(const T* x, T* y, std::size_t first, std::size_t end, std::size_t len, T scale, bool scaled,
                      T* last) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::size_t lanes = B::size;
    if (len < lanes && first == 0 && end == len && !last) return softmax_short_row<Arch, T>(x, y, len, scale, scaled);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const std::size_t body = len - len % lanes, count = end - first;
    alignas(64) T part[lanes];
    const B vscale = B::broadcast(scale);
    if (last && first == end) first = end = len - 1;  // no key: only the last column's batch
    const std::size_t a0 = first - first % lanes, body_end = end < body ? end : body;
    auto whole = [&](std::size_t a) { return a >= first && a + lanes <= end; };
    // the last column's value through the passes; its batch when the body holds it and the
    // span's batches do not reach it
    const std::size_t last_col = len - 1;
    T last_v = last ? *last : neg_inf;
    const bool last_batch = last && last_col < body && body_end <= last_col - last_col % lanes;
    const bool last_in_tail = last && last_col >= body;
    // a batch of the body the span covers only partly (or the last column's), through `part`
    auto load_part = [&](const T* src, std::size_t a, bool scale_it) {
        for (std::size_t k = 0; k < lanes; ++k) {
            const std::size_t c = a + k;
            part[k] = c >= first && c < end        ? (scale_it ? scale * src[c - first] : src[c - first])
                      : last && c == last_col ? last_v
                                              : neg_inf;
        }
        return B::load_aligned(part);
    };
    auto store_part = [&](const B& v, T* dst, std::size_t a) {
        v.store_aligned(part);
        for (std::size_t k = 0; k < lanes; ++k) {
            if (a + k >= first && a + k < end) dst[a + k - first] = part[k];
            if (last && a + k == last_col) last_v = part[k];
        }
    };

    B vmax = B::broadcast(neg_inf);
    for (std::size_t a = a0; a < body_end; a += lanes) {
        B v;
        if (whole(a)) {
            v = B::load_unaligned(x + (a - first));
            if (scaled) v = vscale * v;
            v.store_unaligned(y + (a - first));
        } else {
            v = load_part(x, a, scaled);
            store_part(v, y, a);
        }
        vmax = xsimd::max(vmax, v);
    }
    if (last_batch) vmax = xsimd::max(vmax, load_part(x, last_col - last_col % lanes, false));
    vmax.store_aligned(part);
    T mx = neg_inf;
    for (std::size_t i = 0; i < lanes; ++i) mx = mx < part[i] ? part[i] : mx;
    for (std::size_t c = first > body ? first : body; c < end; ++c) {
        const T v = scaled ? scale * x[c - first] : x[c - first];
        y[c - first] = v;
        mx = mx < v ? v : mx;
    }
    if (last_in_tail) mx = mx < last_v ? last_v : mx;
    if (mx == neg_inf) {
        const T fill = last_v != last_v ? last_v : no_max_fill(y, count);
        for (std::size_t i = 0; i < count; ++i) y[i] = fill;
        if (last) *last = fill;
        return;
    }

    const B vmx = B::broadcast(mx);
    B vsum = B::broadcast(T(0));
    for (std::size_t a = a0; a < body_end; a += lanes) {
        if (whole(a)) {
            const B e = simd_exp(B::load_unaligned(y + (a - first)) - vmx);
            e.store_unaligned(y + (a - first));
            vsum += e;
        } else {
            const B e = simd_exp(load_part(y, a, false) - vmx);
            store_part(e, y, a);
            vsum += e;
        }
    }
    if (last_batch) {  // after the span's batches, as softmax_row's last batch
        const std::size_t a = last_col - last_col % lanes;
        const B e = simd_exp(load_part(y, a, false) - vmx);
        store_part(e, y, a);
        vsum += e;
    }
    T sum = xsimd::hadd(vsum);
    if (end > body || last_in_tail) {
        for (std::size_t k = 0; k < lanes; ++k) {
            const std::size_t c = body + k;
            part[k] = c >= first && c < end ? y[c - first] : last && c == last_col ? last_v : neg_inf;
        }
        const B e = simd_exp(B::load_aligned(part) - vmx);
        e.store_aligned(part);
        for (std::size_t c = first > body ? first : body; c < end; ++c) {
            y[c - first] = part[c - body];
            sum += y[c - first];
        }
        if (last_in_tail) {
            last_v = part[last_col - body];
            sum += last_v;
        }
    }

    const T inv = T(1) / sum;
    const B vinv = B::broadcast(inv);
    std::size_t i = 0;
    for (; i + lanes <= count; i += lanes) (B::load_unaligned(y + i) * vinv).store_unaligned(y + i);
    for (; i < count; ++i) y[i] *= inv;
    if (last) *last = last_v * inv;
}

template <class Arch, class T>
void SpanKernel::operator()(Arch, const T* x, std::size_t ldx, T* y, std::size_t ldy, std::size_t col0,
                            std::size_t rows, const std::size_t* lo, const std::size_t* hi, std::size_t len, T scale,
                            bool scaled, T* last) const {
    for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t at = lo[r] < hi[r] ? lo[r] - col0 : 0;  // an empty span reads nothing
        if (lo[r] < hi[r] || last)
            softmax_span_row<Arch, T>(x + r * ldx + at, y + r * ldy + at, lo[r], hi[r], len, scale, scaled,
                                      last ? last + r : nullptr);
    }
}

template <class Arch, class T>
void Kernel::operator()(Arch, const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled) const {
    for (std::size_t r = 0; r < rows; ++r) softmax_row<Arch, T>(x + r * len, y + r * len, len, scale, scaled);
}

#define ATTNGRAPH_SOFTMAX_INSTANTIATE(ARCH)                                                                          \
    template void Kernel::operator()<ARCH, float>(ARCH, const float*, float*, std::size_t, std::size_t, float, bool) \
        const;                                                                                                       \
    template void Kernel::operator()<ARCH, double>(ARCH, const double*, double*, std::size_t, std::size_t, double,   \
                                                   bool) const;                                                      \
    template void SpanKernel::operator()<ARCH, float>(ARCH, const float*, std::size_t, float*, std::size_t,          \
                                                      std::size_t, std::size_t, const std::size_t*,                  \
                                                      const std::size_t*, std::size_t, float, bool, float*) const;   \
    template void SpanKernel::operator()<ARCH, double>(ARCH, const double*, std::size_t, double*, std::size_t,       \
                                                       std::size_t, std::size_t, const std::size_t*,                 \
                                                       const std::size_t*, std::size_t, double, bool, double*) const;

}  // namespace attngraph::softmax_detail
