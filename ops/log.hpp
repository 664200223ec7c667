// Log: y = ln x (natural logarithm; -inf at 0, NaN below). Elementwise; x and y have one shape.
#pragma once
#include "engine/simd_exp.hpp"
#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct LogAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::LogAttrs);

namespace attngraph::ops {

struct Log : UnaryOp<Log, LogAttrs> {
    static constexpr const char* name = "Log";
    using Attrs = LogAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "log(" + v[0] + ")"; }

    template <class B>
    static B apply(const Attrs&, const B& x) {
        return simd_log(x);  // (subnormal doubles: xsimd::log is wrong there)
    }
    // in the forward pass this was: y = ln x. dx += dy / x
    template <class T>
    static T derivative(const Attrs&, T x, T y) {
        return T(1) / x;
    }
};

}  // namespace attngraph::ops
