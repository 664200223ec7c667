// Min: y = min(a, b), elementwise with numpy broadcasting (ONNX Min of two inputs: the
// importer chains more; torch.minimum). A NaN in either operand gives NaN (numpy.minimum).
// Legend: a and b broadcast to y's shape.
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct MinAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::MinAttrs);

namespace attngraph::ops {

// The gradient is torch.minimum's: dy goes to the operand that is the result; on a tie (a == b)
// each gets dy / 2; where a or b is NaN both get dy.
struct Min : BinaryOp<Min, MinAttrs> {
    static constexpr const char* name = "Min";
    using Attrs = MinAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) {
        return "minimum(" + v[0] + ", " + v[1] + ")";
    }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return b < a ? b : a;
    }
    // in the forward pass this was: y = min(a, b). da += dy where a < b, dy / 2 where a == b
    template <class T>
    static T partial_a(const Attrs&, T a, T b, T) {
        return a == b ? T(0.5) : a > b ? T(0) : T(1);
    }
    template <class T>
    static T partial_b(const Attrs&, T a, T b, T) {
        return a == b ? T(0.5) : a < b ? T(0) : T(1);
    }
};

}  // namespace attngraph::ops
