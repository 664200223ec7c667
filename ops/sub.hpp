// Sub: y = a - b, elementwise with numpy broadcasting (differential attention's A1 - λ·A2).
// Legend: a and b broadcast to y's shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SubAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SubAttrs);

namespace attngraph::ops {

struct Sub : BinaryOp<Sub, SubAttrs> {
    static constexpr const char* name = "Sub";
    using Attrs = SubAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + " - " + v[1]; }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        return a - b;
    }
    // in the forward pass this was: y = a - b. da += dy, db -= dy
    template <class T>
    static T partial_a(const Attrs&, T a, T b, T y) {
        return T(1);
    }
    template <class T>
    static T partial_b(const Attrs&, T a, T b, T y) {
        return T(-1);
    }
};

}  // namespace attngraph::ops
