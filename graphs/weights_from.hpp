#pragma once
// Variants around existing weights: the attention projections of a Hugging Face checkpoint
// (safetensors, names <prefix>q_proj / k_proj / v_proj / o_proj .weight and, where present,
// .bias; weights stored (out, in) as torch.nn.Linear keeps them) put into a variant's
// Wqkv/bqkv (or Wq/bq + Wkv/bkv for cross) and Wo/bo.
#include <filesystem>
#include <string>

#include "engine/graph.hpp"

namespace attngraph::graphs {

/// @brief `graph` (a batched variant from build_variant) with its projection weights read
/// from `file`. Throws IoError (file, key) and ShapeError (a key whose shape does not fit the
/// variant's sizes, naming the file, the key and both shapes).
Graph with_weights_from(const Graph& graph, const std::filesystem::path& file, const std::string& prefix);

}  // namespace attngraph::graphs
