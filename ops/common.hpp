#pragma once
// Helpers shared by the op files: axis arithmetic, broadcasting, number formatting.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "engine/op.hpp"
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

/// Row-major strides of `shape` seen as `target` (rank-aligned right; 0 on broadcast axes).
inline std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& target) {
    std::vector<std::size_t> strides(target.size(), 0);
    std::size_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        const std::size_t t = i + (target.size() - shape.size());
        strides[t] = shape[i] == 1 ? 0 : stride;
        stride *= shape[i];
    }
    return strides;
}

/// Offset of flat index `flat` of `target` in an array with `strides` (from broadcast_strides).
inline std::size_t broadcast_offset(std::size_t flat, const Shape& target, const std::vector<std::size_t>& strides) {
    std::size_t offset = 0;
    for (std::size_t i = target.size(); i-- > 0;) {
        offset += (flat % target[i]) * strides[i];
        flat /= target[i];
    }
    return offset;
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
