// ReduceMax: y = the largest x over the reduced axes. Its gradient goes to the
// first maximum in row-major order when several elements tie (as PyTorch's amax routes to one;
// ONNX defines no gradient).
// ONNX semantics: `axes` (absent or empty: every axis, unless noop_with_empty_axes = 1), `keepdims`
// (default 1). Legend: x reduced along axes to y.
#pragma once
#include "ops/reduce.hpp"

namespace attngraph::ops {
ATTNGRAPH_REDUCE_ATTRS(ReduceMaxAttrs)
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReduceMaxAttrs, axes, keepdims, noop_with_empty_axes);

namespace attngraph::ops {

struct ReduceMax : ReduceOp<ReduceKind::max, ReduceMaxAttrs> {
    static constexpr const char* name = "ReduceMax";
    using Attrs = ReduceMaxAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return reduce_formula("max", a, v[0]);
    }
};

}  // namespace attngraph::ops
