// Pow: y = x^p for a scalar exponent p (attribute `exponent`), elementwise. A negative base to
// a fractional power gives NaN (as in C and ONNX); `run --check-finite` names the node. At
// x = ±0, ±inf, NaN and for p = 0 the values are C's pow's (numpy's): 0^-1 = inf, NaN^0 = 1.
// ONNX's Pow takes the exponent as a second input tensor; the ONNX importer passes a constant
// scalar exponent here.
#pragma once
#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct PowAttrs {
    Required<double> exponent;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::PowAttrs, exponent);

namespace attngraph::ops {

struct Pow : UnaryOp<Pow, PowAttrs> {
    static constexpr const char* name = "Pow";
    using Attrs = PowAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return v[0] + "^" + format_number(a.exponent);
    }

    template <class B>
    static B apply(const Attrs& a, const B& x) {
        const double p = a.exponent;
        if (p == 1) return x;
        if (p == 2) return x * x;  // exact, as a product
        return simd_pow(x, static_cast<typename B::value_type>(p));  // (C's values at ±0, ±inf, NaN)
    }
    // in the forward pass this was: y = x^p. dx += dy · p · x^(p-1)
    template <class T>
    static T derivative(const Attrs& a, T x, T) {
        const double p = a.exponent;
        if (p == 1) return T(1);
        if (p == 0) return T(0);  // (0 · x^-1 would be NaN at x = 0, inf, NaN; PyTorch gives 0)
        if (p == 2) return T(2) * x;
        return static_cast<T>(p) * std::pow(x, static_cast<T>(p - 1));
    }
};

}  // namespace attngraph::ops
