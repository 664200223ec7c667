// Sign: y = 1 where x > 0, −1 where x < 0, 0 at ±0, NaN at NaN (ONNX Sign, numpy.sign; torch.sign
// gives 0 at NaN). Elementwise; x and y have one shape. A step function: x gets no gradient
// (torch.sign's is 0).
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SignAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SignAttrs);

namespace attngraph::ops {

struct Sign : StepOp<Sign, SignAttrs> {
    static constexpr const char* name = "Sign";
    using Attrs = SignAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "sign(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        const B one(1), zero(0);
        // x itself where x is NaN (no comparison holds there)
        return xsimd::select(x > zero, one, xsimd::select(x < zero, -one, xsimd::select(x == zero, zero, x)));
    }
};

}  // namespace attngraph::ops
