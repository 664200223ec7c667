#include "graphs/variants.hpp"

#include <cmath>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "ops/ops.hpp"

namespace attngraph::graphs {

namespace {

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
    const std::size_t n = c.seq, m = plan.cross ? (c.kv_seq ? c.kv_seq : c.seq) : c.seq;
    const std::size_t lead = c.batch ? 1 : 0;
    const int H = static_cast<int>(h), G = static_cast<int>(g), R = static_cast<int>(r), DK = static_cast<int>(dk);
    std::vector<int> lead_dims;
    if (lead) lead_dims.push_back(static_cast<int>(c.batch));
    auto with_lead = [&](std::vector<int> rest) {
        std::vector<int> s = lead_dims;
        s.insert(s.end(), rest.begin(), rest.end());
        return s;
    };
    // heads as axes: (lead, h, n, d_k), or grouped (lead, g, r, n, d_k) with K, V (lead, g, 1, m, d_k)
    const bool grouped = g != h;
    const std::vector<int> q_shape = grouped ? with_lead({-1, G, R, DK}) : with_lead({-1, H, DK});
    const std::vector<int> kv_shape = grouped ? with_lead({-1, G, 1, DK}) : with_lead({-1, H, DK});
    const std::vector<int> perm = heads_first(lead, q_shape.size());

    GraphBuilder b(c.name.empty() ? c.variant : c.name, c.dtype);
    Value x = b.input("X", w.x.cast(c.dtype));
    Value q_flat, k_flat, v_flat;
    if (!plan.cross) {
        Value wqkv = b.param("Wqkv", w.w_in), bqkv = b.param("bqkv", w.b_in);
        Value qkv = linear(x, wqkv, bqkv).as("QKV");
        const int d = static_cast<int>(c.d_model), kvd = G * DK;
        const auto parts = grouped ? split(qkv, {d, kvd, kvd}, -1, "QKV_split") : split(qkv, 3, -1, "QKV_split");
        q_flat = parts[0], k_flat = parts[1], v_flat = parts[2];
    } else {
        Value ctx = b.input("C", w.c.cast(c.dtype));
        Value wq = b.param("Wq", w.w_in), bq = b.param("bq", w.b_in);
        Value wkv = b.param("Wkv", w.w_kv), bkv = b.param("bkv", w.b_kv);
        q_flat = linear(x, wq, bq).as("Q_flat");
        Value kv = linear(ctx, wkv, bkv).as("KV");
        const auto parts = split(kv, 2, -1, "KV_split");
        k_flat = parts[0], v_flat = parts[1];
    }
    Value q = permute(reshape(q_flat, q_shape).as("Q_heads"), perm).as("Q");
    Value k = permute(reshape(k_flat, kv_shape).as("K_heads"), perm).as("K");
    Value v = permute(reshape(v_flat, kv_shape).as("V_heads"), perm).as("V");
    Value kt = transpose(k).as("KT");
    Value s = scale(matmul(q, kt).as("S_raw"), 1.0 / std::sqrt(static_cast<double>(dk))).as("S");
    if (plan.alibi) {
        Shape bias_shape = grouped ? Shape{g, r, n, m} : Shape{h, n, m};
        Tensor bias = zeros(DType::f64, bias_shape);
        double* bd = bias.as<double>().data();
        for (std::size_t hh = 0; hh < h; ++hh)
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < m; ++j)
                    bd[(hh * n + i) * m + j] =
                        -alibi_slope(hh, h) * std::abs(static_cast<double>(i) - static_cast<double>(j));
        Value alibi = b.param("alibi", bias.cast(c.dtype));
        s = add(s, alibi).as("S_bias");
    }
    if (plan.pattern == Pattern::causal) s = mask_causal(s).as("S_masked");
    if (plan.pattern == Pattern::window) s = mask_window(s, static_cast<int>(c.window), c.causal).as("S_masked");
    if (!c.lengths.empty()) s = mask_padding(s, c.lengths).as("S_padded");
    Value a = softmax(s).as("A");
    Value o = matmul(a, v).as("O");
    Value rows = permute(o, inverse(perm)).as("O_rows");
    Value concat_heads = reshape(rows, with_lead({-1, static_cast<int>(c.d_model)})).as("O_concat");
    Value wo = b.param("Wo", w.wo), bo = b.param("bo", w.bo);
    b.output(linear(concat_heads, wo, bo).as("Y"));
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
        {"alibi", "ALiBi causal attention: scores + (-m_h |i - j|), m_h = 2^(-8(h+1)/heads)"},
    };
    return list;
}

Graph build_variant(const VariantConfig& c) {
    const std::string& v = c.variant;
    const bool known = std::any_of(variant_list().begin(), variant_list().end(),
                                   [&](const VariantInfo& info) { return info.name == v; });
    if (!known) {
        std::string names;
        for (const auto& info : variant_list()) names += (names.empty() ? "" : ", ") + info.name;
        throw GraphError("unknown variant '" + v + "' (known: " + names + ")");
    }
    auto refuse = [&](bool given, const std::string& what) {
        if (given) throw GraphError("variant '" + v + "' takes no " + what);
    };
    refuse(c.kv_seq != 0 && v != "cross", "kv_seq (only cross has keys of another length)");
    refuse(c.groups != 0 && v != "gqa", "groups (only gqa)");
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
    plan.kv_heads = v == "mqa" ? 1 : v == "gqa" ? c.groups : c.heads;
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
