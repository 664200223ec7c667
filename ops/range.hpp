// Range: y = [start, start + delta, start + 2·delta, ...) up to `limit` (exclusive), a 1-D
// tensor of max(ceil((limit - start) / delta), 0) elements, y[i] = start + i·delta (ONNX Range,
// numpy arange). Position indices enter a graph this way: q_idx = Range(0, n), kv_idx =
// Range(0, m), head indices Range(0, h), as FlexAttention's score_mod(score, b, h, q_idx, kv_idx)
// sees them. ONNX takes start, limit and delta as input tensors; here they are attributes, so
// the length is known when the graph is built (the ONNX importer folds constant inputs).
// No inputs, no gradient to give.
#pragma once
#include <cmath>

#include "ops/common.hpp"

namespace attngraph::ops {
struct RangeAttrs {
    double start = 0;
    Required<double> limit;
    double delta = 1;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::RangeAttrs, start, limit, delta);

namespace attngraph::ops {

struct Range {
    static constexpr const char* name = "Range";
    static constexpr int min_inputs = 0, max_inputs = 0;
    using Attrs = RangeAttrs;

    static constexpr double max_length = 1u << 31;

    static std::size_t length(const Attrs& a) {
        const double start = a.start, limit = a.limit, delta = a.delta;
        if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
            throw ShapeError("start, limit and delta must be finite, got " + format_number(start) + ", " +
                             format_number(limit) + ", " + format_number(delta));
        if (delta == 0) throw ShapeError("delta must not be 0");
        const double n = std::ceil((limit - start) / delta);
        if (n > max_length)
            throw ShapeError("range(" + format_number(start) + ", " + format_number(limit) + ", " +
                             format_number(delta) + ") has more than 2^31 elements");
        return n > 0 ? static_cast<std::size_t>(n) : 0;
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>&) { return {length(a)}; }

    static std::string formula(const Attrs& a, const std::vector<std::string>&) {
        return "range(" + format_number(a.start) + ", " + format_number(a.limit) +
               (a.delta == 1 ? "" : ", " + format_number(a.delta)) + ")";
    }

    template <class T>
    static void forward(const Attrs& a, In<T>, Out<T> out) {
        T* y = out[0]->data();
        for (std::size_t i = 0; i < out[0]->size(); ++i)
            y[i] = static_cast<T>(a.start + static_cast<double>(i) * a.delta);
    }

    // in the forward pass this was: y = range(start, limit, delta): no inputs, nothing to add
    template <class T>
    static void backward(const Attrs&, In<T>, In<T>, In<T>, Out<T>) {}
};

}  // namespace attngraph::ops
