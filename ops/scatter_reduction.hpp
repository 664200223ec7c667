// What ScatterElements and ScatterND share: how a write combines with what is there (ONNX's
// `reduction`), its forward and its gradient. Both ops reduce to writes of `slice` consecutive
// elements of updates at offsets `at[t]` of data (ScatterElements: slice 1), in order t = 0, 1, ...
//   none: y[p] = u_t        (the last write to p is kept)
//   add:  y[p] = y[p] + u_t  mul: y[p] = y[p] · u_t  (in order, so the rounding is fixed)
//   max:  y[p] = max(y[p], u_t)  min: the same with min; NaN wins (torch's amax and amin)
// Gradients, for x = data[p] and the updates u_1..u_m written to p, y = y[p] (torch's
// scatter_reduce with include_self, and the product rule where torch divides):
//   none: dx = dy if m = 0, else 0; du_t = dy for the last t, else 0
//   add:  dx = dy; du_t = dy
//   mul:  dx = dy · u_1···u_m; du_t = dy · x · (the product of the other u), no division
//   max/min: dy shared evenly among those of x, u_1..u_m equal to y (NaN equals NaN)
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "ops/common.hpp"

namespace attngraph::ops::scatter {

enum class Reduction { none, add, mul, max, min };

/// The reduction ONNX names `name`; GraphError for another.
inline Reduction reduction(const std::string& name) {
    if (name == "none") return Reduction::none;
    if (name == "add") return Reduction::add;
    if (name == "mul") return Reduction::mul;
    if (name == "max") return Reduction::max;
    if (name == "min") return Reduction::min;
    throw GraphError("unknown reduction '" + name + "' (known: none, add, mul, max, min)");
}

template <class T>
T combine(Reduction r, T y, T u) {
    switch (r) {
        case Reduction::add:
            return y + u;
        case Reduction::mul:
            return y * u;
        case Reduction::max:
            return std::isnan(y) || std::isnan(u) ? y + u : (u > y ? u : y);
        case Reduction::min:
            return std::isnan(y) || std::isnan(u) ? y + u : (u < y ? u : y);
        case Reduction::none:
            break;
    }
    return u;
}

/// y = x, then each update slice t combined into y at at[t], in order.
template <class T>
void forward(Reduction r, const T* x, const T* u, T* y, std::size_t n, const std::vector<std::size_t>& at,
             std::size_t slice) {
    parallel_chunks(n, grain_for(1), [&](std::size_t i0, std::size_t i1) { std::copy(x + i0, x + i1, y + i0); });
    for (std::size_t t = 0; t < at.size(); ++t) {
        const T* ut = u + t * slice;
        T* yt = y + at[t];
        for (std::size_t i = 0; i < slice; ++i) yt[i] = combine(r, yt[i], ut[i]);
    }
}

/// The writes grouped by the slice they land on: writes of slice s are order[first[s] ..
/// first[s + 1]), in t's order (slices of one length either coincide or are disjoint).
struct Groups {
    std::vector<std::size_t> first, order;
    Groups(const std::vector<std::size_t>& at, std::size_t slices, std::size_t slice)
        : first(slices + 1, 0), order(at.size()) {
        for (std::size_t a : at) ++first[a / slice + 1];
        for (std::size_t s = 0; s < slices; ++s) first[s + 1] += first[s];
        std::vector<std::size_t> next(first.begin(), first.end() - 1);
        for (std::size_t t = 0; t < at.size(); ++t) order[next[at[t] / slice]++] = t;
    }
};

/// dx += and du += the gradients above (either may be null: not wanted). y is the forward's
/// output (read by max and min).
template <class T>
void backward(Reduction r, const T* x, const T* u, const T* y, const T* dy, T* dx, T* du, std::size_t n,
              const std::vector<std::size_t>& at, std::size_t slice) {
    if (n == 0 || slice == 0) return;  // (an empty axis: nothing was written)
    const Groups g(at, n / slice, slice);
    const auto same = [](T a, T b) { return a == b || (std::isnan(a) && std::isnan(b)); };
    // each element of dx and du belongs to one slice s: chunks of slices write apart
    parallel_chunks(n / slice, grain_for(2 * slice), [&](std::size_t s0, std::size_t s1) {
        std::vector<T> before, after;  // mul: products of the updates before and after each write
        for (std::size_t s = s0; s < s1; ++s) {
            const std::size_t* w = g.order.data() + g.first[s];
            const std::size_t m = g.first[s + 1] - g.first[s];
            for (std::size_t i = 0; i < slice; ++i) {
                const std::size_t p = s * slice + i;
                const auto ut = [&](std::size_t j) { return u[w[j] * slice + i]; };
                const auto add_du = [&](std::size_t j, T v) {
                    if (du) du[w[j] * slice + i] += v;
                };
                switch (r) {
                    case Reduction::none:
                        if (m == 0) {
                            if (dx) dx[p] += dy[p];
                        } else {
                            add_du(m - 1, dy[p]);
                        }
                        break;
                    case Reduction::add:
                        if (dx) dx[p] += dy[p];
                        for (std::size_t j = 0; j < m; ++j) add_du(j, dy[p]);
                        break;
                    case Reduction::mul:
                        before.assign(m + 1, T(1));
                        after.assign(m + 1, T(1));
                        for (std::size_t j = 0; j < m; ++j) before[j + 1] = before[j] * ut(j);
                        for (std::size_t j = m; j-- > 0;) after[j] = after[j + 1] * ut(j);
                        if (dx) dx[p] += dy[p] * before[m];
                        for (std::size_t j = 0; j < m; ++j) add_du(j, dy[p] * x[p] * (before[j] * after[j + 1]));
                        break;
                    case Reduction::max:
                    case Reduction::min: {
                        std::size_t ties = same(x[p], y[p]) ? 1 : 0;
                        for (std::size_t j = 0; j < m; ++j) ties += same(ut(j), y[p]) ? 1 : 0;
                        const T share = dy[p] / static_cast<T>(ties);  // ties >= 1: y is one of them
                        if (dx && same(x[p], y[p])) dx[p] += share;
                        for (std::size_t j = 0; j < m; ++j)
                            if (same(ut(j), y[p])) add_du(j, share);
                        break;
                    }
                }
            }
        }
    });
}

}  // namespace attngraph::ops::scatter
