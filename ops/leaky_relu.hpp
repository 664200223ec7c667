// LeakyRelu: y = x where x > 0, alpha·x elsewhere (ONNX LeakyRelu, torch's leaky_relu).
// Elementwise; x and y have one shape. A NaN stays NaN.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct LeakyReluAttrs {
    double alpha = 0.01;  ///< the slope below 0 (ONNX's default)
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::LeakyReluAttrs, alpha);

namespace attngraph::ops {

struct LeakyRelu : UnaryOp<LeakyRelu, LeakyReluAttrs> {
    static constexpr const char* name = "LeakyRelu";
    using Attrs = LeakyReluAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "leaky_relu(" + v[0] + ", " + format_number(a.alpha) + ")";
    }

    template <class B>
    static B apply(const Attrs& a, const B& x) {
        using T = typename B::value_type;
        return xsimd::select(x > B(T(0)), x, x * B(static_cast<T>(a.alpha)));  // (NaN · alpha is NaN)
    }
    // in the forward pass this was: y = x > 0 ? x : alpha·x. dx += dy where x > 0, dy · alpha
    // elsewhere: at x = 0 and at NaN too (as torch's leaky_relu backward)
    template <class T>
    static T derivative(const Attrs& a, T x, T) {
        return x > T(0) ? T(1) : static_cast<T>(a.alpha);
    }
};

}  // namespace attngraph::ops
