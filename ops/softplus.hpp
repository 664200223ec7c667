// Softplus: y = ln(1 + e^x) (ONNX Softplus; torch's softplus with beta 1). Elementwise; x and y
// have one shape. Computed as x + log1p(e^-x) for x > 0 and log1p(e^x) otherwise: no overflow
// for large x (y = x to the last bit once e^-x is below half an ulp of x), no loss for very
// negative x (y = e^x, not 0). softplus(inf) = inf, softplus(-inf) = 0, NaN stays NaN.
// (torch returns x itself above its threshold 20; the two differ by e^-x < 2.1e-9 there.)
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct SoftplusAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SoftplusAttrs);

namespace attngraph::ops {

struct Softplus : UnaryOp<Softplus, SoftplusAttrs> {
    static constexpr const char* name = "Softplus";
    using Attrs = SoftplusAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "softplus(" + v[0] + ")"; }

    template <class T>
    static T value(T x) {
        return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        // lane by lane through the C library's exp and log1p (correctly rounded to within an
        // ulp, as numpy's): the same bits wherever the element sits in a chunk
        return lanewise(x, [](auto v) { return value(v); });
    }
    // in the forward pass this was: y = ln(1 + e^x). dx += dy · σ(x), σ(x) = 1 / (1 + e^-x)
    // (e^x / (1 + e^x) below 0, which keeps σ's tiny values there)
    template <class T>
    static T derivative(const Attrs&, T x, T) {
        if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
        const T e = std::exp(x);
        return e / (T(1) + e);
    }
};

}  // namespace attngraph::ops
