// Clip: y = min(max(x, min), max) (ONNX Clip; torch.clamp, ReLU6, hardtanh). Elementwise; x and y
// have one shape. An absent bound is no bound. min > max gives max everywhere (ONNX's rule,
// numpy.clip's). A NaN x stays NaN (numpy.clip).
#pragma once
#include <cmath>
#include <optional>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ClipAttrs {
    std::optional<double> min;  ///< absent: no lower bound
    std::optional<double> max;  ///< absent: no upper bound
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ClipAttrs, min, max);

namespace attngraph::ops {

struct Clip : UnaryOp<Clip, ClipAttrs> {
    static constexpr const char* name = "Clip";
    using Attrs = ClipAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "clip(" + v[0] + ", " + (a.min ? format_number(*a.min) : "-inf") + ", " +
               (a.max ? format_number(*a.max) : "inf") + ")";
    }

    template <class B>
    static B apply(const Attrs& a, const B& x) {
        using T = typename B::value_type;
        B y = x;  // (NaN < lo and NaN > hi are false: NaN passes through)
        if (a.min) y = xsimd::select(y < B(static_cast<T>(*a.min)), B(static_cast<T>(*a.min)), y);
        if (a.max) y = xsimd::select(y > B(static_cast<T>(*a.max)), B(static_cast<T>(*a.max)), y);
        return y;
    }
    // in the forward pass this was: y = min(max(x, lo), hi). dx += dy where lo <= x <= hi, the
    // bounds included (as torch.clamp's backward); 0 outside, at NaN and everywhere when lo > hi
    template <class T>
    static T derivative(const Attrs& a, T x, T) {
        const bool above = !a.min || x >= static_cast<T>(*a.min);
        const bool below = !a.max || x <= static_cast<T>(*a.max);
        return above && below && !std::isnan(x) ? T(1) : T(0);
    }
};

}  // namespace attngraph::ops
