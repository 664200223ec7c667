#pragma once
// Whether values hold an inf or a NaN, in one pass over their bits. A loop of float
// comparisons (x·0 != 0, x != x) stays scalar under g++'s default -ftrapping-math, one value
// a cycle; integer tests of the exponent field vectorise. The fused attention step checks a
// matrix of V when a block first skips keys of it, its backward each step's operands.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace attngraph {

/// @brief Whether one of the `count` values at `x` is an inf or a NaN (with `nan_only`: a NaN).
template <class T>
bool any_not_finite(const T* x, std::size_t count, bool nan_only = false) {
    static_assert(std::numeric_limits<T>::is_iec559);
    using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    constexpr U exponent = std::bit_cast<U>(std::numeric_limits<T>::infinity()), magnitude = U(-1) >> 1;
    U bad = 0;  // (an integer OR over the values: no branch, no early exit, so it vectorises)
    if (nan_only)
        for (std::size_t i = 0; i < count; ++i) bad |= (std::bit_cast<U>(x[i]) & magnitude) > exponent;
    else
        for (std::size_t i = 0; i < count; ++i) bad |= (std::bit_cast<U>(x[i]) & exponent) == exponent;
    return bad != 0;
}

}  // namespace attngraph
