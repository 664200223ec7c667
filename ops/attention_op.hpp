// Attention: ONNX opset-23 Attention as a *composite* op, so that a graph file can hold it:
//   {"name": "attn", "op": "Attention", "inputs": ["Q", "K", "V"], "attrs": {"is_causal": 1}}
// Inputs, by count: Q, K, V (3); + attn_mask (4); + past_key, past_value (5); + attn_mask,
// past_key, past_value (6). Adding the node adds the nodes of attention() (ops/attention.cpp:
// "attn.S_raw", "attn.S", …, "attn.A", "attn.O"); "attn" stands for the output Y, and the other
// outputs are nodes of the expansion by name ("attn.present_key", "attn.present_value", and the
// qk_matmul_output_mode value "attn.S" / ".S_capped" / ".S_masked" / ".A").
// The C++ builder function with named inputs and every output is attention() (ops/attention.hpp).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <boost/hana.hpp>

namespace attngraph {
class Value;  // engine/builder.hpp
namespace ops {

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

}  // namespace ops
}  // namespace attngraph
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::AttentionAttrs, scale, is_causal, softcap, q_num_heads, kv_num_heads,
                        qk_matmul_output_mode, mask_type);

namespace attngraph::ops {

/// The expansion of an Attention node named `name` with inputs as the op takes them (above).
Value expand_attention(const std::string& name, const std::vector<Value>& in, const AttentionAttrs& attrs);

struct Attention {
    static constexpr const char* name = "Attention";
    static constexpr int min_inputs = 3, max_inputs = 6;
    using Attrs = AttentionAttrs;

    template <class E>
    static typename E::Value expand(const Attrs& a, E& e, const std::vector<typename E::Value>& in) {
        return expand_attention(e.prefix(), in, a);
    }
};

}  // namespace attngraph::ops
