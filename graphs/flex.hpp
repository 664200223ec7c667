#pragma once
// FlexAttention's standard examples (PyTorch's flex_attention and the attention-gym collection)
// as graphs: flex_attention(Q, K, V, score_mod, mask_mod) with Q, K, V inputs (B, H, n, D), the
// score_mod and mask_mod written as their Python functions read, from the positions q_idx
// (Range as a column), kv_idx (Range) and the head index h_idx (Range), with comparisons,
// Where, Mul, Gather and Add on the scores (graphs/flex_mods.hpp):
//
//   KT = Kᵀ,  S_raw = Q·KT,  S = S_raw / sqrt(D)
//   [S_bias = S + bias (alibi, relative-position) | S_capped = c·tanh(S / c) (softcap)]
//   [S_masked = Mask(.., keep), keep from the mask_mod]
//   A = softmax(..),  O = A·V   (the output, (B, H, n, D))
//
// `attngraph new flex/NAME` writes one (graphs/flex/NAME.json are the ready ones).
#include <vector>

#include "engine/graph.hpp"
#include "graphs/variants.hpp"

namespace attngraph::graphs {

/// flex/causal, flex/sliding-window, flex/prefix-lm, flex/document, flex/alibi, flex/softcap,
/// flex/relative-position.
const std::vector<VariantInfo>& flex_list();

/// @brief Builds FlexAttention example `config.variant` (flex/...) at config's sizes: B = batch
/// (1 when 0), H = heads, n = seq, D = d_model / heads; seeded random Q, K, V. Options: window
/// (sliding-window), prefix_length (prefix-lm), documents and causal (document), softcap
/// (softcap). Throws GraphError on bad sizes and options.
Graph build_flex(const VariantConfig& config);

}  // namespace attngraph::graphs
