// Reshape: y has x's elements in the same row-major order under a new `shape`; one entry
// may be -1 (inferred), 0 is a zero-length axis. With `keep_leading` k, x's first k axes
// are kept as they are and `shape` gives the axes after them, so a graph need not write its
// batch size in: keep_leading 1, shape [-1, h, d_k] turns (B, n, d) into (B, n, h, d_k) for
// any B. `keep_trailing` t likewise keeps x's last t axes: keep_leading 1, keep_trailing 2,
// shape [-1] merges the axes between, (B, g, r, n, m) -> (B, g·r, n, m).
// Legend: x is any shape, y is (x.shape[:k], shape, x.shape[rank-t:]),
// element_count(x) = element_count(y).
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct ReshapeAttrs {
    Required<std::vector<int>> shape;
    int keep_leading = 0;
    int keep_trailing = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReshapeAttrs, shape, keep_leading, keep_trailing);

namespace attngraph::ops {

struct Reshape {
    static constexpr const char* name = "Reshape";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = ReshapeAttrs;

    static std::string shape_text(const std::vector<int>& s) {
        std::vector<std::string> parts;
        for (int d : s) parts.push_back(std::to_string(d));
        return "[" + join(parts, ",") + "]";
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const std::vector<int>& want = a.shape.value;
        const long rank = static_cast<long>(in[0].size());
        if (a.keep_leading < 0 || a.keep_trailing < 0 || a.keep_leading + a.keep_trailing > rank)
            throw ShapeError("keep_leading " + std::to_string(a.keep_leading) + " and keep_trailing " +
                             std::to_string(a.keep_trailing) + " do not fit the " + std::to_string(rank) +
                             " axes of x (" + shape_str(in[0]) + ")");
        const auto first = in[0].begin() + a.keep_leading, last = in[0].end() - a.keep_trailing;
        Shape y(in[0].begin(), first);
        const Shape mid = infer_rest(want, Shape(first, last));
        y.insert(y.end(), mid.begin(), mid.end());
        y.insert(y.end(), last, in[0].end());
        return y;
    }

    // `want` applied to the axes after the kept ones (`x`).
    static Shape infer_rest(const std::vector<int>& want, const Shape& x) {
        const std::size_t count = element_count(x);
        Shape y;
        std::size_t known = 1;
        int inferred = -1;
        for (std::size_t i = 0; i < want.size(); ++i) {
            if (want[i] == -1) {
                if (inferred >= 0) throw ShapeError("shape " + shape_text(want) + " has more than one -1");
                inferred = static_cast<int>(i);
                y.push_back(0);
            } else if (want[i] < 0) {
                throw ShapeError("shape " + shape_text(want) + " has a negative size other than -1");
            } else {
                y.push_back(static_cast<std::size_t>(want[i]));
                known *= y.back();
            }
        }
        if (inferred >= 0) {
            if (known == 0 || count % known != 0)
                throw ShapeError("cannot reshape x (" + shape_str(x) + ", " + std::to_string(count) + " elements) to " +
                                 shape_text(want));
            y[static_cast<std::size_t>(inferred)] = count / known;
        } else if (known != count) {
            throw ShapeError("cannot reshape x (" + shape_str(x) + ", " + std::to_string(count) + " elements) to " +
                             shape_text(want) + " (" + std::to_string(known) + " elements)");
        }
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::string parts = shape_text(a.shape.value);
        parts = parts.substr(1, parts.size() - 2);
        if (a.keep_leading > 0)
            parts = v[0] + ".shape[:" + std::to_string(a.keep_leading) + "]" + (parts.empty() ? "" : ", " + parts);
        if (a.keep_trailing > 0)
            parts += (parts.empty() ? "" : ", ") + v[0] + ".shape[-" + std::to_string(a.keep_trailing) + ":]";
        return "reshape(" + v[0] + ", [" + parts + "])";
    }

    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        std::copy(in[0]->data(), in[0]->data() + in[0]->size(), out[0]->data());
    }

    // in the forward pass this was: y = x in a new shape; dx += dy element by element.
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const T* dy = dout[0]->data();
        T* dx = din[0]->data();
        for (std::size_t i = 0; i < in[0]->size(); ++i) dx[i] += dy[i];
    }
};

}  // namespace attngraph::ops
