// Relu: y = max(x, 0) (nn.TransformerEncoderLayer's default activation; ONNX Relu). Elementwise;
// x and y have one shape. A NaN stays NaN (as torch.relu and numpy's maximum give).
#pragma once
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ReluAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReluAttrs);

namespace attngraph::ops {

struct Relu : UnaryOp<Relu, ReluAttrs> {
    static constexpr const char* name = "Relu";
    using Attrs = ReluAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "relu(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return xsimd::select(x < B(0), B(0), x);  // (NaN < 0 is false: NaN passes through)
    }
    // in the forward pass this was: y = max(x, 0). dx += dy where x > 0 (0 at x = 0, as torch)
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return x > T(0) ? T(1) : T(0);
    }
};

}  // namespace attngraph::ops
