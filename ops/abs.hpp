// Abs: y = |x| (ONNX Abs). Elementwise; x and y have one shape. A NaN stays NaN (numpy.abs).
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct AbsAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::AbsAttrs);

namespace attngraph::ops {

struct Abs : UnaryOp<Abs, AbsAttrs> {
    static constexpr const char* name = "Abs";
    using Attrs = AbsAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "abs(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return xsimd::abs(x);  // (clears the sign bit: -0 is 0, NaN stays NaN)
    }
    // in the forward pass this was: y = |x|. dx += dy · sign(x), 0 at x = 0 and at NaN (as
    // PyTorch's abs backward, whose sgn(NaN) is 0)
    template <class T>
    static T derivative(const Attrs&, T x, T) {
        return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
    }
};

}  // namespace attngraph::ops
