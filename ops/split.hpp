// Split: cuts x along `axis` into consecutive pieces, `parts` equal ones or the listed
// `sizes`; output k is named "name:k". Legend: x seen as (outer, len, inner) around the axis;
// output k is (outer, size_k, inner), sum size_k = len.
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct SplitAttrs {
    int axis = -1;
    std::optional<int> parts;
    std::optional<std::vector<int>> sizes;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::SplitAttrs, axis, parts, sizes);

namespace attngraph::ops {

struct Split {
    static constexpr const char* name = "Split";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SplitAttrs;

    static std::vector<std::size_t> sizes(const Attrs& a, const Shape& x) {
        if (x.empty()) throw ShapeError("cannot split a scalar");
        const std::size_t len = x[normalize_axis(a.axis, x.size())];
        if (a.parts.has_value() == a.sizes.has_value()) throw ShapeError("give exactly one of 'parts' and 'sizes'");
        std::vector<std::size_t> s;
        if (a.parts) {
            if (*a.parts < 1) throw ShapeError("parts must be at least 1, got " + std::to_string(*a.parts));
            const auto p = static_cast<std::size_t>(*a.parts);
            if (len % p != 0)
                throw ShapeError("axis " + std::to_string(a.axis) + " of x (" + shape_str(x) +
                                 ") does not split into " + std::to_string(p) + " equal parts");
            s.assign(p, len / p);
            return s;
        }
        std::size_t total = 0;
        for (int k : *a.sizes) {
            if (k < 1) throw ShapeError("sizes must be at least 1, got " + std::to_string(k));
            s.push_back(static_cast<std::size_t>(k));
            total += s.back();
        }
        if (s.empty() || total != len)
            throw ShapeError("sizes add up to " + std::to_string(total) + ", not to axis " + std::to_string(a.axis) +
                             " of x (" + shape_str(x) + ")");
        return s;
    }

    static std::vector<Shape> infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const std::size_t ax = normalize_axis(a.axis, std::max<std::size_t>(in[0].size(), 1));
        std::vector<Shape> out;
        for (std::size_t k : sizes(a, in[0])) {
            Shape y = in[0];
            y[ax] = k;
            out.push_back(std::move(y));
        }
        return out;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::string how;
        if (a.parts) how = std::to_string(*a.parts) + " parts";
        if (a.sizes) {
            std::vector<std::string> s;
            for (int k : *a.sizes) s.push_back(std::to_string(k));
            how = "sizes=[" + join(s, ",") + "]";
        }
        return "split(" + v[0] + ", " + how + (a.axis == -1 ? "" : ", axis=" + std::to_string(a.axis)) + ")";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Shape xs = shape_of(*in[0]);
        const AxisLayout l = axis_layout(xs, normalize_axis(a.axis, xs.size()));
        const T* x = in[0]->data();
        std::size_t offset = 0;
        const auto s = sizes(a, xs);
        for (std::size_t k = 0; k < s.size(); ++k) {
            const std::size_t row = s[k] * l.inner;
            T* y = out[k]->data();
            for (std::size_t o = 0; o < l.outer; ++o) {
                const T* src = x + o * l.len * l.inner + offset;
                std::copy(src, src + row, y + o * row);
            }
            offset += row;
        }
    }

    // in the forward pass this was: y_k = x[offset_k : offset_k + size_k] on axis;
    // dx there += dy_k (outputs without a gradient are skipped).
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const Shape xs = shape_of(*in[0]);
        const AxisLayout l = axis_layout(xs, normalize_axis(a.axis, xs.size()));
        T* dx = din[0]->data();
        std::size_t offset = 0;
        const auto s = sizes(a, xs);
        for (std::size_t k = 0; k < s.size(); ++k) {
            const std::size_t row = s[k] * l.inner;
            if (k < dout.size() && dout[k]) {
                const T* dy = dout[k]->data();
                for (std::size_t o = 0; o < l.outer; ++o) {
                    T* dst = dx + o * l.len * l.inner + offset;
                    for (std::size_t c = 0; c < row; ++c) dst[c] += dy[o * row + c];
                }
            }
            offset += row;
        }
    }
};

}  // namespace attngraph::ops
