// Attention: ONNX opset-23 Attention as a *composite*: it adds named primitive nodes to the
// graph, in the order of ONNX's v1.22 test data, so that every intermediate is traced,
// explained and differentiated like any other node.
//
// Legend: B batch, H = q_num_heads, G = kv_num_heads (H % G == 0, r = H / G), n queries,
// m = past + new keys, d_k the Q/K head size, d_v the V head size.
//   Q (B, H, n, d_k) or (B, n, H·d_k); K (B, G, m_new, d_k) or (B, m_new, G·d_k);
//   V (B, G, m_new, d_v) or (B, m_new, G·d_v); attn_mask broadcast to (B, H, n, m);
//   past_key (B, G, past, d_k), past_value (B, G, past, d_v).
//
//   <name>.Q, .K, .V            3-D inputs: heads moved into an axis (reshape + permute)
//   <name>.present_key/_value   concat(past, new) on the sequence axis (with a past)
//   <name>.KT                   Kᵀ
//   <name>.S_raw                Q·Kᵀ                     (B, H, n, m); GQA: computed as
//                               (B, G, r, n, m) in <name>.S_raw_groups, then merged
//   <name>.S                    scale · S_raw            scale = 1/√d_k unless given
//   <name>.S_capped             softcap · tanh(S / softcap)   (softcap > 0)
//   <name>.S_masked             attn_mask added (additive) or applied (boolean), and/or
//                               causal with offset = past (query i sees keys j ≤ i + past)
//   <name>.A                    softmax over keys (a fully masked row gives zeros)
//   <name>.O                    A·V                      (B, H, n, d_v)
//   <name>.Y                    3-D inputs: O back to (B, n, H·d_v)
//
// Deviations from ONNX (docs/ops.md): the scale multiplies Q·Kᵀ (ONNX scales Q and K by
// √scale each: equal up to rounding), and a fully masked row gives zeros (ONNX: NaN).
// qk_matmul_output_mode follows the v1.22 test data: 0 S, 1 S_capped, 2 S_masked, 3 A.
#include "ops/attention.hpp"

#include <cmath>

#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace attngraph {

namespace {

std::string dims(const Shape& s) {
    return "(" + shape_str(s) + ")";
}

// The broadcast of `a` to `b`'s shape, or an empty shape where they do not broadcast.
Shape broadcast_shape_or_empty(const Shape& a, const Shape& b) {
    try {
        return ops::broadcast_shapes(a, b);
    } catch (const ShapeError&) {
        return {};
    }
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
    throw ShapeError("node '" + name + "' (Attention): " + what);
}

}  // namespace

