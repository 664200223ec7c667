// Sigmoid: y = 1 / (1 + e^-x) (torch exports SiLU, x·σ(x), as Sigmoid and Mul). Elementwise;
// x and y have one shape.
#pragma once
#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SigmoidAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SigmoidAttrs);

namespace attngraph::ops {

struct Sigmoid : UnaryOp<Sigmoid, SigmoidAttrs> {
    static constexpr const char* name = "Sigmoid";
    using Attrs = SigmoidAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "sigmoid(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        // e^-x through simd_exp (clamped: no undefined path for NaN, ±inf): x = -inf gives
        // 1 / inf = 0, x = inf 1 / 1 = 1
        return B(1) / (B(1) + simd_exp(-x));
    }
    // in the forward pass this was: y = σ(x). dx += dy · y(1 - y)
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return y * (T(1) - y);
    }
};

}  // namespace attngraph::ops
