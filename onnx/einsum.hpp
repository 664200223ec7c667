#pragma once
// ONNX Einsum at import: the equation lowered to attngraph's primitive nodes (Transpose,
// Reshape, ReduceSum, Gather, Mul, MatMul), so an einsum-written attention traces as the
// MatMuls it is and the run plan fuses it as it fuses the same graph written with MatMul.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.hpp"

namespace attngraph::onnx_import {

/// @brief One operand: its attngraph value name (already in the imported graph) and shape.
struct EinsumOperand {
    std::string name;
    Shape shape;
};

/// @brief What the expansion needs of the importer.
struct EinsumSink {
    /// a fresh attngraph name from `base` (reserved at once)
    std::function<std::string(const std::string& base)> unique;
    /// appends a node to the imported graph
    std::function<void(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                       const nlohmann::json& attrs)>
        emit;
    /// an integer constant of `shape` (row-major `values`) as a param: its attngraph name
    std::function<std::string(const std::string& base, const Shape& shape, const std::vector<double>& values)> constant;
};

/// @brief Lowers Einsum `equation` over `in`, the last node named `name`; returns the result's
/// shape. numpy's einsum semantics (ONNX's reference): explicit (`->`) or implicit output,
/// `...` broadcast over the operands' leading axes, a letter repeated within an operand taking
/// the diagonal, size-1 axes broadcasting against a letter's size elsewhere. Throws ShapeError
/// (a malformed equation, an operand count or rank that does not match it, sizes that differ)
/// with `where` in front.
Shape expand_einsum(const std::string& name, const std::string& equation, const std::vector<EinsumOperand>& in,
                    const EinsumSink& sink, const std::string& where);

}  // namespace attngraph::onnx_import
