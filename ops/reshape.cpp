// Reshape: y has x's elements in the same row-major order under a new `shape`; one entry
// may be -1 (inferred). Legend: x is any shape, y is `shape`, element_count(x) = element_count(y).
#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace attngraph::ops {
struct ReshapeAttrs {
    Required<std::vector<int>> shape;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ReshapeAttrs, shape);

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
        const std::size_t count = element_count(in[0]);
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
                throw ShapeError("cannot reshape x (" + shape_str(in[0]) + ", " + std::to_string(count) +
                                 " elements) to " + shape_text(want));
            y[static_cast<std::size_t>(inferred)] = count / known;
        } else if (known != count) {
            throw ShapeError("cannot reshape x (" + shape_str(in[0]) + ", " + std::to_string(count) + " elements) to " +
                             shape_text(want) + " (" + std::to_string(known) + " elements)");
        }
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return "reshape(" + v[0] + ", " + shape_text(a.shape.value) + ")";
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

OpDef reshape_op() {
    return make_op_def<Reshape>();
}

}  // namespace attngraph::ops

namespace attngraph {
Value reshape(const Value& x, std::vector<int> shape) {
    return x.builder().node("Reshape", {x}, ops::ReshapeAttrs{{std::move(shape)}});
}
}  // namespace attngraph
