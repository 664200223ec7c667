// Sin: y = sin x (x in radians). Elementwise; x and y have one shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SinAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SinAttrs);

namespace attngraph::ops {

struct Sin : UnaryOp<Sin, SinAttrs> {
    static constexpr const char* name = "Sin";
    using Attrs = SinAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "sin(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return xsimd::sin(x);
    }
    // in the forward pass this was: y = sin x. dx += dy · cos x
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return std::cos(x);
    }
};

}  // namespace attngraph::ops