AttentionOutputs attention(const std::string& name, const AttentionInputs& in, const AttentionAttrs& a) {
    const Shape qs = in.q.shape(), ks = in.k.shape(), vs = in.v.shape();
    const std::string operands = "Q " + dims(qs) + ", K " + dims(ks) + ", V " + dims(vs);
    if (qs.size() != ks.size() || qs.size() != vs.size() || (qs.size() != 3 && qs.size() != 4))
        fail(name, "Q, K and V must all be 3-D or all 4-D: " + operands);
    if (qs[0] != ks[0] || qs[0] != vs[0]) fail(name, "Q, K and V differ in batch size: " + operands);
    const bool three_d = qs.size() == 3;
    std::size_t heads = 0, kv_heads = 0;
    if (three_d) {
        if (!a.q_num_heads || !a.kv_num_heads)
            fail(name, "3-D inputs need the attributes q_num_heads and kv_num_heads: " + operands);
        if (*a.q_num_heads <= 0 || *a.kv_num_heads <= 0)
            fail(name, "q_num_heads " + std::to_string(*a.q_num_heads) + " and kv_num_heads " +
                           std::to_string(*a.kv_num_heads) + " must be positive");
        heads = static_cast<std::size_t>(*a.q_num_heads), kv_heads = static_cast<std::size_t>(*a.kv_num_heads);
        if (qs[2] % heads != 0 || ks[2] % kv_heads != 0 || vs[2] % kv_heads != 0)
            fail(name, "hidden sizes are not multiples of the heads (q_num_heads " + std::to_string(heads) +
                           ", kv_num_heads " + std::to_string(kv_heads) + "): " + operands);
    } else {
        heads = qs[1], kv_heads = ks[1];
        if (vs[1] != kv_heads) fail(name, "K and V have different numbers of heads: " + operands);
        if ((a.q_num_heads && static_cast<std::size_t>(*a.q_num_heads) != heads) ||
            (a.kv_num_heads && static_cast<std::size_t>(*a.kv_num_heads) != kv_heads))
            fail(name, "q_num_heads/kv_num_heads disagree with the head axes of 4-D inputs: " + operands);
    }
    if (kv_heads == 0 || heads % kv_heads != 0)
        fail(name, "q_num_heads " + std::to_string(heads) + " is not a multiple of kv_num_heads " +
                       std::to_string(kv_heads) + ": " + operands);
    if (a.qk_matmul_output_mode < 0 || a.qk_matmul_output_mode > 3)
        fail(name, "qk_matmul_output_mode " + std::to_string(a.qk_matmul_output_mode) + " is not 0, 1, 2 or 3");
    if (a.softcap < 0) fail(name, "softcap " + ops::format_number(a.softcap) + " is negative");
    if (a.mask_type != "additive" && a.mask_type != "boolean")
        fail(name, "unknown mask_type '" + a.mask_type + "' (known: additive, boolean)");
    if (in.past_key.name().empty() != in.past_value.name().empty()) fail(name, "past_key and past_value come together");

    // heads into an axis: (B, n, H·d) -> (B, n, H, d) -> (B, H, n, d)
    auto heads_axis = [&](const Value& x, std::size_t h, const std::string& what) {
        if (!three_d) return x;
        Value split_heads = reshape(x, {static_cast<int>(h), -1}, 2).named(name + "." + what + "_heads");
        return permute(split_heads, {0, 2, 1, 3}).named(name + "." + what);
    };
    Value q = heads_axis(in.q, heads, "Q"), k = heads_axis(in.k, kv_heads, "K"), v = heads_axis(in.v, kv_heads, "V");
    if (q.shape()[3] != k.shape()[3])
        fail(name, "Q and K have different head sizes: " + operands + " (heads " + std::to_string(heads) + ", " +
                       std::to_string(kv_heads) + ")");
    if (k.shape()[2] != v.shape()[2]) fail(name, "K and V have different sequence lengths: " + operands);

    int past = 0;
    AttentionOutputs out;
    if (!in.past_key.name().empty()) {
        const Shape pk = in.past_key.shape(), pv = in.past_value.shape();
        const Shape ks4 = k.shape(), vs4 = v.shape();
        if (pk.size() != 4 || pv.size() != 4 || pk[0] != ks4[0] || pk[1] != ks4[1] || pk[3] != ks4[3] ||
            pv[0] != vs4[0] || pv[1] != vs4[1] || pv[3] != vs4[3] || pk[2] != pv[2])
            fail(name, "past_key " + dims(pk) + " and past_value " + dims(pv) + " do not fit K " + dims(ks4) +
                           " and V " + dims(vs4) + " as heads (B, G, past, d)");
        past = static_cast<int>(pk[2]);
        k = concat({in.past_key, k}, 2).named(name + ".present_key");
        v = concat({in.past_value, v}, 2).named(name + ".present_value");
        out.present_key = k, out.present_value = v;
    }
    const std::size_t dk = q.shape()[3];
    Value kt = transpose(k).named(name + ".KT");

    // S_raw = Q·Kᵀ; with groups, query heads g·r .. g·r + r - 1 read K/V head g
    const bool grouped = heads != kv_heads;
    const int G = static_cast<int>(kv_heads);
    Value s_raw;
    if (grouped) {
        Value qg = reshape(q, {G, -1}, 1, 2).named(name + ".Q_groups");  // (B, G, r, n, d_k)
        Value ktg = reshape(kt, {1}, 2, 2).named(name + ".KT_groups");   // (B, G, 1, d_k, m)
        Value sg = matmul(qg, ktg).named(name + ".S_raw_groups");        // (B, G, r, n, m)
        s_raw = reshape(sg, {-1}, 1, 2).named(name + ".S_raw");          // (B, H, n, m)
    } else {
        s_raw = matmul(q, kt).named(name + ".S_raw");
    }
    const double factor = a.scale ? *a.scale : 1.0 / std::sqrt(static_cast<double>(dk));
    Value s = scale(s_raw, factor).named(name + ".S");
    out.qk = s;
    if (a.softcap > 0) {
        Value divided = scale(s, 1.0 / a.softcap).named(name + ".S_div");
        Value squashed = s.builder().node<ops::Tanh>({divided}, {}, name + ".S_tanh");
        s = scale(squashed, a.softcap).named(name + ".S_capped");
    }
    if (a.qk_matmul_output_mode >= 1) out.qk = s;

    // causal: query i sees keys j <= i + past. With as many new keys as queries (self-attention
    // with a cache) that is m - n, which the Mask computes at run time: the graph then runs with
    // a cache of any length.
    const std::size_t n_queries = q.shape()[2], m_keys = k.shape()[2];
    const bool has_past = !in.past_key.name().empty();
    const int causal_offset = has_past && m_keys - static_cast<std::size_t>(past) == n_queries ? causal_from_end : past;
    const bool has_mask = !in.attn_mask.name().empty();
    if (has_mask) {
        const Shape ms = in.attn_mask.shape(), ss = s.shape();
        if (ms.size() < 2 || ms.size() > 4 || broadcast_shape_or_empty(ms, ss) != ss)
            fail(name, "attn_mask " + dims(ms) + " does not broadcast to the scores (B, H, n, m) = " + dims(ss) + " (" +
                           operands + (past ? ", past " + std::to_string(past) : "") + ")");
        s = mask_tensor(s, in.attn_mask, a.mask_type == "additive", a.is_causal != 0, causal_offset)
                .named(name + ".S_masked");
    } else if (a.is_causal) {
        s = mask_causal(s, causal_offset).named(name + ".S_masked");
    }
    if (a.qk_matmul_output_mode >= 2) out.qk = s;

    Value attn = softmax(s).named(name + ".A");
    if (a.qk_matmul_output_mode == 3) out.qk = attn;
    Value o;
    if (grouped) {
        Value ag = reshape(attn, {G, -1}, 1, 2).named(name + ".A_groups");  // (B, G, r, n, m)
        Value vg = reshape(v, {1}, 2, 2).named(name + ".V_groups");         // (B, G, 1, m, d_v)
        Value og = matmul(ag, vg).named(name + ".O_groups");                // (B, G, r, n, d_v)
        o = reshape(og, {-1}, 1, 2).named(name + ".O");                     // (B, H, n, d_v)
    } else {
        o = matmul(attn, v).named(name + ".O");
    }
    out.y = o;
    if (three_d) {
        Value rows = permute(o, {0, 2, 1, 3}).named(name + ".O_rows");  // (B, n, H, d_v)
        out.y = reshape(rows, {-1}, 2).named(name + ".Y");              // (B, n, H·d_v)
    }
    return out;
}

namespace ops {

Value expand_attention(const std::string& name, const std::vector<Value>& in, const AttentionAttrs& attrs) {
    // by count: Q K V [attn_mask] [past_key past_value] (past_key and past_value come together)
    AttentionInputs inputs{in.at(0), in.at(1), in.at(2), {}, {}, {}};
    if (in.size() == 4 || in.size() == 6) inputs.attn_mask = in[3];
    if (in.size() >= 5) inputs.past_key = in[in.size() - 2], inputs.past_value = in[in.size() - 1];
    return attention(name, inputs, attrs).y;
}

}  // namespace ops

// The op table (engine/op.cpp) takes the expansion's address without seeing GraphBuilder:
// instantiated here, where it is complete.
template Value expand_node<ops::Attention>(GraphBuilder&, const NodeAttrs&, const std::vector<Value>&,
                                           const std::string&);

}  // namespace attngraph
