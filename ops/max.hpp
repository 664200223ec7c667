// Max: y = max(a, b), elementwise with numpy broadcasting (ONNX Max of two inputs: the
// importer chains more; torch.maximum). A NaN in either operand gives NaN (numpy.maximum).
// Legend: a and b broadcast to y's shape.
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct MaxAttrs {};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::MaxAttrs);

namespace attngraph::ops {

// The gradient is torch.maximum's: dy goes to the operand that is the result; on a tie (a == b)
// each gets dy / 2; where a or b is NaN both get dy.
struct Max : BinaryOp<Max, MaxAttrs> {
    static constexpr const char* name = "Max";
    using Attrs = MaxAttrs;

    static std::string formula(const Attrs&, const std::vector<std::string>& v) {
        return "maximum(" + v[0] + ", " + v[1] + ")";
    }

    template <class T>
    static T apply(const Attrs&, T a, T b) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a < b ? b : a;
    }
    // in the forward pass this was: y = max(a, b). da += dy where a > b, dy / 2 where a == b
    template <class T>
    static T partial_a(const Attrs&, T a, T b, T) {
        return a == b ? T(0.5) : a < b ? T(0) : T(1);
    }
    template <class T>
    static T partial_b(const Attrs&, T a, T b, T) {
        return a == b ? T(0.5) : a > b ? T(0) : T(1);
    }
};

}  // namespace attngraph::ops
