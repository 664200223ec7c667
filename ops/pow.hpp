// Pow: y = x^p for a scalar exponent p (attribute `exponent`), elementwise. A negative base to
// a fractional power gives NaN (as in C and ONNX); `run --check-finite` names the node.
// ONNX's Pow takes the exponent as a second input tensor; the ONNX importer passes a constant
// scalar exponent here.
#pragma once
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
        return xsimd::pow(x, B(static_cast<typename B::value_type>(p)));
    }
    // in the forward pass this was: y = x^p. dx += dy · p · x^(p-1)
    template <class T>
    static T derivative(const Attrs& a, T x, T) {
        const double p = a.exponent;
        if (p == 1) return T(1);
        if (p == 2) return T(2) * x;
        return static_cast<T>(p) * std::pow(x, static_cast<T>(p - 1));
    }
};

}  // namespace attngraph::ops
