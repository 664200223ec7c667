// Mod: the remainder of a / b, elementwise with numpy broadcasting (ONNX Mod). `fmod` true: the
// C library's fmod, a − b·trunc(a/b) with the sign of a (torch.fmod, numpy.fmod); false: the
// sign of b, a − b·⌊a/b⌋ (torch.remainder, numpy.mod, Python's %). Both exact, as the C
// library's fmod is; b = 0 gives NaN, as numpy's does for floats. Legend: a and b broadcast
// to y's shape.
#pragma once
#include <cmath>

#include "ops/elementwise.hpp"

namespace attngraph::ops {
struct ModAttrs {
    bool fmod = false;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ModAttrs, fmod);

namespace attngraph::ops {

struct Mod : BinaryOp<Mod, ModAttrs> {
    static constexpr const char* name = "Mod";
    using Attrs = ModAttrs;

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return (a.fmod ? "fmod(" : "mod(") + v[0] + ", " + v[1] + ")";
    }

    template <class T>
    static T apply(const Attrs& attrs, T a, T b) {
        const T r = std::fmod(a, b);
        // the sign of b: a nonzero remainder of the other sign moves by one b
        if (!attrs.fmod && r != T(0) && (r < T(0)) != (b < T(0))) return r + b;
        return r;
    }
    // in the forward pass this was: y = a − b·q, q = trunc(a/b) (fmod) or ⌊a/b⌋, a step
    // function of a and b. da += dy, db −= dy·q (torch.fmod's and torch.remainder's gradients)
    template <class T>
    static T partial_a(const Attrs&, T, T, T) {
        return T(1);
    }
    template <class T>
    static T partial_b(const Attrs& attrs, T a, T b, T) {
        return attrs.fmod ? -std::trunc(a / b) : -std::floor(a / b);
    }
};

}  // namespace attngraph::ops
