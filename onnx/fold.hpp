#pragma once
// Import-time folding: ONNX ops evaluated on constants (shape arithmetic, masks built from
// constants, weight transposes). Values are held as double and rounded to their ONNX element
// type after every op, so a folded float constant is what an f32 runtime would compute.
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx/import.hpp"

namespace attngraph::onnx_fold {

/// True when `op` can be evaluated at import time once all its inputs are constants.
bool foldable(const std::string& op);

/// Evaluates `node` on constant inputs (nullptr for an absent optional input); throws
/// attngraph::Error (with `where` in front) on inputs the op rejects. An output of more than
/// `max_elements` elements (0: no limit but what memory can address) is refused with a
/// ShapeError naming it and its shape before anything is allocated.
std::vector<OnnxTensor> fold(const onnx::NodeProto& node, const std::vector<const OnnxTensor*>& inputs,
                             std::int64_t opset, const std::string& where, std::size_t max_elements = 0);

/// Rounds every value to what the element type holds (float: to f32; integers: truncated).
void round_to_type(OnnxTensor& t);

// ---- attribute access ----
const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name);
std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::vector<std::int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name);

/// Numpy broadcasting of two shapes; throws ShapeError naming `where`.
std::vector<std::int64_t> broadcast_shapes(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b,
                                           const std::string& where);

/// Values of `t` broadcast to `shape` (row-major).
std::vector<double> broadcast_to(const OnnxTensor& t, const std::vector<std::int64_t>& shape);

std::size_t count_of(const std::vector<std::int64_t>& shape);

/// The element count of `shape`, SIZE_MAX when it overflows.
std::size_t count_capped(const std::vector<std::int64_t>& shape);

}  // namespace attngraph::onnx_fold
