// Round: y = x rounded to the nearest integer, halves to the even one (ONNX Round, numpy.round,
// torch.round: 2.5 → 2, −0.5 → −0). NaN and ±inf stay themselves. Elementwise; x and y have one
// shape. A step function: x gets no gradient (torch.round's is 0).
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct RoundAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::RoundAttrs);

namespace attngraph::ops {

struct Round : StepOp<Round, RoundAttrs> {
    static constexpr const char* name = "Round";
    using Attrs = RoundAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "round(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        // in the default rounding mode: to nearest, ties to even (see lanewise)
        return lanewise(x, [](auto v) { return std::nearbyint(v); });
    }
};

}  // namespace attngraph::ops
