// Tanh: y = tanh x (Gemma-2 softcapping: c·tanh(s/c)). Elementwise; x and y have one shape.
#pragma once
#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct TanhAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::TanhAttrs);

namespace attngraph::ops {

struct Tanh : UnaryOp<Tanh, TanhAttrs> {
    static constexpr const char* name = "Tanh";
    using Attrs = TanhAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "tanh(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return simd_tanh(x);  // (NaN, ±inf, huge: no undefined path through xsimd::exp)
    }
    // in the forward pass this was: y = tanh x. dx += dy · (1 - y²)
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return T(1) - y * y;
    }
};

}  // namespace attngraph::ops
