#pragma once
// Helpers shared by the op files: axis arithmetic, broadcasting, number formatting.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "engine/kernel.hpp"
#include "engine/parallel.hpp"
#include "engine/tensor.hpp"

namespace attngraph::ops {

/// Axis in [-rank, rank) to [0, rank); throws ShapeError otherwise.
inline std::size_t normalize_axis(int axis, std::size_t rank) {
    const long r = static_cast<long>(rank);
    const long a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
        throw ShapeError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    return static_cast<std::size_t>(a);
}

/// numpy broadcasting of two shapes; throws ShapeError naming both.
inline Shape broadcast_shapes(const Shape& a, const Shape& b) {
    const std::size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (std::size_t i = 0; i < rank; ++i) {
        const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            throw ShapeError("shapes (" + shape_str(a) + ") and (" + shape_str(b) + ") do not broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

/// Row-major strides of `shape`: the flat step of one along each axis.
inline std::vector<std::size_t> row_major_strides(const Shape& shape) {
    std::vector<std::size_t> strides(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    return strides;
}

/// Row-major strides of `shape` seen as `target` (rank-aligned right; 0 on broadcast axes).
template <class Strides = std::vector<std::size_t>>
Strides broadcast_strides(const Shape& shape, const Shape& target) {
    Strides strides(target.size(), 0);
    std::size_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        const std::size_t t = i + (target.size() - shape.size());
        strides[t] = shape[i] == 1 ? 0 : stride;
        stride *= shape[i];
    }
    return strides;
}

/// Offset of flat index `flat` of `target` in an array with `strides` (from broadcast_strides).
template <class Strides>
std::size_t broadcast_offset(std::size_t flat, const Shape& target, const Strides& strides) {
    std::size_t offset = 0;
    for (std::size_t i = target.size(); i-- > 0;) {
        offset += (flat % target[i]) * strides[i];
        flat /= target[i];
    }
    return offset;
}

/// Checks that `perm` permutes the axes of a rank-`rank` array (negative axes allowed);
/// returns it normalized. Throws ShapeError.
inline std::vector<std::size_t> checked_permutation(const std::vector<int>& perm, std::size_t rank) {
    if (perm.size() != rank)
        throw ShapeError("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
    std::vector<std::size_t> p(rank);
    std::vector<bool> seen(rank, false);
    for (std::size_t i = 0; i < rank; ++i) {
        p[i] = normalize_axis(perm[i], rank);
        if (seen[p[i]]) throw ShapeError("perm repeats axis " + std::to_string(p[i]));
        seen[p[i]] = true;
    }
    return p;
}

/// The inverse permutation: inverse[p[i]] = i.
inline std::vector<std::size_t> inverse_permutation(const std::vector<std::size_t>& p) {
    std::vector<std::size_t> inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = i;
    return inv;
}

/// y = x with axes permuted (y.shape[i] = x.shape[p[i]]), or y += that when `accumulate`.
/// y must already have the permuted shape. Fixed row chunks: the same bits for any thread count.
template <class T>
void permute_axes(const Array<T>& x, const std::vector<std::size_t>& p, Array<T>& y, bool accumulate = false) {
    const std::size_t rank = x.dimension();
    if (rank == 0) {
        y.data()[0] = (accumulate ? y.data()[0] : T(0)) + x.data()[0];
        return;
    }
    // walk y in order; the stride of y's axis i in x is x.stride[p[i]]
    std::vector<std::size_t> xs(rank), ys(rank);
    for (std::size_t i = 0; i < rank; ++i) {
        xs[i] = static_cast<std::size_t>(x.strides()[p[i]]);
        ys[i] = y.shape()[i];
    }
    const std::size_t cols = rank ? ys[rank - 1] : 1;
    const std::size_t rows = rank ? y.size() / (cols ? cols : 1) : 1;
    const std::size_t step = rank ? xs[rank - 1] : 0;
    const T* xd = x.data();
    T* yd = y.data();
    parallel_chunks(rows, grain_for(cols), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
            std::size_t off = 0, rem = r;
            for (std::size_t i = rank - 1; i-- > 0;) {
                off += (rem % ys[i]) * xs[i];
                rem /= ys[i];
            }
            if (accumulate)
                for (std::size_t c = 0; c < cols; ++c) yd[r * cols + c] += xd[off + c * step];
            else
                for (std::size_t c = 0; c < cols; ++c) yd[r * cols + c] = xd[off + c * step];
        }
    });
}

/// An array seen as (outer, len, inner) around one axis.
struct AxisLayout {
    std::size_t outer = 1, len = 1, inner = 1;
};
inline AxisLayout axis_layout(const Shape& s, std::size_t axis) {
    AxisLayout l;
    l.len = s[axis];
    for (std::size_t i = 0; i < axis; ++i) l.outer *= s[i];
    for (std::size_t i = axis + 1; i < s.size(); ++i) l.inner *= s[i];
    return l;
}

/// The shape of an xtensor array as a Shape.
template <class T>
Shape shape_of(const Array<T>& a) {
    return Shape(a.shape().begin(), a.shape().end());
}

/// A number as a formula shows it: up to 6 decimals, trailing zeros dropped.
inline std::string format_number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    std::string s = buf;
    if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
    }
    return s == "-0" ? "0" : s;
}

inline std::string join(const std::vector<std::string>& parts, const std::string& sep) {
    std::string s;
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
    return s;
}

}  // namespace attngraph::ops
