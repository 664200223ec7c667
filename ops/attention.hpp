#pragma once
// The Attention composite (ONNX opset 23) as a C++ builder function with named inputs and every
// output; see ops/attention.cpp for the nodes it adds, ops/attention_op.hpp for the op type that
// graph files name "Attention".
#include <optional>
#include <string>

#include "engine/builder.hpp"
#include "ops/attention_op.hpp"

namespace attngraph {

using ops::AttentionAttrs;  // ops/attention_op.hpp: the op type and its attributes

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
