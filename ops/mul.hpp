// Mul: y = a · b, elementwise with numpy broadcasting (RoPE's x·cos, a gate, λ·A).
// Legend: a and b broadcast to y's shape.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct MulAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::MulAttrs);

namespace attngraph::ops {

struct Mul : BinaryOp<Mul, MulAttrs> {
    static constexpr const char* name = "Mul";
    using Attrs = MulAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + " * " + v[1]; }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        return a * b;
    }
    // in the forward pass this was: y = a * b. da += dy · b, db += dy · a
    template <class T>
    static T partial_a(const Attrs&, T a, T b, T y) {
        return b;
    }
    template <class T>
    static T partial_b(const Attrs&, T a, T b, T y) {
        return a;
    }
};

}  // namespace attngraph::ops
