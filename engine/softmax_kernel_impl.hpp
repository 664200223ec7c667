#pragma once
// The body of softmax_rows for one xsimd architecture. Included only by the
// softmax_kernel*.cpp files, each compiled for its instruction set.
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "engine/softmax_kernel.hpp"

namespace attngraph::softmax_detail {

// One row in three passes: y = scale·x and its maximum; y = exp(y - max) and their sum;
// y *= 1/sum. The tail (len % lanes) goes through a padded batch so every value takes the
// same exp.
//
// exp's argument is clamped at -1000: xsimd's exp converts its reduced argument to an integer,
// which for -inf (a masked score, the tail's padding) or a huge negative difference is
// undefined behaviour. exp(-1000) is 0 in float and double, as exp(-inf) is, so the clamp
// changes no result; a NaN passes through (NaN < lo is false).
template <class B>
B exp_arg(const B& d) {
    const B lo = B::broadcast(typename B::value_type(-1000));
    return xsimd::select(d < lo, lo, d);
}

template <class Arch, class T>
void softmax_row(const T* x, T* y, std::size_t len, T scale, bool scaled) {
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
        for (std::size_t i = 0; i < len; ++i) y[i] = T(0);
        return;
    }

    const B vmx = B::broadcast(mx);
    B vsum = B::broadcast(T(0));
    for (std::size_t i = 0; i < body; i += lanes) {
        const B e = xsimd::exp(exp_arg(B::load_unaligned(y + i) - vmx));
        e.store_unaligned(y + i);
        vsum += e;
    }
    T sum = xsimd::hadd(vsum);
    if (body < len) {
        for (std::size_t i = 0; i < lanes; ++i) tail[i] = body + i < len ? y[body + i] : neg_inf;
        const B e = xsimd::exp(exp_arg(B::load_aligned(tail) - vmx));
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

template <class Arch, class T>
void Kernel::operator()(Arch, const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled) const {
    for (std::size_t r = 0; r < rows; ++r) softmax_row<Arch, T>(x + r * len, y + r * len, len, scale, scaled);
}

#define ATTNGRAPH_SOFTMAX_INSTANTIATE(ARCH)                                                                          \
    template void Kernel::operator()<ARCH, float>(ARCH, const float*, float*, std::size_t, std::size_t, float, bool) \
        const;                                                                                                       \
    template void Kernel::operator()<ARCH, double>(ARCH, const double*, double*, std::size_t, std::size_t, double,   \
                                                   bool) const;

}  // namespace attngraph::softmax_detail
