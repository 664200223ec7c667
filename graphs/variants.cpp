#include "graphs/variants.hpp"

#include <cmath>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/expr.hpp"
#include "ops/attention.hpp"
#include "ops/ops.hpp"

namespace attngraph::graphs {

namespace {

namespace ex = expr;

enum class Pattern { none, causal, window };

// What distinguishes the batched variants from one another.
struct Plan {
    bool cross = false;
    std::size_t kv_heads = 0;  // g
    Pattern pattern = Pattern::none;
    bool alibi = false;
};

// Self-attention: w_in, b_in are Wqkv (d, d + 2·g·d_k), bqkv; cross: Wq (d, d), bq, and
// w_kv, b_kv are Wkv (d, 2·g·d_k), bkv.
struct BatchedWeights {
    Tensor x, c;
    Tensor w_in, b_in, w_kv, b_kv;
    Tensor wo, bo;
};

std::string sizes_text(const VariantConfig& c) {
    return "d_model " + std::to_string(c.d_model) + ", heads " + std::to_string(c.heads);
}

// Columns of 2-D tensors side by side (as f64).
Tensor hstack(const std::vector<Tensor>& parts) {
    std::size_t rows = parts.at(0).shape().at(0), cols = 0;
    for (const auto& p : parts) cols += p.shape().at(1);
    Array<double> out = Array<double>::from_shape({rows, cols});
    std::size_t offset = 0;
    for (const auto& p : parts) {
        const Array<double> a = p.cast(DType::f64).as<double>();
        const std::size_t pc = a.shape()[1];
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < pc; ++j) out(i, offset + j) = a(i, j);
        offset += pc;
    }
    return out;
}

// The permutation that moves the sequence axis (right after the lead axes) to just before
// the last axis: (lead, n, heads..., d_k) -> (lead, heads..., n, d_k).
std::vector<int> heads_first(std::size_t lead, std::size_t rank) {
    std::vector<int> p;
    for (std::size_t i = 0; i < lead; ++i) p.push_back(static_cast<int>(i));
    for (std::size_t i = lead + 1; i + 1 < rank; ++i) p.push_back(static_cast<int>(i));
    p.push_back(static_cast<int>(lead));
    p.push_back(static_cast<int>(rank - 1));
    return p;
}
std::vector<int> inverse(const std::vector<int>& p) {
    std::vector<int> inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[static_cast<std::size_t>(p[i])] = static_cast<int>(i);
    return inv;
}

Graph build_batched(const VariantConfig& c, const Plan& plan, const BatchedWeights& w) {
    const std::size_t h = c.heads, g = plan.kv_heads, r = h / g, dk = c.d_model / h;
    const std::size_t lead = c.batch ? 1 : 0;
    const int H = static_cast<int>(h), G = static_cast<int>(g), R = static_cast<int>(r), DK = static_cast<int>(dk);
    // heads as axes: (lead, h, n, d_k), or grouped (lead, g, r, n, d_k) with K, V (lead, g, 1, m, d_k).
    // The Reshapes keep the lead axes as they are (keep_leading), so no batch size is written
    // into the graph: X may have another batch size and sequence length.
    const int keep = static_cast<int>(lead);
    const bool grouped = g != h;
    const std::vector<int> q_shape = grouped ? std::vector<int>{-1, G, R, DK} : std::vector<int>{-1, H, DK};
    const std::vector<int> kv_shape = grouped ? std::vector<int>{-1, G, 1, DK} : std::vector<int>{-1, H, DK};
    const std::vector<int> perm = heads_first(lead, lead + q_shape.size());

    // structure chosen at run time (cross or self, which masks) goes through ex::Dynamic;
    // leaves and nodes are listed in the graph in the order they are made
    auto x = ex::input("X", w.x.cast(c.dtype));
    ex::Dynamic q_flat, k_flat, v_flat;
    if (!plan.cross) {
        auto wqkv = ex::param("Wqkv", w.w_in);
        auto bqkv = ex::param("bqkv", w.b_in);
        auto qkv = ex::linear(x, wqkv, bqkv).named("QKV");
        const int d = static_cast<int>(c.d_model), kvd = G * DK;
        if (grouped) {
            auto parts = ex::split(qkv, {d, kvd, kvd}, -1).named("QKV_split");
            q_flat = parts[0], k_flat = parts[1], v_flat = parts[2];
        } else {
            auto parts = ex::split(qkv, 3, -1).named("QKV_split");
            q_flat = parts[0], k_flat = parts[1], v_flat = parts[2];
        }
    } else {
        auto ctx = ex::input("C", w.c.cast(c.dtype));
        auto wq = ex::param("Wq", w.w_in);
        auto bq = ex::param("bq", w.b_in);
        auto wkv = ex::param("Wkv", w.w_kv);
        auto bkv = ex::param("bkv", w.b_kv);
        q_flat = ex::linear(x, wq, bq).named("Q_flat");
        auto kv = ex::linear(ctx, wkv, bkv).named("KV");
        auto parts = ex::split(kv, 2, -1).named("KV_split");
        k_flat = parts[0], v_flat = parts[1];
    }
    auto q = ex::permute(ex::reshape(q_flat, q_shape, keep).named("Q_heads"), perm).named("Q");
    auto k = ex::permute(ex::reshape(k_flat, kv_shape, keep).named("K_heads"), perm).named("K");
    auto v = ex::permute(ex::reshape(v_flat, kv_shape, keep).named("V_heads"), perm).named("V");
    auto kt = ex::transpose(k).named("KT");
    ex::Dynamic s = ex::scale(ex::matmul(q, kt).named("S_raw"), 1.0 / std::sqrt(static_cast<double>(dk))).named("S");
    if (plan.alibi) {
        // ALiBi from h slopes and the positions at run time (the Alibi op): no (h, n, n) table
        Tensor slopes = zeros(DType::f64, {h});
        for (std::size_t hh = 0; hh < h; ++hh) slopes.as<double>()(hh) = alibi_slope(hh, h);
        auto alibi_slopes = ex::param("alibi_slopes", slopes.cast(c.dtype));
        s = ex::alibi(s, alibi_slopes).named("S_bias");
    }
    if (plan.pattern == Pattern::causal) s = ex::mask_causal(s).named("S_masked");
    if (plan.pattern == Pattern::window) s = ex::mask_window(s, static_cast<int>(c.window), c.causal).named("S_masked");
    if (!c.lengths.empty()) s = ex::mask_padding(s, c.lengths).named("S_padded");
    auto a = ex::softmax(s).named("A");
    auto o = ex::matmul(a, v).named("O");
    auto rows = ex::permute(o, inverse(perm)).named("O_rows");
    auto concat_heads = ex::reshape(rows, {-1, static_cast<int>(c.d_model)}, keep).named("O_concat");
    auto wo = ex::param("Wo", w.wo);
    auto bo = ex::param("bo", w.bo);
    auto y = ex::linear(concat_heads, wo, bo).named("Y");
    return ex::to_graph(y, c.name.empty() ? c.variant : c.name, {c.dtype, {}});
}

// decode: one step of KV-cache decoding with the Attention composite. X (B, n, d) holds the
// n new tokens (n = 1: one step), past_key/past_value (B, g, past, d_k) the cache; the outputs
// are Y and the cache with the new tokens appended, attn.present_key/present_value.
//   QKV = X·Wqkv + bqkv,  Q_flat, K_flat, V_flat = split(QKV)
//   attn = Attention(Q_flat, K_flat, V_flat, past_key, past_value; causal, h, g heads)
//   Y = attn.Y·Wo + bo
Graph build_decode(const VariantConfig& c, std::size_t g, const BatchedWeights& w, const Tensor& past_key,
                   const Tensor& past_value) {
    GraphBuilder b(c.name.empty() ? c.variant : c.name, c.dtype);
    Value x = b.input("X", w.x.cast(c.dtype));
    Value wqkv = b.param("Wqkv", w.w_in), bqkv = b.param("bqkv", w.b_in);
    Value qkv = linear(x, wqkv, bqkv).named("QKV");
    const int d = static_cast<int>(c.d_model), kvd = static_cast<int>(g * (c.d_model / c.heads));
    const auto parts = split(qkv, {d, kvd, kvd}, -1, "QKV_split");
    AttentionInputs in;
    in.q = parts[0], in.k = parts[1], in.v = parts[2];
    in.past_key = b.input("past_key", past_key.cast(c.dtype));
    in.past_value = b.input("past_value", past_value.cast(c.dtype));
    AttentionAttrs a;
    a.is_causal = 1;
    a.q_num_heads = static_cast<int>(c.heads);
    a.kv_num_heads = static_cast<int>(g);
    const AttentionOutputs o = attention("attn", in, a);
    Value wo = b.param("Wo", w.wo), bo = b.param("bo", w.bo);
    b.output(linear(o.y, wo, bo).named("Y"));
    b.output(o.present_key);
    b.output(o.present_value);
    return b.build();
}

void check_sizes(const VariantConfig& c, std::size_t kv_heads) {
    if (c.seq == 0) throw GraphError("seq must be at least 1");
    if (c.d_model == 0 || c.heads == 0 || c.d_model % c.heads != 0)
        throw GraphError(sizes_text(c) + ": d_model must be a positive multiple of heads");
    if (kv_heads == 0 || c.heads % kv_heads != 0)
        throw GraphError("heads " + std::to_string(c.heads) + " is not a multiple of groups " +
                         std::to_string(kv_heads));
    if (!c.lengths.empty()) {
        if (c.batch == 0) throw GraphError("key padding lengths need a batch axis (batch > 0)");
        if (c.lengths.size() != c.batch)
            throw GraphError(std::to_string(c.lengths.size()) + " padding lengths for batch " +
                             std::to_string(c.batch));
    }
}

}  // namespace

