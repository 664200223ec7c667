// Scale: y = factor · x, elementwise. x and y have any shape, the same.
#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace attngraph::ops {
struct ScaleAttrs {
    Required<double> factor;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ScaleAttrs, factor);

namespace attngraph::ops {

struct Scale {
    static constexpr const char* name = "Scale";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = ScaleAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        if (!std::isfinite(a.factor.value))
            throw GraphError("attribute 'factor' must be finite, got " + format_number(a.factor.value));
        return in[0];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return format_number(a.factor) + " × " + v[0];
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const T f = static_cast<T>(a.factor.value);
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const std::size_t n = in[0]->size();
        for (std::size_t i = 0; i < n; ++i) y[i] = f * x[i];
    }

    // in the forward pass this was: y[i] = f * x[i]
    template <class T>
    static void backward(const Attrs& a, In<T>, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const T f = static_cast<T>(a.factor.value);
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        const std::size_t n = dout[0]->size();
        for (std::size_t i = 0; i < n; ++i) dx[i] += f * dy[i];
    }
};

OpDef scale_op() { return make_op_def<Scale>(); }

}  // namespace attngraph::ops

namespace attngraph {
Value scale(const Value& x, double factor) {
    return x.builder().node("Scale", {x}, ops::ScaleAttrs{{factor}});
}
}  // namespace attngraph
