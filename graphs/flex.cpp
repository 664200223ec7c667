#include "graphs/flex.hpp"

#include <cmath>
#include <numbers>
#include <optional>

#include "engine/error.hpp"
#include "engine/expr.hpp"
#include "graphs/flex_mods.hpp"
#include "graphs/mha.hpp"

namespace attngraph::graphs {

const std::vector<VariantInfo>& flex_list() {
    static const std::vector<VariantInfo> list = {
        {"flex/causal", "FlexAttention causal mask_mod: q_idx >= kv_idx, from Range and Less (Q, K, V inputs)"},
        {"flex/sliding-window", "attention-gym sliding window: causal and q_idx - kv_idx <= --window W"},
        {"flex/prefix-lm", "attention-gym prefix-LM: kv_idx < --prefix-length P, or causal"},
        {"flex/document",
         "document masking: document_id[q_idx] == document_id[kv_idx] (--documents L1,L2,..; --causal)"},
        {"flex/alibi", "attention-gym ALiBi score_mod: score + 2^(-8(h+1)/H) (kv_idx - q_idx), causal"},
        {"flex/softcap", "softcapping score_mod: c tanh(score / c) (--softcap C, default 50)"},
        {"flex/relative-position",
         "relative position bias score_mod: score + bias[h, q_idx - kv_idx], a learned table"},
    };
    return list;
}

Graph build_flex(const VariantConfig& c) {
    namespace ex = expr;
    using mods::Expr;
    const std::string& v = c.variant;
    const bool known = std::ranges::any_of(flex_list(), [&](const VariantInfo& info) { return info.name == v; });
    if (!known) {
        std::string names;
        for (const auto& info : flex_list()) names += (names.empty() ? "" : ", ") + info.name;
        throw GraphError("unknown FlexAttention example '" + v + "' (known: " + names + ")");
    }
    const std::string e = v.substr(5);
    auto refuse = [&](bool given, const std::string& what) {
        if (given) throw GraphError("variant '" + v + "' takes no " + what);
    };
    refuse(c.kv_seq != 0, "kv_seq");
    refuse(c.groups != 0, "groups");
    refuse(c.past != 0, "past");
    refuse(!c.lengths.empty(), "padding lengths");
    refuse(c.window != 0 && e != "sliding-window", "window (only flex/sliding-window)");
    refuse(c.causal && e != "document", "causal flag (only flex/document)");
    refuse(c.softcap.has_value() && e != "softcap", "softcap (only flex/softcap)");
    refuse(c.prefix_length != 0 && e != "prefix-lm", "prefix length (only flex/prefix-lm)");
    refuse(!c.documents.empty() && e != "document", "documents (only flex/document)");
    if (c.seq == 0) throw GraphError("seq must be at least 1");
    if (c.d_model == 0 || c.heads == 0 || c.d_model % c.heads != 0)
        throw GraphError("d_model " + std::to_string(c.d_model) + ", heads " + std::to_string(c.heads) +
                         ": d_model must be a positive multiple of heads");
    if (e == "sliding-window" && c.window == 0) throw GraphError("variant '" + v + "' needs window >= 1");
    mods::check_softcap(c);
    if (e == "prefix-lm") mods::check_prefix(c);
    if (e == "document") mods::check_documents(c);

    const std::size_t batch = c.batch ? c.batch : 1, h = c.heads, n = c.seq, d = c.d_model / c.heads;
    const double N = static_cast<double>(n), H = static_cast<double>(h);
    std::uint64_t s = c.seed * 1000003;
    auto q = ex::input("Q", random_tensor({batch, h, n, d}, c.dtype, ++s));
    auto k = ex::input("K", random_tensor({batch, h, n, d}, c.dtype, ++s));
    auto val = ex::input("V", random_tensor({batch, h, n, d}, c.dtype, ++s));
    auto kt = ex::transpose(k).named("KT");
    auto s_raw = ex::matmul(q, kt).named("S_raw");
    Expr scores = ex::scale(s_raw, 1.0 / std::sqrt(static_cast<double>(d))).named("S");

    // score_mod(score, b, h, q_idx, kv_idx)
    std::optional<Expr> kv_idx;
    if (e == "alibi") {
        // scale = exp2(-(h + 1)·8 / H) = exp(h·(-8 ln 2 / H)) · 2^(-8 / H);  bias = (kv_idx - q_idx)·scale
        const Expr h_idx = mods::range(0, H, "h_idx");
        const Expr exponent = mods::scale(h_idx, -8.0 * std::numbers::ln2 / H, "slope_exponent");
        const Expr slopes = mods::scale(mods::exp(exponent, "slope_power"), std::exp2(-8.0 / H), "slopes");
        const Expr slopes_h = mods::reshape(slopes, {-1, 1, 1}, "slopes_h");  // (H, 1, 1)
        const Expr q_idx = mods::q_column(0, n, "q_idx");
        kv_idx = mods::kv_index(n);
        const Expr distance = mods::sub(*kv_idx, q_idx, "kv_minus_q");  // (n, n)
        scores = mods::add(scores, mods::mul(slopes_h, distance, "bias"), "S_bias");
    } else if (e == "softcap") {
        scores = mods::softcap(scores, c.softcap.value_or(50.0));
    } else if (e == "relative-position") {
        // a learned bias per head and distance q_idx - kv_idx in (-n, n): table (H, 2n - 1)
        // at column q_idx - kv_idx + n - 1
        auto table = ex::param("rel_bias", random_tensor({h, 2 * n - 1}, c.dtype, ++s, 0.5));
        const Expr q_shifted = mods::q_column(N - 1, n, "q_shifted");  // q_idx + n - 1
        kv_idx = mods::kv_index(n);
        const Expr index = mods::sub(q_shifted, *kv_idx, "rel_index");  // (n, n)
        scores = mods::add(scores, mods::gather(table, index, 1, "bias"), "S_bias");
    }

    // mask_mod(b, h, q_idx, kv_idx)
    std::optional<Expr> keep;
    if (e == "causal" || e == "alibi") {
        if (!kv_idx) kv_idx = mods::kv_index(n);
        keep = mods::causal_keep(n, *kv_idx);
    } else if (e == "sliding-window") {
        // causal and q_idx - kv_idx <= W: q_idx - W - 1 < kv_idx < q_idx + 1
        kv_idx = mods::kv_index(n);
        const Expr causal = mods::causal_keep(n, *kv_idx);
        const double w = static_cast<double>(c.window);
        const Expr q_low = mods::q_column(-w - 1, n, "q_low");  // q_idx - W - 1
        const Expr in_window = mods::greater(*kv_idx, q_low, "in_window");
        keep = mods::mul(causal, in_window, "keep");
    } else if (e == "prefix-lm") {
        keep = mods::prefix_lm_keep(n, c.prefix_length);
    } else if (e == "document") {
        auto ends = ex::input("document_ends", mods::document_ends(c.documents, c.dtype));
        keep = mods::document_keep(n, ends, c.causal);
    }
    if (keep) scores = mods::mask(scores, *keep, "S_masked");
    auto a = ex::softmax(scores).named("A");
    auto o = ex::matmul(a, val).named("O");
    std::string name = c.name;
    if (name.empty()) name = "flex-" + e;
    return ex::to_graph(o, name, {c.dtype, {}});
}

}  // namespace attngraph::graphs
