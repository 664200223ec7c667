// Every attention variant against an independent plain-loop reference computed here (no
// engine code): batch > 1, key padding masks, f32 and f64. Causal and sliding-window
// graphs give no weight outside their pattern (checked on A). The batched form equals the
// per-head form with the same weights.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <set>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/trace.hpp"
#include "graphs/mha.hpp"
#include "graphs/variants.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_variants)

using namespace attngraph;
namespace bdata = boost::unit_test::data;
using Vec = std::vector<double>;

namespace {

Vec values(const Tensor& t) {
    Vec v(t.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.at_flat(i);
    return v;
}
Vec tensor_values(const Graph& g, const std::string& name) {
    return values(*g.value(g.at(name)).data);
}

// Columns [c0, c0 + cols) of a row-major (rows, total) matrix.
Vec columns(const Vec& w, std::size_t rows, std::size_t total, std::size_t c0, std::size_t cols) {
    Vec out(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) out[i * cols + j] = w[i * total + c0 + j];
    return out;
}

// x (rows, k) · w (k, cols) + b (cols)
Vec affine(const Vec& x, std::size_t rows, std::size_t k, const Vec& w, const Vec& b, std::size_t cols) {
    Vec y(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
            double s = b[j];
            for (std::size_t t = 0; t < k; ++t) s += x[i * k + t] * w[t * cols + j];
            y[i * cols + j] = s;
        }
    return y;
}

// The reference: what each variant means, in loops.
struct Reference {
    Vec a;  // (B, h, n, m); diff: A_1 - lambda·A_2
    Vec y;  // (B, n, d)
};

struct Weights {
    Vec x, c;            // (B, n, d), (B, m, d)
    Vec wq, bq;          // (d, d), (d)
    Vec wk, bk, wv, bv;  // (d, g·dk), (g·dk)
    Vec wo, bo;          // (d, d), (d)
    Vec norm_scale;      // llama (d)
    Vec sinks;           // sinks (h)
    double lambda = 0;   // diff
};

bool is_causal(const std::string& v) {
    return v == "causal" || v == "alibi" || v == "llama" || v == "softcap" || v == "sinks" || v == "diff";
}

// Whether query i sees key j (before key padding).
bool keeps(const graphs::VariantConfig& c, long i, long j) {
    const std::string& v = c.variant;
    const long di = i - j, w = long(c.window);
    if (v == "sliding-window") return c.causal ? (di >= 0 && di < w) : std::abs(di) < w;
    if ((v == "softcap" || v == "sinks") && w > 0) return di >= 0 && di < w;
    if (is_causal(v)) return di >= 0;
    if (v == "prefix-lm") return j < long(c.prefix_length) || di >= 0;
    if (v == "document") {
        auto doc = [&](long p) {  // the document position p is in
            long k = 0, end = c.documents[0];
            while (p >= end) end += c.documents[std::size_t(++k)];
            return k;
        };
        return doc(i) == doc(j) && (!c.causal || di >= 0);
    }
    return true;
}

// RMSNorm of each row of x (rows, d): x / sqrt(mean(x²) + 1e-5) · scale.
Vec rms_norm(const Vec& x, std::size_t rows, std::size_t d, const Vec& scale) {
    Vec y(x.size());
    for (std::size_t i = 0; i < rows; ++i) {
        double sq = 0;
        for (std::size_t t = 0; t < d; ++t) sq += x[i * d + t] * x[i * d + t];
        const double r = 1 / std::sqrt(sq / double(d) + 1e-5);
        for (std::size_t t = 0; t < d; ++t) y[i * d + t] = x[i * d + t] * r * scale[t];
    }
    return y;
}

// RoPE in place on x (n, heads·dk), row i at position i: pairs (t, t + dk/2), angle i·10000^(-2t/dk).
void rope(Vec& x, std::size_t n, std::size_t heads, std::size_t dk) {
    const std::size_t width = heads * dk, half = dk / 2;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t hh = 0; hh < heads; ++hh)
            for (std::size_t t = 0; t < half; ++t) {
                const double angle = double(i) * std::pow(10000.0, -2.0 * double(t) / double(dk));
                double& x1 = x[i * width + hh * dk + t];
                double& x2 = x[i * width + hh * dk + t + half];
                const double a = x1, b = x2;
                x1 = std::cos(angle) * a - std::sin(angle) * b;
                x2 = std::sin(angle) * a + std::cos(angle) * b;
            }
}

Reference reference(const graphs::VariantConfig& c, std::size_t g, const Weights& w) {
    const std::string& v = c.variant;
    const std::size_t B = std::max<std::size_t>(c.batch, 1), n = c.seq, m = v == "cross" ? c.kv_seq : c.seq;
    const std::size_t d = c.d_model, h = c.heads, dk = d / h, r = h / g;
    // diff: each head's Q and K are two halves of d_k/2 (two maps); the others: one map of d_k
    const std::size_t maps = v == "diff" ? 2 : 1, part = dk / maps;
    Reference ref;
    ref.a.assign(B * h * n * m, 0.0);
    ref.y.assign(B * n * d, 0.0);
    for (std::size_t b = 0; b < B; ++b) {
        Vec xb(w.x.begin() + static_cast<long>(b * n * d), w.x.begin() + static_cast<long>((b + 1) * n * d));
        if (v == "llama") xb = rms_norm(xb, n, d, w.norm_scale);
        const Vec& src = v == "cross" ? w.c : w.x;
        Vec cb(src.begin() + static_cast<long>(b * m * d), src.begin() + static_cast<long>((b + 1) * m * d));
        if (v == "llama") cb = xb;
        Vec q = affine(xb, n, d, w.wq, w.bq, d);
        Vec k = affine(cb, m, d, w.wk, w.bk, g * dk);
        const Vec val = affine(cb, m, d, w.wv, w.bv, g * dk);
        if (v == "llama") rope(q, n, h, dk), rope(k, m, g, dk);
        Vec o(n * d, 0.0);
        for (std::size_t hh = 0; hh < h; ++hh) {
            const std::size_t kv = hh / r;
            const double slope = std::pow(2.0, -8.0 * double(hh + 1) / double(h));
            for (std::size_t i = 0; i < n; ++i) {
                Vec weight(m, 0.0);
                for (std::size_t map = 0; map < maps; ++map) {
                    Vec s(m);
                    std::vector<bool> keep(m, true);
                    for (std::size_t j = 0; j < m; ++j) {
                        double dot = 0;
                        for (std::size_t t = map * part; t < (map + 1) * part; ++t)
                            dot += q[i * d + hh * dk + t] * k[j * g * dk + kv * dk + t];
                        s[j] = dot / std::sqrt(double(part));
                        const long di = long(i) - long(j);
                        if (v == "alibi") s[j] += -slope * std::abs(double(di));
                        if (v == "softcap") {
                            const double cap = c.softcap.value_or(50.0);
                            s[j] = cap * std::tanh(s[j] / cap);
                        }
                        keep[j] = keeps(c, long(i), long(j));
                        if (!c.lengths.empty() && long(j) >= c.lengths[b]) keep[j] = false;
                    }
                    double mx = v == "sinks" ? w.sinks[hh] : -INFINITY;
                    for (std::size_t j = 0; j < m; ++j)
                        if (keep[j]) mx = std::max(mx, s[j]);
                    double sum = v == "sinks" ? std::exp(w.sinks[hh] - mx) : 0.0;
                    Vec e(m, 0.0);
                    for (std::size_t j = 0; j < m; ++j)
                        if (keep[j]) sum += (e[j] = std::exp(s[j] - mx));
                    for (std::size_t j = 0; j < m; ++j) {
                        const double a = sum > 0 ? e[j] / sum : 0.0;
                        weight[j] += map == 0 ? a : -w.lambda * a;
                    }
                }
                for (std::size_t j = 0; j < m; ++j) {
                    ref.a[((b * h + hh) * n + i) * m + j] = weight[j];
                    for (std::size_t t = 0; t < dk; ++t)
                        o[i * d + hh * dk + t] += weight[j] * val[j * g * dk + kv * dk + t];
                }
            }
        }
        const Vec y = affine(o, n, d, w.wo, w.bo, d);
        std::copy(y.begin(), y.end(), ref.y.begin() + static_cast<long>(b * n * d));
    }
    return ref;
}

std::size_t kv_heads(const graphs::VariantConfig& c) {
    return c.variant == "mqa" ? 1 : c.variant == "gqa" || (c.variant == "llama" && c.groups) ? c.groups : c.heads;
}

// The weights as the reference wants them, read from the graph's tensors (llama has no
// biases: zeros).
Weights weights_of(const Graph& gr, const graphs::VariantConfig& c) {
    const std::size_t d = c.d_model, dk = d / c.heads, gdk = kv_heads(c) * dk;
    const bool biases = c.variant != "llama";
    Weights w;
    w.x = tensor_values(gr, "X");
    w.wo = tensor_values(gr, "Wo");
    w.bo = biases ? tensor_values(gr, "bo") : Vec(d, 0.0);
    if (c.variant == "llama") w.norm_scale = tensor_values(gr, "norm_scale");
    if (c.variant == "sinks") w.sinks = tensor_values(gr, "sinks");
    if (c.variant == "diff") w.lambda = tensor_values(gr, "lambda").at(0);
    if (c.variant == "mha") {
        // per-head weights side by side
        Vec wq(d * d), wk(d * d), wv(d * d), bq(d), bk(d), bv(d);
        for (std::size_t hh = 0; hh < c.heads; ++hh) {
            const std::string p = "head" + std::to_string(hh + 1) + ".";
            auto place = [&](Vec& dst, const std::string& name, std::size_t rows) {
                const Vec src = tensor_values(gr, p + name);
                for (std::size_t i = 0; i < rows; ++i)
                    for (std::size_t t = 0; t < dk; ++t) dst[i * d + hh * dk + t] = src[i * dk + t];
            };
            place(wq, "Wq", d), place(wk, "Wk", d), place(wv, "Wv", d);
            place(bq, "bq", 1), place(bk, "bk", 1), place(bv, "bv", 1);
        }
        w.wq = wq, w.wk = wk, w.wv = wv, w.bq = bq, w.bk = bk, w.bv = bv;
    } else if (c.variant == "cross") {
        w.c = tensor_values(gr, "C");
        w.wq = tensor_values(gr, "Wq");
        w.bq = tensor_values(gr, "bq");
        const Vec wkv = tensor_values(gr, "Wkv"), bkv = tensor_values(gr, "bkv");
        w.wk = columns(wkv, d, 2 * gdk, 0, gdk), w.wv = columns(wkv, d, 2 * gdk, gdk, gdk);
        w.bk = columns(bkv, 1, 2 * gdk, 0, gdk), w.bv = columns(bkv, 1, 2 * gdk, gdk, gdk);
    } else {
        const std::size_t total = d + 2 * gdk;
        const Vec wqkv = tensor_values(gr, "Wqkv"), bqkv = biases ? tensor_values(gr, "bqkv") : Vec(total, 0.0);
        w.wq = columns(wqkv, d, total, 0, d), w.bq = columns(bqkv, 1, total, 0, d);
        w.wk = columns(wqkv, d, total, d, gdk), w.bk = columns(bqkv, 1, total, d, gdk);
        w.wv = columns(wqkv, d, total, d + gdk, gdk), w.bv = columns(bqkv, 1, total, d + gdk, gdk);
    }
    return w;
}

// The attention weights the reference's `a` is compared with.
std::string weights_node(const graphs::VariantConfig& c) {
    return c.variant == "diff" ? "A_diff" : "A";
}

using test::rel_diff;

graphs::VariantConfig config(std::string variant, std::size_t batch, std::size_t seq, std::size_t d, std::size_t h) {
    graphs::VariantConfig c;
    c.variant = std::move(variant);
    c.batch = batch;
    c.seq = seq;
    c.d_model = d;
    c.heads = h;
    c.seed = 7;
    return c;
}

// The cases: every variant, batch > 1, most with key padding, one without a batch axis.
std::vector<graphs::VariantConfig> cases() {
    std::vector<graphs::VariantConfig> out;
    auto c = config("mha", 2, 4, 8, 2);
    out.push_back(c);
    c = config("mha-batched", 2, 5, 8, 2), c.lengths = {5, 3};
    out.push_back(c);
    c = config("mha-batched", 3, 4, 8, 4), c.lengths = {4, 0, 2};  // sequence 1 fully masked
    out.push_back(c);
    c = config("causal", 3, 6, 12, 3), c.lengths = {6, 2, 4};
    out.push_back(c);
    c = config("causal", 0, 5, 8, 2);  // no batch axis
    out.push_back(c);
    c = config("cross", 2, 4, 8, 2), c.kv_seq = 7, c.lengths = {7, 3};
    out.push_back(c);
    c = config("mqa", 2, 5, 8, 4), c.lengths = {2, 5};
    out.push_back(c);
    c = config("gqa", 2, 5, 12, 6), c.groups = 2, c.lengths = {5, 1};
    out.push_back(c);
    c = config("gqa", 2, 3, 8, 4), c.groups = 4;  // g = h: plain multi-head
    out.push_back(c);
    c = config("sliding-window", 2, 7, 8, 2), c.window = 3;
    out.push_back(c);
    c = config("sliding-window", 2, 7, 8, 2), c.window = 2, c.causal = true, c.lengths = {7, 4};
    out.push_back(c);
    c = config("alibi", 2, 6, 8, 4), c.lengths = {6, 3};
    out.push_back(c);
    c = config("llama", 2, 5, 16, 4), c.groups = 2, c.lengths = {5, 3};
    out.push_back(c);
    c = config("llama", 0, 4, 8, 2);  // X (1, n, d): RoPE's 3-D input has a batch axis
    out.push_back(c);
    c = config("softcap", 2, 6, 8, 2), c.softcap = 0.5, c.lengths = {6, 4};  // a cap the scores reach
    out.push_back(c);
    c = config("softcap", 2, 7, 8, 2), c.window = 3;  // Gemma 2's cap 50, a causal window
    out.push_back(c);
    c = config("sinks", 2, 5, 8, 2), c.lengths = {5, 0};  // sequence 1: the sinks take every row
    out.push_back(c);
    c = config("sinks", 0, 6, 8, 2), c.window = 2;
    out.push_back(c);
    c = config("diff", 2, 5, 16, 2), c.lengths = {5, 2};
    out.push_back(c);
    c = config("prefix-lm", 2, 6, 8, 2), c.prefix_length = 2;
    out.push_back(c);
    c = config("prefix-lm", 0, 4, 8, 2), c.prefix_length = 4;  // all prefix: bidirectional
    out.push_back(c);
    c = config("document", 2, 10, 8, 2), c.documents = {3, 5, 2};
    out.push_back(c);
    c = config("document", 2, 7, 8, 2), c.documents = {2, 4, 1}, c.causal = true, c.lengths = {7, 5};
    out.push_back(c);
    return out;
}

std::string label(const graphs::VariantConfig& c) {
    std::string s = c.variant + " B=" + std::to_string(c.batch) + " n=" + std::to_string(c.seq);
    if (c.window) s += " window " + std::to_string(c.window);
    if (c.causal) s += " causal";
    if (!c.lengths.empty()) s += " padded";
    return s;
}

}  // namespace

