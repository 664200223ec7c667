// Sqrt: y = √x (NaN below 0). Elementwise; x and y have one shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SqrtAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SqrtAttrs);

namespace attngraph::ops {

struct Sqrt : UnaryOp<Sqrt, SqrtAttrs> {
    static constexpr const char* name = "Sqrt";
    using Attrs = SqrtAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "sqrt(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return xsimd::sqrt(x);
    }
    // in the forward pass this was: y = √x. dx += dy / (2y)
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return T(0.5) / y;
    }
};

}  // namespace attngraph::ops
