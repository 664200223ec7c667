// Equal: y = 1 where a == b, else 0, elementwise with numpy broadcasting (a mask built from
// position indices: q_idx >= kv_idx, doc[q] == doc[kv]). Legend: a and b broadcast to y's
// shape. ONNX gives a bool tensor; here 0/1 in the graph's float type, which Where and Mask
// read as false/true. Neither input gets a gradient.
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct EqualAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::EqualAttrs);

namespace attngraph::ops {

struct Equal : CompareOp<Equal, EqualAttrs> {
    static constexpr const char* name = "Equal";
    using Attrs = EqualAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) {
        return "(" + v[0] + " == " + v[1] + ")";
    }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        return a == b ? T(1) : T(0);
    }
};

}  // namespace attngraph::ops