double alibi_slope(std::size_t head, std::size_t heads) {
    return std::pow(2.0, -8.0 * static_cast<double>(head + 1) / static_cast<double>(heads));
}

const std::vector<VariantInfo>& variant_list() {
    static const std::vector<VariantInfo> list = {
        {"mha", "multi-head self-attention, one branch per head (as the seed)"},
        {"mha-batched", "multi-head self-attention, one fused QKV Linear, heads as an axis"},
        {"causal", "causal self-attention: query i attends to keys j <= i"},
        {"cross", "cross-attention: queries from X (n tokens), keys and values from C (--kv-seq tokens)"},
        {"mqa", "multi-query attention: one K/V head shared by every query head"},
        {"gqa", "grouped-query attention: --groups K/V heads, each shared by heads/groups query heads"},
        {"sliding-window", "sliding-window attention: |i - j| < --window (0 <= i - j < window with --causal)"},
        {"alibi", "ALiBi causal attention: scores - m_h |i - j| from per-head slopes, m_h = 2^(-8(h+1)/heads)"},
        {"decode", "one step of KV-cache decoding: --seq new tokens after --past cached keys/values (Attention op)"},
    };
    return list;
}

Graph build_variant(const VariantConfig& c) {
    const std::string& v = c.variant;
    const bool known = std::ranges::any_of(variant_list(), [&](const VariantInfo& info) { return info.name == v; });
    if (!known) {
        std::string names;
        for (const auto& info : variant_list()) names += (names.empty() ? "" : ", ") + info.name;
        throw GraphError("unknown variant '" + v + "' (known: " + names + ")");
    }
    auto refuse = [&](bool given, const std::string& what) {
        if (given) throw GraphError("variant '" + v + "' takes no " + what);
    };
    refuse(c.kv_seq != 0 && v != "cross", "kv_seq (only cross has keys of another length)");
    refuse(c.groups != 0 && v != "gqa" && v != "decode", "groups (only gqa and decode)");
    refuse(c.past != 0 && v != "decode", "past (only decode)");
    refuse(c.window != 0 && v != "sliding-window", "window (only sliding-window)");
    refuse(c.causal && v != "sliding-window", "causal flag (only sliding-window; use the causal variant)");
    if (v == "gqa" && c.groups == 0) throw GraphError("variant 'gqa' needs groups");
    if (v == "sliding-window" && c.window == 0) throw GraphError("variant 'sliding-window' needs window >= 1");

    if (v == "mha") {
        refuse(!c.lengths.empty(), "padding lengths (per-head form; use mha-batched)");
        check_sizes(c, c.heads);
        MhaConfig m;
        m.seq = c.seq;
        m.d_model = c.d_model;
        m.heads = c.heads;
        m.batch = c.batch;
        m.dtype = c.dtype;
        m.seed = c.seed;
        m.name = c.name.empty() ? v : c.name;
        return build_mha(m);
    }

    Plan plan;
    plan.cross = v == "cross";
    plan.kv_heads = v == "mqa" ? 1 : v == "gqa" || (v == "decode" && c.groups) ? c.groups : c.heads;
    plan.pattern = v == "causal" || v == "alibi" ? Pattern::causal
                   : v == "sliding-window"       ? Pattern::window
                                                 : Pattern::none;
    plan.alibi = v == "alibi";
    check_sizes(c, plan.kv_heads);
    if (plan.cross && c.kv_seq == 0) throw GraphError("variant 'cross' needs kv_seq (the length of C)");

    const std::size_t d = c.d_model, kvd = plan.kv_heads * (d / c.heads);
    const std::size_t m = plan.cross ? c.kv_seq : c.seq;
    const double scale_w = 1.0 / std::sqrt(static_cast<double>(d));
    auto rows_of = [&](std::size_t len) { return c.batch ? Shape{c.batch, len, d} : Shape{len, d}; };
    std::uint64_t s = c.seed * 1000003;
    BatchedWeights w;
    w.x = random_tensor(rows_of(c.seq), c.dtype, ++s);
    if (plan.cross) {
        w.c = random_tensor(rows_of(m), c.dtype, ++s);
        w.w_in = random_tensor({d, d}, c.dtype, ++s, scale_w);
        w.b_in = random_tensor({1, d}, c.dtype, ++s, scale_w);
        w.w_kv = random_tensor({d, 2 * kvd}, c.dtype, ++s, scale_w);
        w.b_kv = random_tensor({1, 2 * kvd}, c.dtype, ++s, scale_w);
    } else {
        w.w_in = random_tensor({d, d + 2 * kvd}, c.dtype, ++s, scale_w);
        w.b_in = random_tensor({1, d + 2 * kvd}, c.dtype, ++s, scale_w);
    }
    w.wo = random_tensor({d, d}, c.dtype, ++s, scale_w);
    w.bo = random_tensor({1, d}, c.dtype, ++s, scale_w);
    if (v == "decode") {
        refuse(!c.lengths.empty(), "padding lengths");
        // X is (B, n, d) always (B = 1 without --batch): Attention's 3-D inputs have a batch axis
        const std::size_t batch = c.batch ? c.batch : 1, dk = d / c.heads;
        w.x = random_tensor({batch, c.seq, d}, c.dtype, c.seed * 1000003 + 1);
        const Tensor past_key = random_tensor({batch, plan.kv_heads, c.past, dk}, c.dtype, ++s);
        const Tensor past_value = random_tensor({batch, plan.kv_heads, c.past, dk}, c.dtype, ++s);
        return build_decode(c, plan.kv_heads, w, past_key, past_value);
    }
    return build_batched(c, plan, w);
}

