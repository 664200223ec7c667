// Neg: y = -x. Elementwise; x and y have one shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct NegAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::NegAttrs);

namespace attngraph::ops {

struct Neg : UnaryOp<Neg, NegAttrs> {
    static constexpr const char* name = "Neg";
    using Attrs = NegAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "-" + v[0]; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return -x;
    }
    // in the forward pass this was: y = -x. dx += -dy
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return T(-1);
    }
};

}  // namespace attngraph::ops
