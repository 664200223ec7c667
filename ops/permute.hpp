// Permute: y.shape[i] = x.shape[perm[i]], y[..., i_k, ...] = x[..., i_perm[k], ...]: moves
// the heads of (B, n, h, d_k) into a batch axis, (B, h, n, d_k) with perm [0, 2, 1, 3].
// Legend: x has rank r, perm a permutation of 0..r-1 (negative axes allowed).
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct PermuteAttrs {
    Required<std::vector<int>> perm;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::PermuteAttrs, perm);

namespace attngraph::ops {

struct Permute {
    static constexpr const char* name = "Permute";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = PermuteAttrs;

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const auto p = checked_permutation(a.perm.value, in[0].size());
        Shape y(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) y[i] = in[0][p[i]];
        return y;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::vector<std::string> p;
        for (int i : a.perm.value) p.push_back(std::to_string(i));
        return "permute(" + v[0] + ", [" + join(p, ",") + "])";
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        permute_axes(*in[0], checked_permutation(a.perm.value, in[0]->dimension()), *out[0]);
    }

    // in the forward pass this was: y = permute(x, p); dx += permute(dy, p⁻¹).
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const auto p = checked_permutation(a.perm.value, in[0]->dimension());
        permute_axes(*dout[0], inverse_permutation(p), *din[0], true);
    }
};

}  // namespace attngraph::ops
