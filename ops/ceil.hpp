// Ceil: y = the smallest integer ≥ x (ONNX Ceil, numpy.ceil, torch.ceil); NaN and ±inf stay
// themselves. Elementwise; x and y have one shape. A step function: x gets no gradient
// (torch.ceil's is 0).
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct CeilAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::CeilAttrs);

namespace attngraph::ops {

struct Ceil : StepOp<Ceil, CeilAttrs> {
    static constexpr const char* name = "Ceil";
    using Attrs = CeilAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "ceil(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return lanewise(x, [](auto v) { return std::ceil(v); });  // (see lanewise)
    }
};

}  // namespace attngraph::ops
