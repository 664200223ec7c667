// Transpose: swaps the last two axes of x, or permutes every axis by `perm`
// (y.shape[i] = x.shape[perm[i]]).
#include "engine/parallel.hpp"
#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace attngraph::ops {
struct TransposeAttrs {
    std::optional<std::vector<int>> perm;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::TransposeAttrs, perm);

namespace attngraph::ops {

struct Transpose {
    static constexpr const char* name = "Transpose";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = TransposeAttrs;

    /// The permutation in effect: `perm`, or the last two axes swapped.
    static std::vector<std::size_t> permutation(const Attrs& a, std::size_t rank) {
        std::vector<std::size_t> p(rank);
        if (a.perm) {
            if (a.perm->size() != rank)
                throw ShapeError("perm has " + std::to_string(a.perm->size()) + " entries for rank " +
                                 std::to_string(rank));
            std::vector<bool> seen(rank, false);
            for (std::size_t i = 0; i < rank; ++i) {
                p[i] = normalize_axis((*a.perm)[i], rank);
                if (seen[p[i]]) throw ShapeError("perm repeats axis " + std::to_string(p[i]));
                seen[p[i]] = true;
            }
            return p;
        }
        if (rank < 2) throw ShapeError("needs at least 2 axes, got (" + std::to_string(rank) + "-D)");
        for (std::size_t i = 0; i < rank; ++i) p[i] = i;
        std::swap(p[rank - 1], p[rank - 2]);
        return p;
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const auto p = permutation(a, in[0].size());
        Shape y(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) y[i] = in[0][p[i]];
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        if (!a.perm) return v[0] + "ᵀ";
        std::vector<std::string> p;
        for (int i : *a.perm) p.push_back(std::to_string(i));
        return "transpose(" + v[0] + ", perm=[" + join(p, ",") + "])";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Array<T>& x = *in[0];
        Array<T>& y = *out[0];
        const std::size_t rank = x.dimension();
        const auto p = permutation(a, rank);
        if (rank == 0) {  // a scalar with perm []
            y.data()[0] = x.data()[0];
            return;
        }
        // y[i0..] = x[...]: walk y in order; stride of y's axis i in x is x.stride[p[i]]
        std::vector<std::size_t> xs(rank), ys(rank);
        for (std::size_t i = 0; i < rank; ++i) {
            xs[i] = static_cast<std::size_t>(x.strides()[p[i]]);
            ys[i] = y.shape()[i];
        }
        const std::size_t rows = rank ? y.size() / (ys[rank - 1] ? ys[rank - 1] : 1) : 1;
        const std::size_t cols = rank ? ys[rank - 1] : 1;
        const T* xd = x.data();
        T* yd = y.data();
        parallel_chunks(rows, grain_for(cols), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                std::size_t off = 0, rem = r;
                for (std::size_t i = rank ? rank - 1 : 0; i-- > 0;) {
                    off += (rem % ys[i]) * xs[i];
                    rem /= ys[i];
                }
                const std::size_t step = rank ? xs[rank - 1] : 0;
                for (std::size_t c = 0; c < cols; ++c) yd[r * cols + c] = xd[off + c * step];
            }
        });
    }

    // in the forward pass this was: y[r * cols + c] = x[off + c * step]
    // (dx gets dy scattered back; every element of x is reached from exactly one of y)
    template <class T>
    static void backward(const Attrs& a, In<T>, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const Array<T>& dy = *dout[0];
        Array<T>& dx = *din[0];
        const std::size_t rank = dx.dimension();
        if (rank == 0) {
            dx() += dy();
            return;
        }
        const auto p = permutation(a, rank);
        std::vector<std::size_t> xs(rank), ys(rank);
        for (std::size_t i = 0; i < rank; ++i) {
            xs[i] = static_cast<std::size_t>(dx.strides()[p[i]]);
            ys[i] = dy.shape()[i];
        }
        const std::size_t rows = rank ? dy.size() / (ys[rank - 1] ? ys[rank - 1] : 1) : 1;
        const std::size_t cols = rank ? ys[rank - 1] : 1;
        const T* dyd = dy.data();
        T* dxd = dx.data();
        parallel_chunks(rows, grain_for(cols), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                std::size_t off = 0, rem = r;
                for (std::size_t i = rank - 1; i-- > 0;) {
                    off += (rem % ys[i]) * xs[i];
                    rem /= ys[i];
                }
                const std::size_t step = rank ? xs[rank - 1] : 0;
                for (std::size_t c = 0; c < cols; ++c) dxd[off + c * step] += dyd[r * cols + c];
            }
        });
    }
};

OpDef transpose_op() { return make_op_def<Transpose>(); }

}  // namespace attngraph::ops

namespace attngraph {
Value transpose(const Value& x) { return x.builder().node("Transpose", {x}, ops::TransposeAttrs{}); }
Value transpose(const Value& x, std::vector<int> perm) {
    return x.builder().node("Transpose", {x}, ops::TransposeAttrs{std::move(perm)});
}
}  // namespace attngraph
