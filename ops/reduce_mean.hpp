// ReduceMean: y = the mean of x over the reduced axes (Σ x / count).
// ONNX semantics: `axes` (absent or empty: every axis, unless noop_with_empty_axes = 1), `keepdims`
// (default 1). Legend: x reduced along axes to y.
#pragma once
#include "ops/reduce.hpp"

namespace attngraph::ops {
ATTNGRAPH_REDUCE_ATTRS(ReduceMeanAttrs)
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReduceMeanAttrs, axes, keepdims, noop_with_empty_axes);

namespace attngraph::ops {

struct ReduceMean : ReduceOp<ReduceKind::mean, ReduceMeanAttrs> {
    static constexpr const char* name = "ReduceMean";
    using Attrs = ReduceMeanAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return reduce_formula("mean", a, v[0]);
    }
};

}  // namespace attngraph::ops
