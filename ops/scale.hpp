// Scale: y = factor · x, elementwise. x and y have any shape, the same.
#pragma once
#include "engine/parallel.hpp"
#include "ops/common.hpp"

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

    // explain: a factor in (0, 1) as a fraction, \frac{1}{2.828427}
    static std::string latex(const Attrs& a, const std::vector<std::string>& v, const std::string& y, const Shape&) {
        const double f = a.factor;
        const std::string factor =
            f > 0 && f < 1 ? "\\frac{1}{" + format_number(1 / f) + "}\\," : format_number(f) + "\\cdot ";
        return y + "=" + factor + v[0];
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const T f = static_cast<T>(a.factor.value);
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const std::size_t n = in[0]->size();
        parallel_chunks(n, 1 << 15, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) y[i] = f * x[i];
        });
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

}  // namespace attngraph::ops
