#pragma once
// ONNX Attention (opset 23) at import: expanded into attngraph's primitive nodes by the same
// code that builds it in C++ (ops/attention.cpp's attention()), so there is one decomposition.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.hpp"
#include "ops/attention.hpp"

namespace attngraph::onnx_import {

/// @brief One input of the expansion: the attngraph value name (already in the imported
/// graph) and its shape; absent when the ONNX input is.
struct AttentionOperand {
    std::string name;
    Shape shape;
};

/// @brief The nodes (graph-file JSON, in order) and the attngraph names of the outputs
/// (empty where the expansion has none: present_* without a past).
struct AttentionExpansion {
    nlohmann::json nodes = nlohmann::json::array();
    std::string y, present_key, present_value, qk;
    std::string k_heads;                  ///< K with heads in an axis (B, G, m, d_k): K itself for 4-D inputs
    std::string v_heads;                  ///< likewise for V
    std::map<std::string, Shape> shapes;  ///< the shape of every value named above
};

/// @brief Expands Attention named `name` over Q, K, V, attn_mask, past_key, past_value
/// (`in` has six entries, absent ones std::nullopt). Throws ShapeError naming the node.
AttentionExpansion expand_attention(const std::string& name, const std::vector<std::optional<AttentionOperand>>& in,
                                    const AttentionAttrs& attrs, DType dtype);

}  // namespace attngraph::onnx_import
