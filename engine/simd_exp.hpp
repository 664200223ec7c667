#pragma once
// e^x, tanh x, erf x, ln x and x^p on an xsimd batch for every x. xsimd::exp converts its reduced
// argument to an integer, which is undefined behaviour for NaN, ±inf and huge magnitudes
// (UBSan reports it; in double, where SSE2 and AVX2 convert lane by lane in C++); xsimd's
// tanh, erf and pow call that exp on what they are given (tanh(±inf), erf(1e200), pow(inf, p),
// any of them on NaN), and xsimd's trunc, which pow's integer test takes, converts the same way.
//
// simd_exp: the argument is clamped to [-1000, 1000] first (exp(±1000) is 0 and inf in float
// and double, as exp of anything beyond is, so no finite x changes its result) and a NaN
// passes around exp (inside, it is -1000). simd_tanh and simd_erf: the same clamp (tanh and
// erf are ±1 there in float and double) and NaN around. simd_pow: xsimd::pow's arithmetic
// through simd_exp, its integer tests on the scalar exponent in C++, and the C library's
// (numpy's) values where x is ±0, ±inf or NaN, or p is 0 (xsimd gives pow(0, 0) = 0, pow(0, -1) = 0, pow(-inf, 0.5) =
// NaN, pow(NaN, 0) = NaN; C gives 1, inf, inf, 1). Every other x gets xsimd::pow's bits.
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace attngraph {

// (always inlined, as xsimd::exp was where this is called: out of line, GCC 12 warns on the
// AVX-512 intrinsics' _mm512_undefined_* inside it, its bug 105593)
namespace simd_detail {
/// x clamped to [-1000, 1000], NaN to -1000: xsimd's max is the max instruction (SSE2's
/// maxps/maxpd, AVX's, AVX-512's), which gives its second operand where either is NaN.
template <class B>
[[gnu::always_inline]] inline B clamp_1000(const B& x) {
    using T = typename B::value_type;
    return xsimd::min(xsimd::max(x, B::broadcast(T(-1000))), B::broadcast(T(1000)));
}
}  // namespace simd_detail

template <class B>
[[gnu::always_inline]] inline B simd_exp(const B& x) {
    const auto nan = xsimd::isnan(x);
    return xsimd::select(nan, x, xsimd::exp(simd_detail::clamp_1000(x)));
}

template <class B>
[[gnu::always_inline]] inline B simd_tanh(const B& x) {
    const auto nan = xsimd::isnan(x);
    return xsimd::select(nan, x, xsimd::tanh(simd_detail::clamp_1000(x)));
}

template <class B>
[[gnu::always_inline]] inline B simd_erf(const B& x) {
    const auto nan = xsimd::isnan(x);
    return xsimd::select(nan, x, xsimd::erf(simd_detail::clamp_1000(x)));
}

/// ln x. xsimd::log (xsimd 8) reads a double's exponent before it scales a subnormal x up, and
/// gives ln(2^-1074)-ish garbage for every subnormal double (log(1e-310) = -746.5, not -713.8):
/// a subnormal double is scaled by 2^54 here first and 54·ln 2 taken off (floats were right).
template <class B>
[[gnu::always_inline]] inline B simd_log(const B& x) {
    using T = typename B::value_type;
    if constexpr (std::is_same_v<T, double>) {
        const auto sub = x > B::broadcast(0.0) && x < B::broadcast(std::numeric_limits<double>::min());
        if (xsimd::any(sub)) {
            const B two54 = B::broadcast(18014398509481984.0);  // 2^54
            // 54·ln 2 in two parts (fdlibm's ln2_hi, ln2_lo): the high part's product is exact
            const B hi = B::broadcast(54 * 6.93147180369123816490e-01),
                    lo = B::broadcast(54 * 1.90821492927058770002e-10);
            const B r = xsimd::log(xsimd::select(sub, x * two54, x));
            return xsimd::select(sub, (r - hi) - lo, r);
        }
    }
    return xsimd::log(x);
}

/// x^p for a scalar p.
template <class B>
inline B simd_pow(const B& x, typename B::value_type p) {
    using T = typename B::value_type;
    if (p == 0) return B::broadcast(T(1));  // every x, NaN too (C, numpy)
    if (!std::isfinite(p)) {
        alignas(64) T xs[B::size];
        x.store_aligned(xs);
        for (std::size_t k = 0; k < B::size; ++k) xs[k] = std::pow(xs[k], p);
        return B::load_aligned(xs);
    }
    // xsimd::pow (xsimd 8, arch/generic/xsimd_generic_math.hpp), exp through simd_exp
    const B zero = B::broadcast(T(0)), vp = B::broadcast(p);
    const auto negx = x < zero;
    const auto iszero = x == zero;
    const B adj = xsimd::select(iszero, B::broadcast(static_cast<T>(2.718281828459045)), xsimd::abs(x));
    B z = simd_exp(vp * simd_log(adj));  // (x = ±0 lanes: C's value below)
    const bool integral = std::trunc(p) == p, odd = integral && std::fmod(std::abs(p), T(2)) == T(1);
    if (odd) z = xsimd::select(negx, -z, z);
    if (!integral) z = xsimd::select(negx, B::broadcast(std::numeric_limits<T>::quiet_NaN()), z);
    // ±0, ±inf, NaN: the C library's pow
    const auto special = iszero || !xsimd::isfinite(x);
    if (xsimd::any(special)) {
        alignas(64) T xs[B::size], zs[B::size];
        x.store_aligned(xs);
        z.store_aligned(zs);
        for (std::size_t k = 0; k < B::size; ++k)
            if (xs[k] == T(0) || !std::isfinite(xs[k])) zs[k] = std::pow(xs[k], p);
        z = B::load_aligned(zs);
    }
    return z;
}

}  // namespace attngraph
