// Erf: y = erf x, the Gauss error function (the exact GELU, x·½(1 + erf(x/√2)), as
// torch.onnx.export writes it). Elementwise; x and y have one shape.
#pragma once
#include <cmath>
#include <numbers>

#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ErfAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ErfAttrs);

namespace attngraph::ops {

struct Erf : UnaryOp<Erf, ErfAttrs> {
    static constexpr const char* name = "Erf";
    using Attrs = ErfAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "erf(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return simd_erf(x);  // (NaN, ±inf, huge: no undefined path through xsimd::exp)
    }
    // in the forward pass this was: y = erf x. dx += dy · 2/√π · e^(−x²)
    template <class T>
    static T derivative(const Attrs&, T x, T) {
        return T(2 / std::sqrt(std::numbers::pi)) * std::exp(-x * x);
    }
};

}  // namespace attngraph::ops
