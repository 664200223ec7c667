// Div: y = a / b, elementwise with numpy broadcasting (IEEE: x/0 is ±inf, 0/0 NaN).
// Legend: a and b broadcast to y's shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct DivAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::DivAttrs);

namespace attngraph::ops {

struct Div : BinaryOp<Div, DivAttrs> {
    static constexpr const char* name = "Div";
    using Attrs = DivAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + " / " + v[1]; }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        return a / b;
    }
    // in the forward pass this was: y = a / b. da += dy / b, db -= dy · a / b²
    template <class T>
    static T partial_a(const Attrs&, T a, T b, T y) {
        return T(1) / b;
    }
    template <class T>
    static T partial_b(const Attrs&, T a, T b, T y) {
        return -y / b;
    }
};

}  // namespace attngraph::ops