BOOST_DATA_TEST_CASE(variant_matches_plain_loop_reference, bdata::make({0, 1}), f64) {
    for (auto c : cases()) {
        c.dtype = f64 ? DType::f64 : DType::f32;
        BOOST_TEST_CONTEXT(label(c) << (f64 ? " f64" : " f32")) {
            const Graph g = graphs::build_variant(c);
            RunOptions o;
            o.keep_all = true;
            o.threads = 2;
            const RunResult r = run(g, o);
            const Reference ref = reference(c, kv_heads(c), weights_of(g, c));
            const double tol = f64 ? 1e-9 : 1e-5;
            BOOST_TEST(rel_diff(values(r.at(g, "Y")), ref.y) <= tol);
            if (c.variant != "mha") BOOST_TEST(rel_diff(values(r.at(g, weights_node(c))), ref.a) <= tol);
        }
    }
}

BOOST_AUTO_TEST_CASE(backward_of_every_variant_matches_finite_differences) {
    for (auto c : cases()) {
        c.dtype = DType::f64;
        BOOST_TEST_CONTEXT(label(c)) {
            const GradcheckResult r = gradcheck(graphs::build_variant(c));
            BOOST_TEST(r.entries.size() >= (c.variant == "llama" ? 4u : 5u));  // llama: X, norm_scale, Wqkv, Wo
            BOOST_TEST(r.max_rel_error < 1e-6, r.report());
        }
    }
}

