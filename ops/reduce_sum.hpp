// ReduceSum: y = Σ x over the reduced axes.
// ONNX semantics: `axes` (absent or empty: every axis, unless noop_with_empty_axes = 1), `keepdims`
// (default 1). Legend: x reduced along axes to y.
#pragma once
#include "ops/reduce.hpp"

namespace attngraph::ops {
ATTNGRAPH_REDUCE_ATTRS(ReduceSumAttrs)
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReduceSumAttrs, axes, keepdims, noop_with_empty_axes);

namespace attngraph::ops {

struct ReduceSum : ReduceOp<ReduceKind::sum, ReduceSumAttrs> {
    static constexpr const char* name = "ReduceSum";
    using Attrs = ReduceSumAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return reduce_formula("sum", a, v[0]);
    }
};

}  // namespace attngraph::ops
