// Floor: y = the largest integer ≤ x (ONNX Floor, numpy.floor, torch.floor); NaN and ±inf stay
// themselves. Elementwise; x and y have one shape. A step function: x gets no gradient
// (torch.floor's is 0).
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct FloorAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::FloorAttrs);

namespace attngraph::ops {

struct Floor : StepOp<Floor, FloorAttrs> {
    static constexpr const char* name = "Floor";
    using Attrs = FloorAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "floor(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return lanewise(x, [](auto v) { return std::floor(v); });  // (see lanewise)
    }
};

}  // namespace attngraph::ops
