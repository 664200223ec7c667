// Transpose: swaps the last two axes of x, or permutes every axis by `perm`
// (y.shape[i] = x.shape[perm[i]]).
#pragma once
#include "engine/parallel.hpp"
#include "ops/common.hpp"

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
        if (a.perm) return checked_permutation(*a.perm, rank);
        if (rank < 2) throw ShapeError("needs at least 2 axes, got (" + std::to_string(rank) + "-D)");
        std::vector<std::size_t> p(rank);
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

    static std::string latex(const Attrs& a, const std::vector<std::string>& v, const std::string& y, const Shape&) {
        if (!a.perm) return y + "=\\left(" + v[0] + "\\right)^{T}";
        std::vector<std::string> p;
        for (int i : *a.perm) p.push_back(std::to_string(i));
        return y + "=\\mathrm{transpose}\\left(" + v[0] + ",\\ [" + join(p, ",") + "]\\right)";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        permute_axes(*in[0], permutation(a, in[0]->dimension()), *out[0]);
    }

    // in the forward pass this was: y = permute(x, p); dx += permute(dy, p⁻¹)
    template <class T>
    static void backward(const Attrs& a, In<T>, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        permute_axes(*dout[0], inverse_permutation(permutation(a, din[0]->dimension())), *din[0], true);
    }
};

}  // namespace attngraph::ops
