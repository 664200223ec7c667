// Cos: y = cos x (x in radians). Elementwise; x and y have one shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct CosAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::CosAttrs);

namespace attngraph::ops {

struct Cos : UnaryOp<Cos, CosAttrs> {
    static constexpr const char* name = "Cos";
    using Attrs = CosAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "cos(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return xsimd::cos(x);
    }
    // in the forward pass this was: y = cos x. dx += -dy · sin x
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return -std::sin(x);
    }
};

}  // namespace attngraph::ops
