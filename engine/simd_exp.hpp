#pragma once
// e^x on an xsimd batch for every x. xsimd::exp converts its reduced argument to an integer,
// which is undefined behaviour for NaN, ±inf and huge magnitudes (UBSan reports it): the
// argument is clamped to [-1000, 1000] first (exp(±1000) is 0 and inf in float and double, as
// exp of anything beyond is, so no finite x changes its result) and a NaN passes around exp.
#include <xsimd/xsimd.hpp>

namespace attngraph {

// (always inlined, as xsimd::exp was where this is called: out of line, GCC 12 warns on the
// AVX-512 intrinsics' _mm512_undefined_* inside it, its bug 105593)
template <class B>
[[gnu::always_inline]] inline B simd_exp(const B& x) {
    using T = typename B::value_type;
    const auto nan = xsimd::isnan(x);
    const B lo = B::broadcast(T(-1000)), hi = B::broadcast(T(1000));
    const B clamped = xsimd::select(x < lo, lo, xsimd::select(x > hi, hi, x));
    return xsimd::select(nan, x, xsimd::exp(xsimd::select(nan, B::broadcast(T(0)), clamped)));
}

}  // namespace attngraph
