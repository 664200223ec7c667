#pragma once
// Whether values hold an inf or a NaN, in one pass over their bits. A loop of float
// comparisons (x·0 != 0, x != x) stays scalar under g++'s default -ftrapping-math, one value
// a cycle; integer tests of the exponent field vectorise. The fused attention step checks
// V, and its backward each step's operands, before every run.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace attngraph {

namespace finite_detail {

template <class T>
struct Bits;
template <>
struct Bits<float> {
    using U = std::uint32_t;
    static constexpr U exponent = 0x7f800000u, magnitude = 0x7fffffffu;
};
template <>
struct Bits<double> {
    using U = std::uint64_t;
    static constexpr U exponent = 0x7ff0000000000000u, magnitude = 0x7fffffffffffffffu;
};

}  // namespace finite_detail

/// @brief Whether one of the `count` values at `x` is an inf or a NaN (with `nan_only`: a NaN).
template <class T>
bool any_not_finite(const T* x, std::size_t count, bool nan_only = false) {
    using B = finite_detail::Bits<T>;
    using U = typename B::U;
    U bad = 0;  // (an integer OR over the values: no branch, no early exit, so it vectorises)
    if (nan_only)
        for (std::size_t i = 0; i < count; ++i) bad |= (std::bit_cast<U>(x[i]) & B::magnitude) > B::exponent;
    else
        for (std::size_t i = 0; i < count; ++i) bad |= (std::bit_cast<U>(x[i]) & B::exponent) == B::exponent;
    return bad != 0;
}

}  // namespace attngraph
