#pragma once
// Attention variants as graphs, in batched form: heads (and K/V groups) are axes, not
// branches. With lead = (B) when batch > 0, () otherwise, n queries, m keys, h heads of
// d_k = d_model / h, g K/V heads (r = h / g query heads share one):
//
//   [X_norm = rmsnorm(X)]                                  llama
//   QKV = X·Wqkv + bqkv     (lead, n, d + 2·g·d_k)         cross: Q_flat = X·Wq + bq, KV = C·Wkv + bkv
//   QKV_split:0,1,2 = split(QKV, [d, g·d_k, g·d_k])        [Q_rope, K_rope = RoPE(..)]  llama
//   Q_heads = reshape(.., [lead, -1, h, d_k]),  Q = permute(..): (lead, h, n, d_k)
//     (lead kept by the Reshape attribute keep_leading, never written in); K, V likewise
//     (lead, h, m, d_k); g < h: Q (lead, g, r, n, d_k), K, V (lead, g, 1, m, d_k);
//     diff: Q, K (lead, h, 2, n, d_k/2), V (lead, h, 1, m, d_k)
//   KT = Kᵀ,  S_raw = Q·KT,  S = S_raw / sqrt(d_k)
//   [S_bias = alibi(S)]  [S_div, S_tanh, S_capped: softcap]
//   [S_masked = mask(.., causal | window | keep from index ops)]  [S_padded = mask(.., padding)]
//   A = softmax(..)      sinks: A = softmax([S | S_sink])[..., :m];  diff: A_diff = A_1 - lambda·A_2
//   O = A·V,  O_rows = permute(O, back),  O_concat = reshape(.., [lead, -1, d]),  Y = O_concat·Wo + bo
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/graph.hpp"
#include "graphs/mha.hpp"

namespace attngraph::graphs {

/// @brief Sizes and options of a variant; what each variant reads is in variant_list().
struct VariantConfig {
    std::string variant = "mha-batched";
    std::size_t batch = 0;   ///< 0: X is (n, d_model); B > 0: X is (B, n, d_model)
    std::size_t seq = 4;     ///< n, queries
    std::size_t kv_seq = 0;  ///< m, the length of cross-attention's keys and values (cross only, required)
    std::size_t d_model = 8;
    std::size_t heads = 2;     ///< h
    std::size_t groups = 0;    ///< g, K/V heads of gqa (0: = heads; mqa: 1)
    std::size_t window = 0;    ///< w of sliding-window
    std::size_t past = 0;      ///< decode: cached keys/values before the new tokens
    bool causal = false;       ///< sliding-window: 0 <= i - j < w instead of |i - j| < w; document: also j <= i
    std::vector<int> lengths;  ///< key padding: sequence b has lengths[b] valid keys (needs batch > 0)
    std::optional<double> softcap;  ///< softcap: c of c·tanh(S / c) (default 50, Gemma 2's)
    std::size_t prefix_length = 0;  ///< prefix-lm: P, the keys every query sees
    std::vector<int> documents;     ///< document: the lengths of the packed documents (summing to seq)
    DType dtype = DType::f32;
    std::uint64_t seed = 1;
    std::string name;  ///< graph name (default: the variant)
    /// the memory limit (0: default_max_memory()): the variant's random tensors may take a
    /// quarter of it, since building joins and casts them (up to four times their bytes at
    /// once); more is a ShapeError before they are allocated (graphs::TensorBudget)
    std::size_t max_bytes = 0;
};

/// @brief A variant's name and a one-line description.
struct VariantInfo {
    std::string name;
    std::string description;
};

/// mha, mha-batched, causal, cross, mqa, gqa, sliding-window, alibi, decode, llama, softcap,
/// sinks, diff, prefix-lm, document (FlexAttention's examples, flex/..., are graphs/flex.hpp's).
const std::vector<VariantInfo>& variant_list();

/// @brief Builds a variant (or a flex/... example of graphs/flex.hpp) with seeded random
/// weights; throws GraphError on bad sizes and options.
Graph build_variant(const VariantConfig& config);

/// @brief Batched multi-head self-attention with the weights of a per-head graph
/// (Wqkv = [Wq_1 .. Wq_h | Wk_1 .. | Wv_1 ..]): gives the Y of build_mha(mha, weights).
Graph build_batched_mha(const MhaConfig& mha, const MhaWeights& weights);

/// ALiBi slope of head `head` (0-based) of `heads`: 2^(-8 (head + 1) / heads).
double alibi_slope(std::size_t head, std::size_t heads);

}  // namespace attngraph::graphs
