#include "graphs/variants.hpp"

#include <cmath>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/expr.hpp"
#include "graphs/flex.hpp"
#include "graphs/flex_mods.hpp"
#include "ops/attention.hpp"
#include "ops/ops.hpp"

namespace attngraph::graphs {

namespace {

namespace ex = expr;
using mods::Expr;

enum class Pattern { none, causal, window };
// masks written with index ops (FlexAttention's mask_mod), graphs/flex_mods.hpp
enum class IndexMask { none, prefix_lm, document };

// What distinguishes the batched variants from one another.
struct Plan {
    bool cross = false;
    std::size_t kv_heads = 0;  // g
    Pattern pattern = Pattern::none;
    bool window_causal = false;  // window: 0 <= i - j < w instead of |i - j| < w
    bool alibi = false;
    double softcap = 0;  // > 0: S -> softcap · tanh(S / softcap)
    bool sinks = false;  // a per-head sink logit joins each softmax row
    IndexMask index_mask = IndexMask::none;
    bool llama = false;  // RMSNorm before the projections, no biases, RoPE on Q and K
    bool diff = false;   // differential: two maps per head, A_1 - lambda · A_2
};

// Self-attention: w_in, b_in are Wqkv (d, d + 2·g·d_k), bqkv; cross: Wq (d, d), bq, and
// w_kv, b_kv are Wkv (d, 2·g·d_k), bkv. The extras of llama (norm_scale), sinks (sinks),
// diff (lambda) and document (document_ends).
struct BatchedWeights {
    Tensor x, c;
    Tensor w_in, b_in, w_kv, b_kv;
    Tensor wo, bo;
    Tensor norm_scale, sinks, lambda, document_ends;
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

// x·W, + b when `bias` (llama's projections have none): params named w_name and b_name, made
// in that order before the node (a graph lists leaves and nodes in the order they are made).
Expr projection(const Expr& x, const std::string& w_name, const Tensor& w, const std::string& b_name, const Tensor& b,
                bool bias, const std::string& name) {
    auto weight = ex::param(w_name, w);
    if (!bias) return ex::linear(x, weight).named(name);
    auto offset = ex::param(b_name, b);
    return ex::linear(x, weight, offset).named(name);
}

Graph build_batched(const VariantConfig& c, const Plan& plan, const BatchedWeights& w) {
    const std::size_t h = c.heads, g = plan.kv_heads, r = h / g, dk = c.d_model / h;
    // llama's RoPE takes (B, n, h·d_k): X always has a batch axis there (B = 1 without --batch)
    const std::size_t lead = c.batch || plan.llama ? 1 : 0;
    const int H = static_cast<int>(h), G = static_cast<int>(g), R = static_cast<int>(r), DK = static_cast<int>(dk);
    // heads as axes: (lead, h, n, d_k), or grouped (lead, g, r, n, d_k) with K, V (lead, g, 1, m, d_k);
    // diff: (lead, h, 2, n, d_k/2), the two halves of each head's Q and K (Q1, Q2), V (lead, h, 1, m, d_k).
    // The Reshapes keep the lead axes as they are (keep_leading), so no batch size is written
    // into the graph: X may have another batch size and sequence length.
    const int keep = static_cast<int>(lead);
    const bool grouped = g != h;
    std::vector<int> q_shape = grouped ? std::vector<int>{-1, G, R, DK} : std::vector<int>{-1, H, DK};
    std::vector<int> k_shape = grouped ? std::vector<int>{-1, G, 1, DK} : std::vector<int>{-1, H, DK};
    std::vector<int> v_shape = k_shape;
    if (plan.diff) {
        q_shape = k_shape = {-1, H, 2, DK / 2};
        v_shape = {-1, H, 1, DK};
    }
    const std::vector<int> perm = heads_first(lead, lead + q_shape.size());

    // structure chosen at run time (cross or self, which masks) goes through ex::Dynamic;
    // leaves and nodes are listed in the graph in the order they are made
    Expr x = ex::input("X", w.x.cast(c.dtype));
    if (plan.llama) {
        auto norm_scale = ex::param("norm_scale", w.norm_scale);
        x = mods::rms_norm(x, norm_scale, 1e-5, "X_norm");
    }
    Expr q_flat, k_flat, v_flat;
    if (!plan.cross) {
        const Expr qkv = projection(x, "Wqkv", w.w_in, "bqkv", w.b_in, !plan.llama, "QKV");
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
    if (plan.llama) {
        // RoPE (rotate-half pairs, theta 10000) at positions 0..n-1, its cos/sin tables computed
        // in the graph: angle(p, i) = p · theta^(-2i / d_k)
        const double n = static_cast<double>(c.seq), half = static_cast<double>(dk / 2);
        Expr positions = mods::range(0, n, "positions");
        Expr position_ids = mods::reshape(positions, {1, -1}, "position_ids");  // (1, n): every sequence
        Expr freq_index = mods::range(0, half, "freq_index");
        Expr inv_freq = mods::exp(
            mods::scale(freq_index, -2.0 * std::log(10000.0) / static_cast<double>(dk), "freq_exponent"), "inv_freq");
        Expr angles = mods::mul(mods::reshape(positions, {-1, 1}, "position_column"), inv_freq, "rope_angles");
        Expr cos_cache = mods::cos(angles, "cos_cache");
        Expr sin_cache = mods::sin(angles, "sin_cache");
        q_flat = mods::rotary(q_flat, cos_cache, sin_cache, position_ids, H, "Q_rope");
        k_flat = mods::rotary(k_flat, cos_cache, sin_cache, position_ids, G, "K_rope");
    }
    auto q = ex::permute(ex::reshape(q_flat, q_shape, keep).named("Q_heads"), perm).named("Q");
    auto k = ex::permute(ex::reshape(k_flat, k_shape, keep).named("K_heads"), perm).named("K");
    auto v = ex::permute(ex::reshape(v_flat, v_shape, keep).named("V_heads"), perm).named("V");
    auto kt = ex::transpose(k).named("KT");
    auto s_raw = ex::matmul(q, kt).named("S_raw");
    const double head_size = static_cast<double>(plan.diff ? dk / 2 : dk);
    Expr s = ex::scale(s_raw, 1.0 / std::sqrt(head_size)).named("S");
    if (plan.alibi) {
        // ALiBi from h slopes and the positions at run time (the Alibi op): no (h, n, n) table
        Tensor slopes = zeros(DType::f64, {h});
        for (std::size_t hh = 0; hh < h; ++hh) slopes.as<double>()(hh) = alibi_slope(hh, h);
        auto alibi_slopes = ex::param("alibi_slopes", slopes.cast(c.dtype));
        s = ex::alibi(s, alibi_slopes).named("S_bias");
    }
    if (plan.softcap > 0) s = mods::softcap(s, plan.softcap);
    if (plan.pattern == Pattern::causal) s = ex::mask_causal(s).named("S_masked");
    if (plan.pattern == Pattern::window)
        s = ex::mask_window(s, static_cast<int>(c.window), plan.window_causal).named("S_masked");
    if (plan.index_mask == IndexMask::prefix_lm)
        s = mods::mask(s, mods::prefix_lm_keep(c.seq, c.prefix_length), "S_masked");
    if (plan.index_mask == IndexMask::document) {
        auto ends = ex::input("document_ends", w.document_ends);
        s = mods::mask(s, mods::document_keep(c.seq, ends, c.causal), "S_masked");
    }
    if (!c.lengths.empty()) s = ex::mask_padding(s, c.lengths).named("S_padded");
    Expr a;
    if (plan.sinks) {
        // gpt-oss: the head's sink logit is one more column of each row of scores; softmax over
        // the m + 1, then the sink's column is dropped (its weight goes nowhere). The column is
        // 0·S_raw[..., :1] + sink_h: S_raw is finite (S may hold -inf), and no size is written in.
        auto sinks = ex::param("sinks", w.sinks);
        Expr sinks_heads = mods::reshape(sinks, {-1, 1, 1}, "sinks_heads");  // (h, 1, 1)
        Expr zero_column = mods::scale(ex::slice(s_raw, -1, 0, 1).named("S_first"), 0.0, "zero_column");
        Expr sink_column = mods::add(zero_column, sinks_heads, "S_sink");  // (lead, h, n, 1)
        std::vector<Expr> columns = {s, sink_column};
        Expr with_sink = ex::concat(columns, -1).named("S_sinks");
        Expr a_sinks = ex::softmax(with_sink).named("A_sinks");
        a = ex::slice(a_sinks, -1, 0, -1).named("A");
    } else {
        a = ex::softmax(s).named("A");
    }
    if (plan.diff) {
        // A (lead, h, 2, n, m): softmax(Q1·K1ᵀ) and softmax(Q2·K2ᵀ), their difference weighted by lambda
        auto lambda = ex::param("lambda", w.lambda);
        auto maps = ex::split(a, 2, -3).named("A_split");
        Expr a1 = maps[0], a2 = maps[1];
        a = mods::sub(a1, mods::mul(a2, lambda, "A_2_weighted"), "A_diff");  // (lead, h, 1, n, m)
    }
    auto o = ex::matmul(a, v).named("O");
    auto rows = ex::permute(o, inverse(perm)).named("O_rows");
    auto concat_heads = ex::reshape(rows, {-1, static_cast<int>(c.d_model)}, keep).named("O_concat");
    const Expr y = projection(concat_heads, "Wo", w.wo, "bo", w.bo, !plan.llama, "Y");
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
        {"llama", "Llama block: RMSNorm, Q/K/V without biases, RoPE, GQA (--groups), causal, output projection"},
        {"softcap", "Gemma-2 causal attention, scores -> c tanh(S / c) (--softcap C, default 50; --window W)"},
        {"sinks", "gpt-oss causal attention with a learned sink logit per head in every softmax row (--window W)"},
        {"diff", "differential attention: softmax(Q1 K1^T) - lambda softmax(Q2 K2^T), causal, lambda a parameter"},
        {"prefix-lm", "prefix-LM: keys j < --prefix-length P seen by every query, causal after (index ops)"},
        {"document", "document masking: --documents L1,L2,.. packed, queries see their own document (index ops)"},
    };
    return list;
}

static Graph build_within_budget(const VariantConfig& c) {
    const std::string& v = c.variant;
    if (v.rfind("flex/", 0) == 0) return build_flex(c);
    const bool known = std::ranges::any_of(variant_list(), [&](const VariantInfo& info) { return info.name == v; });
    if (!known) {
        std::string names;
        for (const auto& info : variant_list()) names += (names.empty() ? "" : ", ") + info.name;
        for (const auto& info : flex_list()) names += ", " + info.name;
        throw GraphError("unknown variant '" + v + "' (known: " + names + ")");
    }
    auto refuse = [&](bool given, const std::string& what) {
        if (given) throw GraphError("variant '" + v + "' takes no " + what);
    };
    const bool windowed = v == "sliding-window" || v == "softcap" || v == "sinks";
    refuse(c.kv_seq != 0 && v != "cross", "kv_seq (only cross has keys of another length)");
    refuse(c.groups != 0 && v != "gqa" && v != "decode" && v != "llama", "groups (only gqa, llama and decode)");
    refuse(c.past != 0 && v != "decode", "past (only decode)");
    refuse(c.window != 0 && !windowed, "window (only sliding-window, softcap and sinks)");
    refuse(c.causal && v != "sliding-window" && v != "document",
           "causal flag (only sliding-window and document; use the causal variant)");
    refuse(c.softcap.has_value() && v != "softcap", "softcap (only softcap)");
    refuse(c.prefix_length != 0 && v != "prefix-lm", "prefix length (only prefix-lm)");
    refuse(!c.documents.empty() && v != "document", "documents (only document)");
    if (v == "gqa" && c.groups == 0) throw GraphError("variant 'gqa' needs groups");
    if (v == "sliding-window" && c.window == 0) throw GraphError("variant 'sliding-window' needs window >= 1");
    mods::check_softcap(c);

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
    plan.kv_heads = v == "mqa"                                                         ? 1
                    : v == "gqa" || ((v == "decode" || v == "llama") && c.groups != 0) ? c.groups
                                                                                       : c.heads;
    const bool causal = v == "causal" || v == "alibi" || v == "llama" || v == "softcap" || v == "sinks" || v == "diff";
    plan.pattern = windowed && c.window ? Pattern::window : causal ? Pattern::causal : Pattern::none;
    plan.window_causal = v != "sliding-window" || c.causal;  // softcap and sinks: causal windows
    plan.alibi = v == "alibi";
    plan.softcap = v == "softcap" ? c.softcap.value_or(50.0) : 0.0;
    plan.sinks = v == "sinks";
    plan.index_mask = v == "prefix-lm" ? IndexMask::prefix_lm : v == "document" ? IndexMask::document : IndexMask::none;
    plan.llama = v == "llama";
    plan.diff = v == "diff";
    check_sizes(c, plan.kv_heads);
    if (plan.cross && c.kv_seq == 0) throw GraphError("variant 'cross' needs kv_seq (the length of C)");
    const std::size_t dk = c.d_model / c.heads;
    if ((plan.llama || plan.diff) && dk % 2 != 0)
        throw GraphError("variant '" + v + "': head size d_k = d_model / heads = " + std::to_string(dk) + " is odd: " +
                         (plan.llama ? "RoPE rotates pairs of features" : "each head's Q and K split into two halves"));
    if (v == "prefix-lm") mods::check_prefix(c);
    if (v == "document") mods::check_documents(c);

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
        const std::size_t batch = c.batch ? c.batch : 1;
        w.x = random_tensor({batch, c.seq, d}, c.dtype, c.seed * 1000003 + 1);
        const Tensor past_key = random_tensor({batch, plan.kv_heads, c.past, dk}, c.dtype, ++s);
        const Tensor past_value = random_tensor({batch, plan.kv_heads, c.past, dk}, c.dtype, ++s);
        return build_decode(c, plan.kv_heads, w, past_key, past_value);
    }
    if (plan.llama) {
        // X is (B, n, d) always (B = 1 without --batch), as RoPE's 3-D input wants it;
        // the norm's scale is near 1 (1 + uniform(-0.2, 0.2))
        if (!c.batch) w.x = random_tensor({1, c.seq, d}, c.dtype, c.seed * 1000003 + 1);
        Tensor scale = random_tensor({d}, DType::f64, ++s, 0.2);
        for (auto& e : scale.as<double>()) e += 1.0;
        w.norm_scale = scale.cast(c.dtype);
    }
    if (plan.sinks) w.sinks = random_tensor({c.heads}, c.dtype, ++s);
    if (plan.diff) {
        // lambda_init of the DIFF Transformer's first layer: 0.8 - 0.6·exp(0) = 0.2
        Tensor lambda = zeros(DType::f64, {1});
        lambda.as<double>()(0) = 0.2;
        w.lambda = lambda.cast(c.dtype);
    }
    if (plan.index_mask == IndexMask::document) w.document_ends = mods::document_ends(c.documents, c.dtype);
    return build_batched(c, plan, w);
}

Graph build_variant(const VariantConfig& c) {
    const std::size_t max_bytes = c.max_bytes ? c.max_bytes : default_max_memory();
    const TensorBudget budget(max_bytes / 4, std::to_string(max_bytes / 4) + " bytes (a quarter of the memory limit, " +
                                                 std::to_string(max_bytes) + " bytes: building copies the tensors)");
    try {
        return build_within_budget(c);
    } catch (const ShapeError& e) {
        throw ShapeError("variant '" + c.variant + "' (seq " + std::to_string(c.seq) + ", " + sizes_text(c) +
                         "): " + e.what());
    }
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
