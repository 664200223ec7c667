#pragma once
// The Attention composite (ONNX opset 23): see ops/attention.cpp for the nodes it adds.
#include <optional>
#include <string>

#include "engine/builder.hpp"

namespace attngraph {

/// @brief Attributes of Attention, as ONNX names them, plus `mask_type` (attn_mask arrives
/// as floats: "additive" adds it, -inf drops; "boolean": nonzero keeps, zero drops).
struct AttentionAttrs {
    std::optional<double> scale;                   ///< default 1/√d_k
    int is_causal = 0;                             ///< query i sees keys j ≤ i + past
    double softcap = 0;                            ///< > 0: scores → softcap · tanh(scores / softcap)
    std::optional<int> q_num_heads, kv_num_heads;  ///< needed for 3-D inputs
    int qk_matmul_output_mode = 0;                 ///< 0 S, 1 S_capped, 2 S_masked, 3 A
    std::string mask_type = "additive";
};

/// @brief The inputs; an absent optional input is a default-constructed Value.
struct AttentionInputs {
    Value q, k, v;
    Value attn_mask, past_key, past_value;
};

/// @brief The outputs (present_key/present_value only with a past).
struct AttentionOutputs {
    Value y, present_key, present_value, qk;
};

/// @brief Adds the nodes of Attention named `name` (`name.S_raw`, `name.S`, ..., `name.O`).
/// Throws ShapeError naming the node, the op and the shapes on inputs that do not fit.
AttentionOutputs attention(const std::string& name, const AttentionInputs& in, const AttentionAttrs& attrs = {});

}  // namespace attngraph
