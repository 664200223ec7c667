// Exp: y = e^x. Elementwise; x and y have one shape.
#pragma once
#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ExpAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ExpAttrs);

namespace attngraph::ops {

struct Exp : UnaryOp<Exp, ExpAttrs> {
    static constexpr const char* name = "Exp";
    using Attrs = ExpAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "exp(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return simd_exp(x);  // (NaN, ±inf: no undefined path through xsimd::exp)
    }
    // in the forward pass this was: y = e^x. dx += dy · y
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return y;
    }
};

}  // namespace attngraph::ops
