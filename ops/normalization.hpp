#pragma once
// Shape helpers shared by RMSNormalization and LayerNormalization.
#include <string>

#include "ops/common.hpp"

namespace attngraph::ops {

/// x.shape[axis:], the shape a norm's scale and bias broadcast to; throws ShapeError.
inline Shape normalized_shape(const Shape& x, int axis) {
    if (x.empty()) throw ShapeError("x must have at least one axis, got a scalar");
    const std::size_t a = normalize_axis(axis, x.size());
    return Shape(x.begin() + static_cast<long>(a), x.end());
}

/// Checks that `what` (shape p) broadcasts to the normalized shape `norm` of x.
inline void check_norm_param(const char* what, const Shape& p, const Shape& norm, const Shape& x, int axis) {
    Shape b;
    try {
        b = broadcast_shapes(p, norm);
    } catch (const ShapeError&) {
    }
    if (b != norm)
        throw ShapeError(std::string(what) + " (" + shape_str(p) + ") does not broadcast to the normalized shape (" +
                         shape_str(norm) + ") of x (" + shape_str(x) + ") from axis " + std::to_string(axis));
}

}  // namespace attngraph::ops
