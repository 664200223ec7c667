#pragma once
// What graphs/variants.cpp and graphs/flex.cpp build their score and mask modifications from,
// as expressions (engine/expr.hpp):
//  - engine/expr.hpp's functions for the ops (Mul, Sub, Tanh, Less, Range, Gather,
//    RMSNormalization, RotaryEmbedding, ...), each result given the name the variants trace;
//  - FlexAttention's mask_mod / score_mod arguments as tensors: q_idx (n, 1) and kv_idx (m) from
//    Range, so that a comparison of the two broadcasts to the (n, m) of the scores, and the
//    masks of its standard examples written with comparisons, Where, Mul and Gather.
// The masks are 0/1 "keep" tensors for Mask(S, keep). Comparisons are strict (Less, Greater)
// and positions whole numbers, so j <= i is written j < i + 1, with i + 1 a Range of its own
// (Range(1, n + 1)): no constant tensors are needed. A logical `a and b` of 0/1 tensors is
// a·b (Mul), `a or b` is where(a, a, b).
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "engine/expr.hpp"
#include "graphs/variants.hpp"
#include "ops/ops.hpp"

namespace attngraph::graphs::mods {

namespace ex = attngraph::expr;
using Expr = ex::Dynamic;

// ---- the ops, named --------------------------------------------------------------------------

/// [start, limit) as a 1-D tensor (delta 1).
inline Expr range(double start, double limit, const std::string& name) {
    return ex::range(start, limit).named(name);
}
inline Expr mul(const Expr& a, const Expr& b, const std::string& name) {
    return ex::mul(a, b).named(name);
}
inline Expr sub(const Expr& a, const Expr& b, const std::string& name) {
    return ex::sub(a, b).named(name);
}
inline Expr add(const Expr& a, const Expr& b, const std::string& name) {
    return ex::add(a, b).named(name);
}
inline Expr scale(const Expr& x, double factor, const std::string& name) {
    return ex::scale(x, factor).named(name);
}
inline Expr tanh(const Expr& x, const std::string& name) {
    return ex::tanh(x).named(name);
}
inline Expr exp(const Expr& x, const std::string& name) {
    return ex::exp(x).named(name);
}
inline Expr cos(const Expr& x, const std::string& name) {
    return ex::cos(x).named(name);
}
inline Expr sin(const Expr& x, const std::string& name) {
    return ex::sin(x).named(name);
}
/// 1 where a < b (a > b, a == b), else 0.
inline Expr less(const Expr& a, const Expr& b, const std::string& name) {
    return ex::less(a, b).named(name);
}
inline Expr greater(const Expr& a, const Expr& b, const std::string& name) {
    return ex::greater(a, b).named(name);
}
inline Expr equal(const Expr& a, const Expr& b, const std::string& name) {
    return ex::equal(a, b).named(name);
}
/// a where cond is nonzero, else b.
inline Expr where(const Expr& cond, const Expr& a, const Expr& b, const std::string& name) {
    return ex::where(cond, a, b).named(name);
}
inline Expr reduce_sum(const Expr& x, std::vector<int> axes, bool keepdims, const std::string& name) {
    ops::ReduceSumAttrs a;
    a.axes = std::move(axes);
    a.keepdims = keepdims ? 1 : 0;
    return ex::node<ops::ReduceSum>(a, x).named(name);
}
/// data taken along `axis` at `indices`.
inline Expr gather(const Expr& data, const Expr& indices, int axis, const std::string& name) {
    return ex::gather(data, indices, axis).named(name);
}
inline Expr reshape(const Expr& x, std::vector<int> shape, const std::string& name) {
    return ex::reshape(x, std::move(shape)).named(name);
}
/// x / sqrt(mean(x², last axis) + epsilon) · scale.
inline Expr rms_norm(const Expr& x, const Expr& scale, double epsilon, const std::string& name) {
    ops::RMSNormalizationAttrs a;
    a.epsilon = epsilon;
    return ex::node<ops::RMSNormalization>(a, x, scale).named(name);
}
/// RoPE of x (B, S, heads·D) with caches (P, D/2) read at position_ids (1, S), rotate-half pairs.
inline Expr rotary(const Expr& x, const Expr& cos_cache, const Expr& sin_cache, const Expr& position_ids, int heads,
                   const std::string& name) {
    ops::RotaryEmbeddingAttrs a;
    a.num_heads = heads;
    return ex::node<ops::RotaryEmbedding>(a, x, cos_cache, sin_cache, position_ids).named(name);
}
/// Mask(x, keep): -inf where keep is 0.
inline Expr mask(const Expr& x, const Expr& keep, const std::string& name) {
    return ex::mask(x, keep).named(name);
}

// ---- FlexAttention's index tensors and masks -------------------------------------------------

/// A query-side position tensor: Range(start, start + n) as a column (n, 1), named `name`
/// (its Range `name`_range): start 0 gives q_idx, start 1 gives q_idx + 1, ...
inline Expr q_column(double start, std::size_t n, const std::string& name) {
    return reshape(range(start, start + static_cast<double>(n), name + "_range"), {-1, 1}, name);
}
/// kv_idx: Range(0, m), (m).
inline Expr kv_index(std::size_t m) {
    return range(0, static_cast<double>(m), "kv_idx");
}

/// causal: kv_idx <= q_idx, as kv_idx < q_idx + 1 (q_end = Range(1, n + 1) as a column).
inline Expr causal_keep(std::size_t n, const Expr& kv_idx, const std::string& name = "causal") {
    const Expr q_end = q_column(1, n, "q_end");
    return less(kv_idx, q_end, name);
}

/// prefix-LM (attention-gym's prefix_lm_causal_mask): kv_idx < P or kv_idx <= q_idx.
inline Expr prefix_lm_keep(std::size_t n, std::size_t prefix) {
    const Expr kv_idx = kv_index(n);
    const Expr causal = causal_keep(n, kv_idx);
    const Expr length = range(static_cast<double>(prefix), static_cast<double>(prefix) + 1, "prefix_length");  // [P]
    const Expr in_prefix = less(kv_idx, length, "in_prefix");
    return where(in_prefix, in_prefix, causal, "keep");  // in_prefix or causal
}

/// document masking (FlexAttention's document_id[q_idx] == document_id[kv_idx]; with `causal`
/// attention-gym's document-causal mask). `ends` (K) holds each document's end (the cumulative
/// lengths, attention-gym's offsets[1:]); document_id[p] = the number of documents ending at or
/// before p = sum_k (ends_k < p + 1).
inline Expr document_keep(std::size_t n, const Expr& ends, bool causal) {
    const Expr q_idx = q_column(0, n, "q_idx");
    const Expr kv_idx = kv_index(n);
    const Expr q_end = q_column(1, n, "q_end");
    const Expr ended = less(ends, q_end, "ended");  // (n, K): document k ended at or before p
    const Expr document_id = reduce_sum(ended, {-1}, false, "document_id");
    const Expr doc_q = gather(document_id, q_idx, 0, "doc_q");     // (n, 1)
    const Expr doc_kv = gather(document_id, kv_idx, 0, "doc_kv");  // (n)
    const Expr same = equal(doc_q, doc_kv, causal ? "same_doc" : "keep");
    if (!causal) return same;
    return mul(same, less(kv_idx, q_end, "causal"), "keep");
}

/// The documents' ends (cumulative lengths) for --documents L1,L2,...
inline Tensor document_ends(const std::vector<int>& lengths, DType dtype) {
    Tensor t = zeros(DType::f64, {lengths.size()});
    double end = 0;
    for (std::size_t k = 0; k < lengths.size(); ++k) t.as<double>()(k) = end += lengths[k];
    return t.cast(dtype);
}

/// Gemma-2's softcapping: c·tanh(s / c), as S_div, S_tanh, S_capped (the Attention op's names).
inline Expr softcap(const Expr& s, double cap) {
    return scale(tanh(scale(s, 1.0 / cap, "S_div"), "S_tanh"), cap, "S_capped");
}

// ---- the options of the modifications --------------------------------------------------------

/// softcap, when given: a positive finite number.
inline void check_softcap(const VariantConfig& c) {
    if (c.softcap && !(std::isfinite(*c.softcap) && *c.softcap > 0))
        throw GraphError("softcap must be a positive finite number, got " + ops::format_number(*c.softcap));
}

inline void check_prefix(const VariantConfig& c) {
    if (c.prefix_length == 0) throw GraphError("variant '" + c.variant + "' needs a prefix length P (1 <= P <= seq)");
    if (c.prefix_length > c.seq)
        throw GraphError("prefix length " + std::to_string(c.prefix_length) + " is longer than the sequence (seq " +
                         std::to_string(c.seq) + ")");
}

inline void check_documents(const VariantConfig& c) {
    if (c.documents.empty())
        throw GraphError("variant '" + c.variant + "' needs documents (their lengths, summing to seq)");
    std::string list;
    long sum = 0;
    for (const int len : c.documents) {
        if (!list.empty()) list += ',';
        list += std::to_string(len);
        sum += len;
    }
    for (const int len : c.documents)
        if (len < 1) throw GraphError("document lengths must be at least 1, got " + list);
    if (sum != static_cast<long>(c.seq))
        throw GraphError("documents " + list + " sum to " + std::to_string(sum) + ", not to seq " +
                         std::to_string(c.seq));
}

}  // namespace attngraph::graphs::mods