BOOST_AUTO_TEST_CASE(causal_graphs_give_no_weight_to_later_keys) {
    for (auto c : cases()) {
        const bool causal =
            is_causal(c.variant) || (c.causal && (c.variant == "sliding-window" || c.variant == "document"));
        if (!causal) continue;
        BOOST_TEST_CONTEXT(label(c)) {
            const Graph g = graphs::build_variant(c);
            const RunResult r = run(g, test::keep_all());
            const Tensor& a = r.at(g, "A");
            const Shape s = a.shape();
            const std::size_t n = s[s.size() - 2], m = s.back();
            std::size_t later = 0, checked = 0;
            for (std::size_t e = 0; e < a.size(); ++e) {
                const std::size_t j = e % m, i = (e / m) % n;
                if (j > i) {
                    ++checked;
                    later += a.at_flat(e) != 0.0;
                }
            }
            BOOST_TEST(checked > 0u);
            BOOST_TEST(later == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(sliding_window_weight_only_inside_the_window) {
    for (auto c : cases()) {
        if (c.variant != "sliding-window") continue;
        BOOST_TEST_CONTEXT(label(c) << (c.causal ? " causal" : "")) {
            const Graph g = graphs::build_variant(c);
            const RunResult r = run(g, test::keep_all());
            const Tensor& a = r.at(g, "A");
            const Shape s = a.shape();
            const std::size_t n = s[s.size() - 2], m = s.back(), per_batch = a.size() / s[0];
            std::size_t outside = 0, inside_zero = 0;
            for (std::size_t e = 0; e < a.size(); ++e) {
                const long j = long(e % m), i = long((e / m) % n), w = long(c.window);
                const bool in = c.causal ? (i - j >= 0 && i - j < w) : std::abs(i - j) < w;
                const bool padded = !c.lengths.empty() && j >= c.lengths[e / per_batch];
                if (!in) outside += a.at_flat(e) != 0.0;
                if (in && !padded) inside_zero += a.at_flat(e) == 0.0;
            }
            BOOST_TEST(outside == 0u);
            BOOST_TEST(inside_zero == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(fully_padded_sequence_is_marked_in_the_trace) {
    auto c = config("mha-batched", 3, 4, 8, 4);
    c.lengths = {4, 0, 2};
    const Graph g = graphs::build_variant(c);
    RunOptions o;
    o.trace = true;
    const Trace trace = make_trace(g, run(g, o));
    const TraceEntry* a = trace.find("A");
    BOOST_REQUIRE(a);
    BOOST_TEST(a->fully_masked_rows.size() == 4u * 4u);  // sequence 1: every head, every query
    for (const auto& row : a->fully_masked_rows) BOOST_TEST(row[0] == 1u);
    BOOST_TEST(trace_text(trace).find("fully masked -> zeros") != std::string::npos);
}

BOOST_DATA_TEST_CASE(batched_form_equals_per_head_form, bdata::make({0, 1}), f64) {
    graphs::MhaConfig m;
    m.batch = 3;
    m.seq = 5;
    m.d_model = 12;
    m.heads = 3;
    m.seed = 11;
    m.dtype = f64 ? DType::f64 : DType::f32;
    const graphs::MhaWeights w = graphs::random_mha_weights(m);
    const Graph per_head = graphs::build_mha(m, w), batched = graphs::build_batched_mha(m, w);
    RunOptions o;
    o.keep_all = true;
    const RunResult a = run(per_head, o), b = run(batched, o);
    BOOST_TEST(rel_diff(values(a.at(per_head, "Y")), values(b.at(batched, "Y"))) <= (f64 ? 1e-12 : 1e-6));
    // head 2's attention weights are A[:, 1] of the batched form
    const Vec head2 = values(a.at(per_head, "head2.A")), all = values(b.at(batched, "A"));
    Vec picked;
    for (std::size_t bb = 0; bb < 3; ++bb)
        for (std::size_t e = 0; e < 25; ++e) picked.push_back(all[(bb * 3 + 1) * 25 + e]);
    BOOST_TEST(rel_diff(picked, head2) <= (f64 ? 1e-12 : 1e-6));
}

BOOST_AUTO_TEST_CASE(batched_form_reproduces_the_seed_document) {
    const Graph g = graphs::build_batched_mha(graphs::seed_mha_config(), graphs::seed_mha_weights());
    const RunResult r = run(g, test::keep_all());
    BOOST_TEST(test::max_abs_diff(r.at(g, "Y"), test::seed_values()["Y"]) <= 2e-6);
}

BOOST_AUTO_TEST_CASE(results_are_bit_identical_for_any_thread_count) {
    for (const auto& c : cases()) {
        BOOST_TEST_CONTEXT(label(c)) {
            const Graph g = graphs::build_variant(c);
            const Tensor one = run(g, test::keep_all(1)).at(g, "Y");
            for (int threads : {2, 4, 8}) BOOST_TEST((run(g, test::keep_all(threads)).at(g, "Y") == one));
        }
    }
}

BOOST_AUTO_TEST_CASE(bad_sizes_are_clear_errors) {
    auto c = config("gqa", 2, 4, 8, 4);
    c.groups = 3;
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("mha-batched", 2, 4, 10, 4);  // d_model not a multiple of heads
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("causal", 2, 4, 8, 2), c.window = 2;
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("cross", 2, 4, 8, 2);  // no kv_seq
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("causal", 0, 4, 8, 2), c.lengths = {1};  // padding needs a batch axis
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    // the options of the new variants
    c = config("llama", 2, 4, 6, 2);  // d_k = 3: RoPE pairs features
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("diff", 2, 4, 6, 2);  // d_k = 3: no halves
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("llama", 2, 4, 8, 4), c.groups = 3;
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    for (double cap : {0.0, -1.0, double(INFINITY), double(NAN)}) {
        c = config("softcap", 2, 4, 8, 2), c.softcap = cap;
        BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    }
    c = config("causal", 2, 4, 8, 2), c.softcap = 30.0;  // only softcap takes one
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("prefix-lm", 2, 4, 8, 2);  // no prefix
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("prefix-lm", 2, 4, 8, 2), c.prefix_length = 5;
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("document", 2, 4, 8, 2);  // no documents
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("document", 2, 4, 8, 2), c.documents = {2, 3};
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("document", 2, 4, 8, 2), c.documents = {4, 0};
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("causal", 2, 4, 8, 2), c.documents = {4};
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("sinks", 2, 4, 8, 2), c.causal = true;  // sinks is causal already
    BOOST_CHECK_THROW(graphs::build_variant(c), GraphError);
    c = config("flash", 1, 4, 8, 2);
    try {
        graphs::build_variant(c);
        BOOST_FAIL("no error");
    } catch (const GraphError& e) {
        BOOST_TEST(std::string(e.what()).find("known: mha, mha-batched") != std::string::npos);
    }
}

// Issue 12 §3: a graph built for batch 2, n = 4 is fed X of another batch size and another
// sequence length. Every batched variant either gives the plain-loop reference's answer for
// the new sizes or refuses them with a ShapeError; none writes its batch into a Reshape.
BOOST_AUTO_TEST_CASE(another_batch_size_and_sequence_length) {
    struct Case {
        graphs::VariantConfig built;
        std::size_t batch, seq, kv_seq;
        bool refused;  // whether the new sizes must be refused
    };
    std::vector<Case> list;
    auto add = [&](graphs::VariantConfig c, std::size_t batch, std::size_t seq, bool refused) {
        list.push_back({c, batch, seq, c.kv_seq ? c.kv_seq + 2 : 0, refused});
    };
    for (const char* v : {"mha", "mha-batched", "causal", "mqa", "alibi"}) {
        add(config(v, 2, 4, 8, 4), 3, 4, false);
        add(config(v, 2, 4, 8, 4), 1, 3, false);
        add(config(v, 2, 4, 8, 4), 3, 6, false);
    }
    auto c = config("gqa", 2, 4, 12, 6), cross = config("cross", 2, 4, 8, 2), sw = config("sliding-window", 2, 5, 8, 2);
    c.groups = 3, cross.kv_seq = 5, sw.window = 2, sw.causal = true;
    add(c, 3, 7, false);
    add(cross, 3, 2, false);
    add(sw, 4, 9, false);
    auto padded = config("causal", 2, 4, 8, 2);
    padded.lengths = {4, 2};  // one length per sequence: another batch size has none for sequence 2
    add(padded, 3, 4, true);
    for (const char* v : {"softcap", "sinks", "diff"}) {
        add(config(v, 2, 4, 8, 2), 3, 4, false);
        add(config(v, 2, 4, 8, 2), 1, 7, false);
    }
    auto capped = config("softcap", 2, 5, 8, 2);
    capped.window = 2, capped.softcap = 0.5;
    add(capped, 3, 8, false);
    // llama's positions, prefix-lm's and document's index tensors are Ranges of the n the graph
    // was made for: another batch size runs, another n is refused
    auto llama = config("llama", 2, 4, 16, 4), prefix = config("prefix-lm", 2, 4, 8, 2),
         document = config("document", 2, 4, 8, 2);
    llama.groups = 2, prefix.prefix_length = 2, document.documents = {1, 3}, document.causal = true;
    for (const auto& built : {llama, prefix, document}) {
        add(built, 3, 4, false);
        add(built, 1, 4, false);
        add(built, 2, 6, true);
    }
    for (const auto& k : list) {
        BOOST_TEST_CONTEXT(label(k.built) << " built, fed B=" << k.batch << " n=" << k.seq) {
            const Graph g = graphs::build_variant(k.built);
            const std::size_t d = k.built.d_model;
            std::map<std::string, Tensor> inputs = {{"X", graphs::random_tensor({k.batch, k.seq, d}, DType::f32, 99)}};
            if (k.kv_seq) inputs["C"] = graphs::random_tensor({k.batch, k.kv_seq, d}, DType::f32, 98);
            if (k.refused) {
                BOOST_CHECK_THROW(g.with_tensors(inputs), ShapeError);
                continue;
            }
            const Graph fed = g.with_tensors(inputs);
            graphs::VariantConfig now = k.built;
            now.batch = k.batch, now.seq = k.seq, now.kv_seq = k.kv_seq;
            const RunResult r = run(fed, test::keep_all());
            const Reference ref = reference(now, kv_heads(now), weights_of(fed, now));
            BOOST_TEST((r.at(fed, "Y").shape() == Shape{k.batch, k.seq, d}));
            BOOST_TEST(rel_diff(values(r.at(fed, "Y")), ref.y) <= 1e-5);
        }
    }
}

// issue 12: ALiBi's bias comes from h slopes and the positions at run time; no tensor the
// graph holds has n² elements (it had an (h, n, n) table: 3.2 GB at n = 8192).
BOOST_AUTO_TEST_CASE(alibi_holds_no_n_by_n_tensor) {
    auto c = config("alibi", 1, 40, 8, 4);
    const Graph g = graphs::build_variant(c);
    for (const auto& v : g.values())
        if (v.data) BOOST_TEST(v.data->size() < 40u * 40u, v.name << " (" << shape_str(v.data->shape()) << ")");
    BOOST_TEST((g.value(g.at("alibi_slopes")).data->shape() == Shape{4}));
}

namespace {
// Rows [t, t + 1) of the sequence axis of a (B, n, d) tensor, as (B, 1, d).
Tensor token(const Tensor& x, std::size_t t) {
    const Shape s = x.shape();
    Array<double> out = Array<double>::from_shape({s[0], 1, s[2]});
    for (std::size_t b = 0; b < s[0]; ++b)
        for (std::size_t j = 0; j < s[2]; ++j) out(b, 0, j) = x.at_flat((b * s[1] + t) * s[2] + j);
    return Tensor(out).cast(x.dtype());
}
}  // namespace

// issue 12: running a sequence token by token through `decode` (one new token against the
// cache of the earlier ones, the cache carried from each step's present_key/present_value to
// the next step's past) gives the rows of a causal run of the whole sequence.
BOOST_DATA_TEST_CASE(decode_step_by_step_equals_the_causal_run, bdata::make({0, 1}), grouped) {
    auto causal = config(grouped ? "gqa" : "causal", 2, 6, 12, 6);
    if (grouped) causal.groups = 2;  // gqa is not causal: compare with a causal reference below
    auto dec = config("decode", 2, 1, 12, 6);
    if (grouped) dec.groups = 2;
    const Graph step = graphs::build_variant(dec);
    const Graph whole = graphs::build_variant(causal);
    // the reference rows: the causal variant's run, or (gqa) the plain-loop causal reference
    Vec want;
    const Tensor x = *whole.value(whole.at("X")).data;
    if (!grouped) {
        want = values(run(whole, test::keep_all()).at(whole, "Y"));
    } else {
        auto as_causal = causal;
        as_causal.variant = "causal";
        want = reference(as_causal, 2, weights_of(whole, causal)).y;
    }
    for (const char* w : {"Wqkv", "bqkv", "Wo", "bo"})  // the same seeded weights
        BOOST_TEST((*step.value(step.at(w)).data == *whole.value(whole.at(w)).data), w);
    Tensor past_key = *step.value(step.at("past_key")).data, past_value = *step.value(step.at("past_value")).data;
    BOOST_TEST((past_key.shape() == Shape{2, grouped ? 2u : 6u, 0, 2}));
    const std::size_t n = 6, d = 12;
    double worst = 0;
    for (std::size_t t = 0; t < n; ++t) {
        const Graph fed = step.with_tensors({{"X", token(x, t)}, {"past_key", past_key}, {"past_value", past_value}});
        const RunResult r = run(fed, test::keep_all());
        const Vec y = values(r.at(fed, "Y"));
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t j = 0; j < d; ++j)
                worst = std::max(worst, std::abs(y[b * d + j] - want[(b * n + t) * d + j]));
        past_key = r.at(fed, "attn.present_key"), past_value = r.at(fed, "attn.present_value");
        BOOST_TEST(past_key.shape()[2] == t + 1);
    }
    BOOST_TEST(worst <= 1e-6);
}

BOOST_AUTO_TEST_CASE(decode_backward_matches_finite_differences) {
    auto c = config("decode", 2, 2, 8, 2);
    c.past = 3;
    c.dtype = DType::f64;
    const GradcheckResult r = gradcheck(graphs::build_variant(c));
    BOOST_TEST(r.entries.size() >= 7u);  // X, past_key, past_value, Wqkv, bqkv, Wo, bo
    BOOST_TEST(r.max_rel_error < 1e-6, r.report());
}

// issue 12 §2: prefix-lm's and document's masks are made of index and comparison ops
// (FlexAttention's mask_mod), not of a Mask pattern: every Mask node reads a keep tensor.
BOOST_AUTO_TEST_CASE(index_masks_are_made_of_range_and_comparisons) {
    auto prefix = config("prefix-lm", 2, 6, 8, 2);
    prefix.prefix_length = 3;
    auto document = config("document", 2, 6, 8, 2);
    document.documents = {2, 4};
    document.causal = true;
    for (const auto& c : {prefix, document}) {
        BOOST_TEST_CONTEXT(label(c)) {
            const Graph g = graphs::build_variant(c);
            std::map<std::string, int> ops;
            for (const Node& n : g.nodes()) {
                ++ops[n.op->name];
                if (const auto* m = n.attrs_if<ops::Mask>()) {
                    BOOST_TEST(!m->pattern.has_value(), n.name);
                    BOOST_TEST(n.inputs.size() == 2u, n.name);
                }
            }
            BOOST_TEST(ops["Mask"] == 1);
            BOOST_TEST(ops["Range"] >= 2);
            BOOST_TEST(ops["Less"] >= 1);
            BOOST_TEST((ops[c.variant == "document" ? "Equal" : "Where"] == 1));
            // the keep tensor is (n, n): one for every sequence and head
            const RunResult r = run(g, test::keep_all());
            BOOST_TEST((r.at(g, "keep").shape() == Shape{6, 6}));
        }
    }
}

// sinks: the sink takes a share of every row, so the weights of a row sum to less than 1,
// and a row without keys (a padded sequence) gives all its weight to the sink.
BOOST_AUTO_TEST_CASE(sinks_take_weight_from_every_row) {
    auto c = config("sinks", 2, 5, 8, 2);
    c.lengths = {5, 0};
    const Graph g = graphs::build_variant(c);
    const RunResult r = run(g, test::keep_all());
    const Tensor& a = r.at(g, "A");
    BOOST_TEST((a.shape() == Shape{2, 2, 5, 5}));
    BOOST_TEST((r.at(g, "A_sinks").shape() == Shape{2, 2, 5, 6}));
    for (std::size_t row = 0; row < 2 * 2 * 5; ++row) {
        double sum = 0;
        for (std::size_t j = 0; j < 5; ++j) sum += a.at_flat(row * 5 + j);
        if (row < 2 * 5)
            BOOST_TEST((sum > 0.0 && sum < 1.0), "row " << row << " sums to " << sum);
        else
            BOOST_TEST(sum == 0.0, "row " << row);
    }
}

// llama: no biases, the RMSNorm before the projections, RoPE with the cos/sin tables computed
// in the graph from Range (so the graph holds no table of n rows).
BOOST_AUTO_TEST_CASE(llama_has_rmsnorm_rope_and_no_biases) {
    auto c = config("llama", 2, 6, 16, 4);
    c.groups = 2;
    const Graph g = graphs::build_variant(c);
    for (const char* absent : {"bqkv", "bo"}) BOOST_TEST(g.find(absent) < 0, absent);
    std::map<std::string, int> ops;
    for (const Node& n : g.nodes()) ++ops[n.op->name];
    BOOST_TEST(ops["RMSNormalization"] == 1);
    BOOST_TEST(ops["RotaryEmbedding"] == 2);
    BOOST_TEST((g.value(g.at("cos_cache")).shape == Shape{6, 2}));
    BOOST_TEST((g.value(g.at("Q")).shape == Shape{2, 2, 2, 6, 4}));  // (B, g, r, n, d_k)
    std::set<std::string> tensors;
    for (const auto& v : g.values())
        if (v.data) tensors.insert(v.name);
    BOOST_TEST((tensors == std::set<std::string>{"X", "norm_scale", "Wqkv", "Wo"}));
}

BOOST_AUTO_TEST_SUITE_END()  // test_variants