Graph build_batched_mha(const MhaConfig& mha, const MhaWeights& weights) {
    VariantConfig c;
    c.variant = "mha-batched";
    c.batch = mha.batch;
    c.seq = mha.seq;
    c.d_model = mha.d_model;
    c.heads = mha.heads;
    c.dtype = mha.dtype;
    c.name = mha.name;
    check_sizes(c, c.heads);
    if (weights.wq.size() != c.heads)
        throw GraphError("build_batched_mha: " + std::to_string(weights.wq.size()) +
                         " heads of weights for heads = " + std::to_string(c.heads));
    Plan plan;
    plan.kv_heads = c.heads;
    BatchedWeights w;
    w.x = weights.x;
    std::vector<Tensor> cols, bias;
    for (const auto* group : {&weights.wq, &weights.wk, &weights.wv})
        cols.insert(cols.end(), group->begin(), group->end());
    for (const auto* group : {&weights.bq, &weights.bk, &weights.bv})
        bias.insert(bias.end(), group->begin(), group->end());
    w.w_in = hstack(cols).cast(c.dtype);
    w.b_in = hstack(bias).cast(c.dtype);
    w.wo = weights.wo.cast(c.dtype);
    w.bo = weights.bo.cast(c.dtype);
    return build_batched(c, plan, w);
}

}  // namespace attngraph::graphs
