// The fused attention step with a score chain (engine/fused_attention.hpp): masks (causal with
// offsets, window, padding, mask tensors), ALiBi, additive biases, softcapping, GQA layouts and
// cross-attention, with masked key blocks skipped. Each graph is checked against a plain-loop
// attention in double written here and against the plain run (one step per node); the fused
// run against itself traced (bitwise), at 1, 2, 4 and 8 threads (bytewise), and its weights
// where the masks remove keys (exactly 0). Also the span softmax kernel against the whole-row
// kernel, bit for bit, and the Differential Transformer's two maps (A_1 - lambda·A_2) against a
// plain loop of their own, with the graphs the kernel cannot take left to their nodes.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/optimize.hpp"
#include "engine/softmax_kernel.hpp"
#include "engine/stream_store.hpp"
#include "graphs/mha.hpp"
#include "graphs/variants.hpp"
#include "ops/attention.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_fused_attention)

using namespace attngraph;
using test::values_of;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

std::size_t count_steps(const Plan& p, StepKind kind) {
    std::size_t n = 0;
    for (const Step& s : p.steps) n += s.kind == kind;
    return n;
}

std::vector<bool> kept(const Graph& g, const std::vector<std::string>& names = {}) {
    std::vector<bool> keep(g.values().size(), false);
    for (int id : g.outputs()) keep[static_cast<std::size_t>(id)] = true;
    for (const auto& name : names) keep[static_cast<std::size_t>(g.at(name))] = true;
    return keep;
}

// ---- a plain-loop attention in double ---------------------------------------------------

// Q (B, H, n, d), K and V (B, G, m, d) with query head h reading K/V head h / (H / G). The
// score of (b, h, i, j) from raw = q·k is score(b, h, i, j, raw) (-inf: masked).
struct Reference {
    std::size_t B, H, G, n, m, d;
    std::function<double(std::size_t, std::size_t, std::size_t, std::size_t, double)> score;
    std::vector<double> sinks;  // gpt-oss: head h's sink logit joins each row's softmax (its weight dropped)
};

struct ReferenceResult {
    std::vector<double> a, o;  // (B, H, n, m), (B, H, n, d)
};

ReferenceResult reference(const Reference& r, const Tensor& q, const Tensor& k, const Tensor& v) {
    ReferenceResult out;
    out.a.assign(r.B * r.H * r.n * r.m, 0.0);
    out.o.assign(r.B * r.H * r.n * r.d, 0.0);
    const std::vector<double> qv = values_of(q), kv = values_of(k), vv = values_of(v);
    const double *qd = qv.data(), *kd = kv.data(), *vd = vv.data();
    std::vector<double> row(r.m);
    double* s = row.data();
    const std::size_t per_group = r.H / r.G;
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h) {
            const std::size_t g = h / per_group;
            const double *K = kd + (b * r.G + g) * r.m * r.d, *V = vd + (b * r.G + g) * r.m * r.d;
            for (std::size_t i = 0; i < r.n; ++i) {
                const double* Q = qd + ((b * r.H + h) * r.n + i) * r.d;
                double mx = -inf;
                for (std::size_t j = 0; j < r.m; ++j) {
                    double raw = 0;
                    for (std::size_t e = 0; e < r.d; ++e) raw += Q[e] * K[j * r.d + e];
                    s[j] = r.score(b, h, i, j, raw);
                    mx = std::max(mx, s[j]);
                }
                const double sink = r.sinks.empty() ? -inf : r.sinks[h];
                mx = std::max(mx, sink);
                double* a = out.a.data() + ((b * r.H + h) * r.n + i) * r.m;
                if (mx == -inf) continue;  // a fully masked row: zeros
                double sum = sink == -inf ? 0 : std::exp(sink - mx);
                for (std::size_t j = 0; j < r.m; ++j) sum += s[j] == -inf ? 0 : std::exp(s[j] - mx);
                for (std::size_t j = 0; j < r.m; ++j) a[j] = s[j] == -inf ? 0 : std::exp(s[j] - mx) / sum;
                for (std::size_t e = 0; e < r.d; ++e) {
                    double acc = 0;
                    for (std::size_t j = 0; j < r.m; ++j) acc += a[j] * V[j * r.d + e];
                    out.o[((b * r.H + h) * r.n + i) * r.d + e] = acc;
                }
            }
        }
    return out;
}

double max_diff(const Tensor& t, const std::vector<double>& ref) {
    if (t.size() != ref.size()) return inf;
    const std::vector<double> got = values_of(t);
    double m = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::abs(got[i] - ref[i]));
    return m;
}

// ---- one case: a graph Q, K, V -> O through a chain ---------------------------------------

struct Case {
    explicit Case(std::string case_name) : name(std::move(case_name)) {}
    std::string name;
    std::size_t B = 2, H = 2, G = 2, n = 300, m = 300, d = 16;
    std::function<Value(Value s_raw, GraphBuilder& b)> chain;  // S_raw -> the softmax's input
    std::function<double(std::size_t, std::size_t, std::size_t, std::size_t, double)> score;
    bool grouped_5d = false;  // Q (B, G, r, n, d), K (B, G, 1, m, d) as the batched gqa variant
    std::vector<double> sinks;  // per head: gpt-oss's sink column, built as graphs/variants.cpp builds it
};

struct Built {
    Graph graph;
    Tensor q, k, v;  // as (B, H, n, d) and (B, G, m, d)
};

Built build(const Case& c) {
    GraphBuilder b(c.name);
    const Tensor q = graphs::random_tensor({c.B, c.H, c.n, c.d}, DType::f32, 11);
    const Tensor k = graphs::random_tensor({c.B, c.G, c.m, c.d}, DType::f32, 12);
    const Tensor v = graphs::random_tensor({c.B, c.G, c.m, c.d}, DType::f32, 13);
    Value qv = b.input("Q", q), kv = b.input("K", k), vv = b.input("V", v);
    if (c.grouped_5d) {
        const int G = static_cast<int>(c.G);
        qv = reshape(qv, {G, -1}, 1, 2).named("Q_groups");
        kv = reshape(kv, {G, 1}, 1, 2).named("K_groups");
        vv = reshape(vv, {G, 1}, 1, 2).named("V_groups");
    }
    Value s_raw = matmul(qv, transpose(kv).named("KT")).named("S_raw");
    Value a;
    if (c.sinks.empty()) {
        a = softmax(c.chain(s_raw, b)).named("A");
    } else {
        Tensor logits = zeros(DType::f32, {c.H, 1, 1});
        for (std::size_t h = 0; h < c.H; ++h) logits.as<float>().data()[h] = static_cast<float>(c.sinks[h]);
        const Value s = c.chain(s_raw, b);
        const Value zero = scale(slice(s_raw, -1, 0, 1).named("S_first"), 0.0).named("S_zero");
        const Value sink = add(zero, b.param("sinks", logits)).named("S_sink");
        const Value a_sinks = softmax(concat({s, sink}, -1).named("S_sinks")).named("A_sinks");
        a = slice(a_sinks, -1, 0, -1).named("A");
    }
    b.output(matmul(a, vv).named("O"));
    return {b.build(), q, k, v};
}

// Every traced value of `g` but O as the plain run has it: -inf and 0 at the same places,
// the rest within 1e-5 of it, relative above 1 (ALiBi's scores reach a few hundred, where one
// rounding of S + bias apart is 1.5e-5).
void check_traced_as_plain(const Graph& g, const RunResult& rp, const RunResult& rt) {
    for (const ValueInfo& v : g.values()) {
        if (v.producer < 0 || v.name == "O") continue;
        BOOST_TEST_CONTEXT(v.name) {
            const Tensor &tp = rp.at(g, v.name), &tt = rt.at(g, v.name);
            BOOST_REQUIRE(tp.shape() == tt.shape());
            const std::vector<double> xs = values_of(tp), ys = values_of(tt);
            std::size_t mismatched = 0;
            double diff = 0;
            for (std::size_t i = 0; i < xs.size(); ++i) {
                const double x = xs[i], y = ys[i];
                if (std::isinf(x) || std::isinf(y) || x == 0 || y == 0)
                    mismatched += !(x == y);
                else
                    diff = std::max(diff, std::abs(x - y) / std::max(1.0, std::abs(x)));
            }
            BOOST_TEST(mismatched == 0u);
            BOOST_TEST(diff < 1e-5);
        }
    }
}

// O of `fused` (one thread) bytewise the same at 2, 4 and 8 threads (4 under ThreadSanitizer:
// test::compared_thread_counts), untraced and with
// `value` traced (and `value` the same as at one thread).
void check_thread_counts(const Graph& g, const RunOptions& fused, const Tensor& o, const std::string& value) {
    for (const std::vector<std::string>& only : {std::vector<std::string>{}, std::vector<std::string>{value}}) {
        RunOptions t = fused;
        t.trace = !only.empty();
        t.trace_only = only;
        const RunResult one = run(g, t);
        BOOST_TEST((one.at(g, "O") == o));
        for (int threads : test::compared_thread_counts({2, 4, 8})) {
            t.threads = threads;
            const RunResult r = run(g, t);
            BOOST_TEST_CONTEXT("threads " << threads << ", traced " << only.size()) {
                BOOST_TEST((r.at(g, "O") == o));
                if (!only.empty()) BOOST_TEST((r.at(g, value) == one.at(g, value)));
            }
        }
    }
}

// The softmax input's name, e.g. the last node of the chain, for the plan check.
void check_case(const Case& c) {
    const Built built = build(c);
    const Graph& g = built.graph;
    const Plan plan = make_plan(g, kept(g));
    BOOST_TEST(count_steps(plan, StepKind::attention) == 1u);
    BOOST_TEST(count_steps(plan, StepKind::node) == 0u + (c.grouped_5d ? 3u : 0u));  // only the inputs' Reshapes
    // every value kept (a traced run): still one fused step, which writes them
    BOOST_TEST(count_steps(make_plan(g, std::vector<bool>(g.values().size(), true)), StepKind::attention) == 1u);

    RunOptions plain;
    plain.optimize = false;
    plain.trace = true;
    RunOptions fused;
    fused.threads = 1;
    RunOptions traced = fused;
    traced.trace = true;
    const RunResult rp = run(g, plain), rf = run(g, fused), rt = run(g, traced);
    const Tensor& o = rf.at(g, "O");

    const Reference ref{c.B, c.H, c.G, c.n, c.m, c.d, c.score, c.sinks};
    const ReferenceResult want = reference(ref, built.q, built.k, built.v);
    BOOST_TEST(max_diff(o, want.o) < 2e-5);
    BOOST_TEST(max_diff(rt.at(g, "A"), want.a) < 2e-6);
    BOOST_TEST(test::max_abs_diff(o, rp.at(g, "O")) < 1e-6);
    BOOST_TEST((rt.at(g, "O") == o));  // tracing changes no bit
    // every traced value of the chain: the plain run's, -inf and 0 at the same places
    check_traced_as_plain(g, rp, rt);
    // a masked key has weight exactly 0, a row with no key left gives O = 0
    const std::vector<double> a = values_of(rt.at(g, "A"));
    std::size_t wrong_zeros = 0, empty_rows = 0, nonzero_empty = 0;
    for (std::size_t row = 0; row < c.B * c.H * c.n; ++row) {
        bool any = false;
        for (std::size_t j = 0; j < c.m; ++j) {
            const bool masked = want.a[row * c.m + j] == 0 &&
                                c.score(row / (c.H * c.n), row / c.n % c.H, row % c.n, j, 0.0) == -inf;
            if (masked) wrong_zeros += a[row * c.m + j] != 0.0;
            any = any || !masked;
        }
        if (any) continue;
        ++empty_rows;
        for (std::size_t e = 0; e < c.d; ++e) nonzero_empty += o.at_flat(row * c.d + e) != 0.0;
    }
    BOOST_TEST(wrong_zeros == 0u);
    BOOST_TEST(nonzero_empty == 0u);
    if (!c.sinks.empty()) {  // the weight a row's keys do not take is the sink's
        const Tensor& a_sinks = rt.at(g, "A_sinks");
        double worst = 0;
        for (std::size_t row = 0; row < c.B * c.H * c.n; ++row) {
            double keys = 0;
            for (std::size_t j = 0; j < c.m; ++j) keys += want.a[row * c.m + j];
            worst = std::max(worst, std::abs(a_sinks.at_flat(row * (c.m + 1) + c.m) - (1 - keys)));
        }
        BOOST_TEST(worst < 2e-6);
    }
    BOOST_TEST_MESSAGE(c.name << ": " << empty_rows << " fully masked rows");

    // bytewise the same for any thread count, untraced and with A traced
    check_thread_counts(g, fused, o, "A");
    // only S_raw traced: every key's score computed, the other values as untraced
    RunOptions sraw = fused;
    sraw.trace = true;
    sraw.trace_only = {"S_raw"};
    BOOST_TEST((run(g, sraw).at(g, "O") == o));
}

constexpr double factor = 0.25;

double causal_bias(std::size_t i, std::size_t j, long offset) {
    return static_cast<long>(j) <= static_cast<long>(i) + offset ? 0.0 : -inf;
}

// key j of query row i of sequence b is kept
using KeptKey = std::function<bool(std::size_t b, std::size_t i, std::size_t j)>;

// A boolean mask tensor of `shape` (2 sequences, 1s of broadcast, n × m) holding kept_key.
Tensor mask_of(const Shape& shape, const KeptKey& kept_key) {
    Tensor keep = zeros(DType::f32, shape);
    const std::size_t n = shape.end()[-2], m = shape.back();
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j) keep.as<float>().data()[(b * n + i) * m + j] = kept_key(b, i, j);
    return keep;
}

// The scaled scores masked by `keep` (a mask_of kept_key).
Case mask_tensor_case(std::string name, const Tensor& keep, const KeptKey& kept_key) {
    Case c{std::move(name)};
    c.chain = [keep](Value s, GraphBuilder& b) {
        return mask_tensor(scale(s, factor).named("S"), b.input("M", keep), false).named("S_masked");
    };
    c.score = [kept_key](std::size_t b, std::size_t, std::size_t i, std::size_t j, double raw) {
        return kept_key(b, i, j) ? factor * raw : -inf;
    };
    return c;
}

// The attention step of the plan of `built` (its mask tensor `keep`) and the step's kernel.
struct StepKernel {
    StepKernel(const Built& built, const Tensor& keep)
        : plan(make_plan(built.graph, kept(built.graph))),
          in{&built.q.as<float>(), &built.k.as<float>(), &built.v.as<float>(), &keep.as<float>()} {
        for (const Step& st : plan.steps)
            if (st.kind == StepKind::attention) step = &st;
        BOOST_REQUIRE(step);
        kernel.emplace(*step->attention, in);
    }
    Plan plan;
    const Step* step = nullptr;
    std::vector<const Array<float>*> in;
    std::optional<AttentionKernel<float>> kernel;
};

}  // namespace

// ---- the span softmax kernel ---------------------------------------------------------------

template <class T>
void check_spans() {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    for (std::size_t len : {1u, 3u, 5u, 7u, 8u, 16u, 17u, 33u, 100u, 300u}) {
        std::vector<T> x(len);
        for (std::size_t j = 0; j < len; ++j) x[j] = static_cast<T>(std::sin(0.9 * static_cast<double>(j)) * 7.0);
        for (std::size_t first = 0; first <= len; first += 1 + len / 9)
            for (std::size_t end = first; end <= len; end += 1 + len / 7)
                for (T scale : {T(1), T(0.37), T(-0.5)})
                    for (bool scaled : {false, true}) {
                        // the whole row: scale·x on the span, -inf elsewhere
                        std::vector<T> row(len, neg_inf), want(len);
                        for (std::size_t j = first; j < end; ++j) row[j] = scaled ? scale * x[j] : x[j];
                        softmax_rows<T>(row.data(), want.data(), 1, len, T(1), false);
                        std::vector<T> got(len, T(42));
                        const std::size_t lo = first, hi = end;
                        softmax_spans<T>(x.data(), len, got.data(), len, 0, 1, &lo, &hi, len, scale, scaled);
                        BOOST_TEST_CONTEXT("len " << len << " span [" << first << ", " << end << ") scale "
                                                  << scale << " scaled " << scaled) {
                            BOOST_TEST(std::memcmp(got.data() + first, want.data() + first,
                                                   (end - first) * sizeof(T)) == 0);
                            for (std::size_t j = 0; j < len; ++j)
                                if (j < first || j >= end) BOOST_TEST(want[j] == T(0));
                        }
                    }
    }
}

BOOST_AUTO_TEST_CASE(span_softmax_gives_the_whole_row_bits) {
    check_spans<float>();
    check_spans<double>();
}

// A sink logit as one more column after the keys (len - 1): its lane in the body's last batch
// or in the tail, spans reaching its batch or not, empty spans (the sink takes all the weight).
template <class T>
void check_spans_with_a_last_column() {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    for (std::size_t len : {2u, 8u, 9u, 16u, 17u, 24u, 33u, 101u}) {
        const std::size_t keys = len - 1;
        std::vector<T> x(keys);
        for (std::size_t j = 0; j < keys; ++j) x[j] = static_cast<T>(std::sin(0.7 * static_cast<double>(j)) * 6.0);
        for (std::size_t first = 0; first <= keys; first += 1 + keys / 6)
            for (std::size_t end = first; end <= keys; end += 1 + keys / 5)
                for (T sink : {T(-3.5), T(0.25), T(9)})
                    for (bool scaled : {false, true}) {
                        const T scale = T(0.37);
                        std::vector<T> row(len, neg_inf), want(len);
                        for (std::size_t j = first; j < end; ++j) row[j] = scaled ? scale * x[j] : x[j];
                        row[keys] = sink;
                        softmax_rows<T>(row.data(), want.data(), 1, len, T(1), false);
                        std::vector<T> got(keys, T(42));
                        T last = sink;
                        const std::size_t lo = first, hi = end;
                        softmax_spans<T>(x.data(), keys, got.data(), keys, 0, 1, &lo, &hi, len, scale, scaled, &last);
                        BOOST_TEST_CONTEXT("len " << len << " span [" << first << ", " << end << ") sink " << sink
                                                  << " scaled " << scaled) {
                            BOOST_TEST(std::memcmp(got.data() + first, want.data() + first,
                                                   (end - first) * sizeof(T)) == 0);
                            BOOST_TEST(std::memcmp(&last, &want[keys], sizeof(T)) == 0);
                        }
                    }
    }
}

BOOST_AUTO_TEST_CASE(span_softmax_with_a_sink_column_gives_the_whole_row_bits) {
    check_spans_with_a_last_column<float>();
    check_spans_with_a_last_column<double>();
}

// Rows with different spans in one call, x not at column 0, in place.
BOOST_AUTO_TEST_CASE(span_softmax_rows_with_an_origin) {
    const std::size_t len = 70, col0 = 5, ld = 60, rows = 3;
    std::vector<float> x(rows * ld);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)) * 4);
    const std::size_t lo[] = {5, 20, 40}, hi[] = {65, 21, 40};
    std::vector<float> y = x;
    softmax_spans<float>(y.data(), ld, y.data(), ld, col0, rows, lo, hi, len, 0.5f, true);
    for (std::size_t r = 0; r < rows; ++r) {
        std::vector<float> row(len, -std::numeric_limits<float>::infinity()), want(len);
        for (std::size_t j = lo[r]; j < hi[r]; ++j) row[j] = 0.5f * x[r * ld + j - col0];
        softmax_rows<float>(row.data(), want.data(), 1, len, 1.0f, false);
        for (std::size_t j = lo[r]; j < hi[r]; ++j) BOOST_TEST(y[r * ld + j - col0] == want[j]);
    }
    BOOST_TEST(y[1 * ld + 20 - col0] == 1.0f);  // one key: all the weight
}

// ---- masks, biases, softcapping and layouts ----------------------------------------------

BOOST_AUTO_TEST_CASE(causal) {
    Case c{"causal"};
    c.chain = [](Value s, GraphBuilder&) { return mask_causal(scale(s, factor).named("S"), 0).named("S_masked"); };
    c.score = [](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
        return causal_bias(i, j, 0) == 0 ? factor * raw : -inf;
    };
    check_case(c);
}

BOOST_AUTO_TEST_CASE(causal_with_offsets) {
    for (int offset : {50, -5, causal_from_end}) {
        BOOST_TEST_CONTEXT("offset " << offset) {
            Case c{"causal_offset"};
            c.m = 350;
            c.chain = [offset](Value s, GraphBuilder&) {
                return mask_causal(scale(s, factor).named("S"), offset).named("S_masked");
            };
            const long off = offset == causal_from_end ? 50 : offset;
            c.score = [off](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
                return causal_bias(i, j, off) == 0 ? factor * raw : -inf;
            };
            check_case(c);
        }
    }
}

BOOST_AUTO_TEST_CASE(sliding_window) {
    for (bool causal_window : {false, true}) {
        BOOST_TEST_CONTEXT("causal " << causal_window) {
            Case c{"window"};
            c.chain = [causal_window](Value s, GraphBuilder&) {
                return mask_window(scale(s, factor).named("S"), 37, causal_window).named("S_masked");
            };
            c.score = [causal_window](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
                const long p = static_cast<long>(i) - static_cast<long>(j);
                const bool keep = causal_window ? p >= 0 && p < 37 : std::abs(p) < 37;
                return keep ? factor * raw : -inf;
            };
            check_case(c);
        }
    }
}

// Key padding, a length 0 (fully masked rows) among them; after a causal mask, and in
// cross-attention (m != n).
BOOST_AUTO_TEST_CASE(padding_causal_and_cross) {
    for (std::size_t m : {300u, 200u}) {
        BOOST_TEST_CONTEXT("m " << m) {
            Case c{"padding"};
            c.B = 3;
            c.m = m;
            const std::vector<int> lengths{static_cast<int>(m), 0, 130};
            const bool with_causal = m == c.n;
            c.chain = [lengths, with_causal](Value s, GraphBuilder&) {
                Value x = scale(s, factor).named("S");
                if (with_causal) x = mask_causal(x, 0).named("S_masked");
                return mask_padding(x, lengths).named("S_padded");
            };
            c.score = [lengths, with_causal](std::size_t b, std::size_t, std::size_t i, std::size_t j, double raw) {
                if (with_causal && causal_bias(i, j, 0) != 0) return -inf;
                return static_cast<int>(j) < lengths[b] ? factor * raw : -inf;
            };
            check_case(c);
        }
    }
}

BOOST_AUTO_TEST_CASE(alibi_then_causal) {
    Case c{"alibi"};
    c.H = c.G = 3;
    const std::vector<double> slopes{0.5, 0.125, 0.03125};
    c.chain = [slopes](Value s, GraphBuilder& b) {
        Tensor t = zeros(DType::f32, {3});
        for (std::size_t h = 0; h < 3; ++h) t.as<float>()(h) = static_cast<float>(slopes[h]);
        Value x = alibi(scale(s, factor).named("S"), b.param("slopes", t)).named("S_bias");
        return mask_causal(x, 0).named("S_masked");
    };
    c.score = [slopes](std::size_t, std::size_t h, std::size_t i, std::size_t j, double raw) {
        const double dist = std::abs(static_cast<double>(i) - static_cast<double>(j));
        return causal_bias(i, j, 0) == 0 ? factor * raw - slopes[h] * dist : -inf;
    };
    check_case(c);
}

// Mask tensors: additive (some -inf) with a causal pattern, boolean broadcast over the batch,
// and an Add of a bias tensor.
BOOST_AUTO_TEST_CASE(mask_tensors_and_additive_bias) {
    const std::size_t n = 300, m = 300;
    Tensor additive = graphs::random_tensor({2, 1, n, m}, DType::f32, 21);
    Tensor keep = zeros(DType::f32, {1, 1, n, m});
    for (std::size_t i = 0; i < n * m; ++i) {
        if (i % 7 == 3) additive.as<float>().data()[i] = -std::numeric_limits<float>::infinity();
        keep.as<float>().data()[i] = (i * 2654435761u) % 5 == 0 ? 0.0f : 1.0f;
    }
    for (std::size_t j = 0; j < m; ++j) keep.as<float>().data()[17 * m + j] = 0.0f;  // row 17: no key
    const Tensor bias = graphs::random_tensor({2, n, m}, DType::f32, 22);
    auto at = [](const Tensor& t, std::size_t i) { return t.at_flat(i); };

    Case add{"additive_mask"};
    add.chain = [additive](Value s, GraphBuilder& b) {
        return mask_tensor(scale(s, factor).named("S"), b.input("M", additive), true, true).named("S_masked");
    };
    add.score = [&](std::size_t bb, std::size_t, std::size_t i, std::size_t j, double raw) {
        return causal_bias(i, j, 0) == 0 ? factor * raw + at(additive, (bb * n + i) * m + j) : -inf;
    };
    BOOST_TEST_CONTEXT("additive") { check_case(add); }

    Case boolean{"boolean_mask"};
    boolean.chain = [keep](Value s, GraphBuilder& b) {
        return mask_tensor(scale(s, factor).named("S"), b.input("M", keep), false).named("S_masked");
    };
    boolean.score = [&](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
        return at(keep, i * m + j) != 0 ? factor * raw : -inf;
    };
    BOOST_TEST_CONTEXT("boolean") { check_case(boolean); }

    Case biased{"bias"};
    biased.chain = [bias](Value s, GraphBuilder& b) {
        return mask_causal(attngraph::add(b.input("bias", bias), scale(s, factor).named("S")).named("S_bias"), 0)
            .named("S_masked");
    };
    biased.score = [&](std::size_t, std::size_t h, std::size_t i, std::size_t j, double raw) {
        return causal_bias(i, j, 0) == 0 ? factor * raw + at(bias, (h * n + i) * m + j) : -inf;
    };
    BOOST_TEST_CONTEXT("bias") { check_case(biased); }
}

// Boolean mask tensors as FlexAttention's mask_mod builds them (graphs/variants.cpp's flex/...):
// per sequence, a causal mask with holes and a causal document mask. Each row's span runs
// from its first to its last kept key, so the fused step computes the keys of its rows' spans
// only, as for a pattern; with a Tanh after the mask it applies the tensor over all keys.
BOOST_AUTO_TEST_CASE(boolean_mask_tensors_bound_the_keys_computed) {
    const std::size_t n = 300, m = 300;
    auto kept_key = [](std::size_t bb, std::size_t i, std::size_t j) {
        if (j > i) return false;
        if (bb == 0) return (i * 31 + j) % 11 != 0;  // causal with holes
        return (i < 150) == (j < 150);               // documents [0, 150) and [150, 300)
    };
    const Tensor keep = mask_of({2, 1, n, m}, kept_key);
    const Case c = mask_tensor_case("boolean_spans", keep, kept_key);
    check_case(c);

    // the keys each block computes: its rows' spans (blocks of 128 rows, engine/gemm.hpp)
    const Built built = build(c);
    const StepKernel step(built, keep);
    BOOST_TEST(step.step->attention->stages.back().tensor_span);
    const AttentionKernel<float>& kernel = *step.kernel;
    BOOST_REQUIRE(kernel.blocks() == 3u);
    // matrix b = sequence·H + head (H = 2); each row's span from its first to its last kept key
    std::size_t skipped = 0;  // keys of the blocks' n × m the spans leave out
    for (std::size_t b = 0; b < 4; ++b)
        for (std::size_t i = 0; i < kernel.blocks(); ++i) {
            const auto blk = kernel.block(b, i);
            std::size_t lo = m, hi = 0;
            for (std::size_t r = 0; r < blk.rows; ++r) {
                std::size_t first = m, last = 0;
                for (std::size_t j = 0; j < m; ++j)
                    if (kept_key(b / 2, blk.r0 + r, j)) first = std::min(first, j), last = j + 1;
                if (first == m) first = last = 0;  // no key: an empty span
                BOOST_TEST_CONTEXT("matrix " << b << " row " << blk.r0 + r) {
                    BOOST_TEST(blk.row_lo[r] == first);
                    BOOST_TEST(blk.row_hi[r] == last);
                }
                if (first < last) lo = std::min(lo, first), hi = std::max(hi, last);
            }
            BOOST_TEST_CONTEXT("matrix " << b << " block " << i) {
                BOOST_TEST(blk.lo == lo);
                BOOST_TEST(blk.hi == hi);
                BOOST_TEST(blk.hi <= blk.r0 + blk.rows);  // causal: no key after the block's last row
            }
            skipped += blk.rows * (m - (blk.hi - blk.lo));
        }
    BOOST_TEST(kernel.block(2, 2).lo == 150u);  // sequence 1's last rows: their document's keys only
    BOOST_TEST(skipped > n * m);
    BOOST_TEST(kernel.block(0, 0).row_hi[0] == 0u);  // sequence 0's row 0 keeps no key

    // a Tanh after the mask maps -inf to -1: the tensor is applied over every key
    Case late{"boolean_then_tanh"};
    late.chain = [keep](Value s, GraphBuilder& b) {
        const Value masked = mask_tensor(scale(s, factor).named("S"), b.input("M", keep), false).named("S_masked");
        return b.node<ops::Tanh>({masked}, {}, "S_tanh");
    };
    late.score = [&](std::size_t bb, std::size_t, std::size_t i, std::size_t j, double raw) {
        return std::tanh(kept_key(bb, i, j) ? factor * raw : -inf);
    };
    const Built late_built = build(late);
    const Plan late_plan = make_plan(late_built.graph, kept(late_built.graph));
    for (const Step& st : late_plan.steps)
        if (st.kind == StepKind::attention)
            for (const ScoreStage& stage : st.attention->stages) BOOST_TEST(!stage.tensor_span);
    check_case(late);
}

// A step whose K matrices are each read by one block of query rows (decoding, a short
// prompt) packs K a panel at a time as it reads the keys (AttentionKernel::scores): here the
// keys every row takes start past key 0 and end inside a panel (mask tensors, the spans
// [37, 290) and [70, 261) with holes), for 1 and 100 query rows; with two heads per K (GQA)
// K is packed whole first, as at 300 rows.
BOOST_AUTO_TEST_CASE(one_block_per_k_packs_its_panels_as_it_reads_them) {
    const std::size_t m = 300;
    for (const auto& [n, groups] : {std::pair<std::size_t, std::size_t>{1, 2}, {100, 2}, {100, 1}, {300, 2}}) {
        BOOST_TEST_CONTEXT("n " << n << ", K/V heads " << groups) {
            auto kept_key = [](std::size_t bb, std::size_t i, std::size_t j) {  // (the spans' ends kept)
                const std::size_t lo = bb == 0 ? 37 : 70, hi = bb == 0 ? 290 : 261;
                return j >= lo && j < hi && (i * 7 + j) % 13 != 12;
            };
            // (B, 1, n, m); (B, 1, 1, n, m) for the grouped layout's Q (B, G, r, n, d)
            const Tensor keep = mask_of(groups != 2 ? Shape{2, 1, 1, n, m} : Shape{2, 1, n, m}, kept_key);
            Case c = mask_tensor_case("one_block_per_k", keep, kept_key);
            c.n = n;
            c.m = m;
            c.G = groups;
            c.grouped_5d = groups != c.H;
            check_case(c);

            const Built built = build(c);
            const StepKernel step(built, keep);
            const AttentionKernel<float>& kernel = *step.kernel;
            // packed whole only where a K matrix has more than one block of readers (and on
            // the kernels at all: a CPU without AVX2 + FMA runs gemm)
            const bool kernels = attention_gemm::kernels() != nullptr;
            BOOST_TEST(kernel.k_packed() == (kernels && (n > 128 || groups != c.H)));
            // (matrix b = sequence·H + head)
            BOOST_TEST(kernel.block(0, 0).lo == 37u);
            BOOST_TEST(kernel.block(2, 0).lo == 70u);
            BOOST_TEST(kernel.block(2, 0).hi == 261u);
        }
    }
}

// T5's relative position bias, bias[h, i, j] = table[h, i - j + m - 1] by a Gather along the
// table's last axis (flex/relative-position): the step reads the table through the indices
// instead of the (h, n, m) bias, with the Gather's own errors for a bad index. The same
// positions written as negative indices (counted from the table's end) give the same bias.
BOOST_AUTO_TEST_CASE(gathered_bias) {
    const std::size_t n = 300, m = 300, H = 2, len = n + m - 1;
    const Tensor table = graphs::random_tensor({H, len}, DType::f32, 31);
    Tensor index = zeros(DType::f32, {n, m}), negative = zeros(DType::f32, {n, m});
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
            index.as<float>().data()[i * m + j] = static_cast<float>(i + m - 1 - j);
            negative.as<float>().data()[i * m + j] = static_cast<float>(i + m - 1 - j) - static_cast<float>(len);
        }
    auto bias = [&](std::size_t h, std::size_t i, std::size_t j) { return table.at_flat(h * len + i + m - 1 - j); };
    auto chain = [&](bool causal, const Tensor& indices) {
        return [&table, &indices, causal](Value s, GraphBuilder& b) {
            const Value biased = attngraph::add(scale(s, factor).named("S"),
                                                gather(b.param("table", table), b.input("index", indices), -1).named("bias"))
                                     .named("S_bias");
            return causal ? mask_causal(biased, 0).named("S_masked") : biased;
        };
    };
    for (bool causal : {false, true})
        for (const Tensor* indices : {&index, &negative}) {
            Case c{std::string(causal ? "gathered_bias_causal" : "gathered_bias") +
                   (indices == &negative ? "_negative" : "")};
            c.chain = chain(causal, *indices);
            c.score = [&, causal](std::size_t, std::size_t h, std::size_t i, std::size_t j, double raw) {
                return causal && j > i ? -inf : factor * raw + bias(h, i, j);
            };
            BOOST_TEST_CONTEXT(c.name) {
                check_case(c);
                const Built built = build(c);
                const Plan plan = make_plan(built.graph, kept(built.graph));
                BOOST_TEST(plan.describe(built.graph).find("bias") != std::string::npos, plan.describe(built.graph));
                for (const Step& st : plan.steps)
                    if (st.kind == StepKind::attention) BOOST_TEST(st.attention->stages[1].index >= 0);
                // kept (traced), the bias is the Gather's own value, and the Add reads it
                for (const Step& st : make_plan(built.graph, kept(built.graph, {"bias"})).steps)
                    if (st.kind == StepKind::attention) BOOST_TEST(st.attention->stages[1].index == -1);
            }
        }

    // an index outside the table, or not a whole number: the Gather's error, named, fused or not
    Case c{"gathered_bias_bad_index"};
    c.chain = chain(false, index);
    Built built = build(c);
    RunOptions plain;
    plain.optimize = false;
    const float nan = std::numeric_limits<float>::quiet_NaN(), big = std::numeric_limits<float>::infinity();
    const std::vector<std::pair<float, std::string>> bad_values = {
        {599.0f, "index 599 at flat position 1507 of indices (300x300) is out of range"},
        {-600.0f, "index -600 at flat position 1507 of indices (300x300) is out of range"},
        {1.5f, "index 1.5 at flat position 1507 of indices (300x300) is not a whole number"},
        {nan, "index nan at flat position 1507 of indices (300x300) is not a whole number"},
        {big, "index inf at flat position 1507 of indices (300x300) is not a whole number"},
        {3e9f, "index 3000000000 at flat position 1507 of indices (300x300) is out of range"}};
    for (const auto& [value, message] : bad_values) {
        Tensor bad = index;
        bad.as<float>().data()[5 * m + 7] = value;
        bad.as<float>().data()[9 * m + 1] = value;  // a later bad one: the first is named
        for (const RunOptions& options : {RunOptions{}, plain}) {
            BOOST_TEST_CONTEXT(message << (options.optimize ? ", fused" : ", plain")) {
                const Graph g = built.graph.with_tensors({{"index", bad}});
                try {
                    run(g, options);
                    BOOST_TEST(false, "no error");
                } catch (const ValueError& e) {
                    const std::string what = e.what();
                    BOOST_TEST(what.find("'bias' (Gather") != std::string::npos, what);
                    BOOST_TEST(what.find(message) != std::string::npos, what);
                }
            }
        }
    }
}

// attention-gym's ALiBi score_mod, bias = slope[h]·(j - i) by a Mul of (H, 1, 1) and (n, m)
// (flex/alibi), then a boolean causal mask: the step forms each product by the Mul's
// arithmetic instead of reading an (H, n, m) bias.
BOOST_AUTO_TEST_CASE(product_bias) {
    const std::size_t n = 300, m = 300, H = 2;
    Tensor slopes = zeros(DType::f32, {H, 1, 1});
    for (std::size_t h = 0; h < H; ++h) slopes.as<float>().data()[h] = std::pow(2.0f, -8.0f * float(h + 1) / float(H));
    Tensor rel = zeros(DType::f32, {n, m}), keep = zeros(DType::f32, {n, m});
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
            rel.as<float>().data()[i * m + j] = static_cast<float>(j) - static_cast<float>(i);
            keep.as<float>().data()[i * m + j] = j <= i;
        }
    Case c{"product_bias"};
    c.chain = [&](Value s, GraphBuilder& b) {
        const Value bias = mul(b.param("slopes", slopes), b.input("rel", rel)).named("bias");
        const Value biased = attngraph::add(scale(s, factor).named("S"), bias).named("S_bias");
        return mask_tensor(biased, b.input("M", keep), false).named("S_masked");
    };
    c.score = [&](std::size_t, std::size_t h, std::size_t i, std::size_t j, double raw) {
        const float product = slopes.as<float>().data()[h] * rel.as<float>().data()[i * m + j];
        return j > i ? -inf : factor * raw + product;
    };
    check_case(c);
    const Built built = build(c);
    for (const Step& st : make_plan(built.graph, kept(built.graph)).steps)
        if (st.kind == StepKind::attention) BOOST_TEST(st.attention->stages[1].multiplier >= 0);
    for (const Step& st : make_plan(built.graph, kept(built.graph, {"bias"})).steps)  // kept: the Mul's own value
        if (st.kind == StepKind::attention) BOOST_TEST(st.attention->stages[1].multiplier == -1);
}

// Gemma-2's softcapping, c·tanh(S / c), before a causal mask; grouped heads in the 5-D layout.
BOOST_AUTO_TEST_CASE(softcap_and_grouped_heads) {
    const double cap = 2.0;
    Case c{"softcap"};
    c.H = 4, c.G = 2;
    c.grouped_5d = true;
    c.chain = [cap](Value s, GraphBuilder& b) {
        Value x = scale(s, factor).named("S");
        x = scale(x, 1 / cap).named("S_div");
        x = b.node<ops::Tanh>({x}, {}, "S_tanh");
        x = scale(x, cap).named("S_capped");
        return mask_causal(x, 0).named("S_masked");
    };
    c.score = [cap](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
        return causal_bias(i, j, 0) == 0 ? cap * std::tanh(factor * raw / cap) : -inf;
    };
    check_case(c);
}

// gpt-oss's sinks (S_sinks = [S_masked | S_sink], A = softmax(S_sinks)[..., :m]): causal, a
// causal window (rows whose window misses key 0), key padding with a length 0 (rows that give
// the sink all the weight), heads with sinks below and above their scores.
BOOST_AUTO_TEST_CASE(sinks_causal_window_and_padding) {
    struct S {
        std::string name;
        int window;
        std::vector<int> lengths;
    };
    for (const S& v : {S{"sinks", 0, {}}, S{"sinks_window", 37, {}}, S{"sinks_padding", 0, {300, 0, 130}}}) {
        BOOST_TEST_CONTEXT(v.name) {
            Case c{v.name};
            c.B = v.lengths.empty() ? 2 : v.lengths.size();
            c.H = c.G = 3;
            c.sinks = {-2.0, 0.5, 3.0};
            const int window = v.window;
            const std::vector<int> lengths = v.lengths;
            c.chain = [window, lengths](Value s, GraphBuilder&) {
                Value x = scale(s, factor).named("S");
                x = (window ? mask_window(x, window, true) : mask_causal(x, 0)).named("S_masked");
                return lengths.empty() ? x : mask_padding(x, lengths).named("S_padded");
            };
            c.score = [window, lengths](std::size_t b, std::size_t, std::size_t i, std::size_t j, double raw) {
                const long p = static_cast<long>(i) - static_cast<long>(j);
                if (p < 0 || (window && p >= window)) return -inf;
                if (!lengths.empty() && static_cast<int>(j) >= lengths[b]) return -inf;
                return factor * raw;
            };
            check_case(c);
        }
    }
}

// stream_copy and stream_fill against std::copy and std::fill: every start off a 16-byte
// boundary, every length around the vector width, NaN and -0.0 bits included.
template <class T>
void check_stream_stores() {
    std::vector<T> from(64);
    for (std::size_t i = 0; i < from.size(); ++i) from[i] = static_cast<T>(std::sin(1.3 * static_cast<double>(i)));
    from[5] = std::numeric_limits<T>::quiet_NaN(), from[6] = T(-0.0), from[7] = -std::numeric_limits<T>::infinity();
    alignas(64) T got[80], want[80];
    for (std::size_t offset = 0; offset < 8; ++offset)
        for (std::size_t count = 0; count <= 40; ++count) {
            BOOST_TEST_CONTEXT("offset " << offset << " count " << count) {
                std::fill(std::begin(got), std::end(got), T(7)), std::fill(std::begin(want), std::end(want), T(7));
                stream_copy(from.data() + offset, count, got + offset);
                stream_fence();
                std::copy(from.data() + offset, from.data() + offset + count, want + offset);
                BOOST_TEST(std::memcmp(got, want, sizeof got) == 0);
                stream_fill(got + offset, count, T(-0.0));
                stream_fence();
                std::fill(want + offset, want + offset + count, T(-0.0));
                BOOST_TEST(std::memcmp(got, want, sizeof got) == 0);
            }
        }
}

BOOST_AUTO_TEST_CASE(stream_stores_copy_and_fill_every_bit) {
    check_stream_stores<float>();
    check_stream_stores<double>();
}

// Traced values of 1 MiB or more are written by streaming stores (engine/stream_store.hpp):
// S_raw, S and A of one head at n = m = 1024 in f32 are 4 MiB each, and with the sink
// column A_sinks' rows of 1025 values start off any 16-byte boundary. The values, -inf and
// 0 at the masked keys included, are the reference's and the plain run's.
BOOST_AUTO_TEST_CASE(large_traced_values_stream) {
    BOOST_TEST(!streams((std::size_t{1} << 20) - 1));
    BOOST_TEST(streams(std::size_t{1024} * 1024 * sizeof(float)));
    BOOST_TEST(streams(std::size_t{1} << 30));
    for (bool sinks : {false, true}) {
        BOOST_TEST_CONTEXT("sinks " << sinks) {
            Case c{sinks ? "large_sinks" : "large_causal"};
            c.B = c.H = c.G = 1;
            c.n = c.m = 1024;
            c.d = 8;
            if (sinks) c.sinks = {0.5};
            c.chain = [](Value s, GraphBuilder&) {
                return mask_causal(scale(s, factor).named("S"), 0).named("S_masked");
            };
            c.score = [](std::size_t, std::size_t, std::size_t i, std::size_t j, double raw) {
                return causal_bias(i, j, 0) == 0 ? factor * raw : -inf;
            };
            check_case(c);
        }
    }
}

// Tanh after a mask would turn -inf into -1: such a chain keeps its nodes (and the numbers).
BOOST_AUTO_TEST_CASE(tanh_after_a_mask_does_not_fuse) {
    GraphBuilder b("late_tanh");
    Value q = b.input("Q", graphs::random_tensor({1, 40, 8}, DType::f32, 1));
    Value k = b.input("K", graphs::random_tensor({1, 40, 8}, DType::f32, 2));
    Value v = b.input("V", graphs::random_tensor({1, 40, 8}, DType::f32, 3));
    Value s = mask_causal(matmul(q, transpose(k)), 0);
    b.output(matmul(softmax(b.node<ops::Tanh>({s}, {}, "T")), v).named("O"));
    const Graph g = b.build();
    BOOST_TEST(count_steps(make_plan(g, kept(g)), StepKind::attention) == 0u);
    RunOptions plain;
    plain.optimize = false;
    BOOST_TEST(test::max_abs_diff(run(g, {}).at(g, "O"), run(g, plain).at(g, "O")) < 1e-6);
}

// A NaN score the fused step keeps makes its row NaN on every key, also where it is the
// row's only kept key (row 0 of a causal map, which it once called fully masked: zeros), and
// on the masked keys too, as the plain Softmax and numpy give it (they stayed 0 once). Rows
// that do not see the NaN key stay as they were.
BOOST_AUTO_TEST_CASE(a_nan_score_makes_its_row_nan) {
    const std::size_t n = 40, d = 8;
    GraphBuilder b("nan_key");
    Tensor kt = graphs::random_tensor({1, n, d}, DType::f32, 2);
    kt.as<float>().data()[0] = std::numeric_limits<float>::quiet_NaN();  // key 0
    Tensor qt = graphs::random_tensor({1, n, d}, DType::f32, 1);
    Value q = b.input("Q", qt), k = b.input("K", kt);
    Value v = b.input("V", graphs::random_tensor({1, n, d}, DType::f32, 3));
    // keys j with i - 3 < j <= i: rows 0-2 see key 0, the others do not
    Value s = mask_window(matmul(q, transpose(k)).named("S_raw"), 3, true).named("S_masked");
    Value a = softmax(s).named("A");
    b.output(matmul(a, v).named("O"));
    const Graph g = b.build();
    BOOST_TEST(count_steps(make_plan(g, kept(g)), StepKind::attention) == 1u);
    RunOptions traced;
    traced.keep_all = true;
    const RunResult r = run(g, traced);
    const Tensor& at = r.at(g, "A");
    const Tensor& o = r.at(g, "O");
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            const bool kept_key = j <= i && i - j < 3;
            const double w = at.at_flat(i * n + j);
            if (i < 3)
                BOOST_TEST(std::isnan(w), i << ", " << j);
            else if (!kept_key)
                BOOST_TEST(w == 0.0, i << ", " << j);
            else
                BOOST_TEST(!std::isnan(w), i << ", " << j);
        }
    for (std::size_t e = 0; e < n * d; ++e) BOOST_TEST(std::isnan(o.at_flat(e)) == (e / d < 3), e);
    RunOptions untraced;  // the same O untraced (bits), and from the plain nodes (NaN rows alike)
    const Tensor uo = run(g, untraced).at(g, "O");
    BOOST_TEST(std::memcmp(uo.as<float>().data(), o.as<float>().data(), n * d * sizeof(float)) == 0);
    RunOptions plain;
    plain.optimize = false;
    plain.keep_all = true;
    const RunResult pr = run(g, plain);
    const Tensor po = pr.at(g, "O");
    for (std::size_t e = 0; e < n * d; ++e) BOOST_TEST(std::isnan(po.at_flat(e)) == (e / d < 3), e);
    const Tensor pa = pr.at(g, "A");  // A's NaN where the plain Softmax has them
    for (std::size_t e = 0; e < n * n; ++e) BOOST_TEST(std::isnan(pa.at_flat(e)) == std::isnan(at.at_flat(e)), e);
}

// ---- the variants and the Attention composite ----------------------------------------------

namespace {

void check_graph(const Graph& g, const std::string& output, const std::vector<std::string>& folded) {
    const Plan plan = make_plan(g, kept(g));
    BOOST_TEST(count_steps(plan, StepKind::attention) == 1u);
    const std::string text = plan.describe(g);
    for (const std::string& name : folded) BOOST_TEST(text.find(name) != std::string::npos, name << " in " << text);
    RunOptions plain;
    plain.optimize = false;
    RunOptions fused;
    fused.threads = 1;
    RunOptions traced = fused;
    traced.trace = true;
    const RunResult rf = run(g, fused);
    const Tensor& y = rf.at(g, output);
    BOOST_TEST(test::max_abs_diff(y, run(g, plain).at(g, output)) < 2e-6);
    BOOST_TEST((run(g, traced).at(g, output) == y));
    for (int threads : test::compared_thread_counts({2, 4, 8})) {
        fused.threads = threads;
        BOOST_TEST((run(g, fused).at(g, output) == y), "threads " << threads);
    }
}

graphs::VariantConfig variant(const std::string& name) {
    graphs::VariantConfig c;
    c.variant = name;
    c.batch = 2;
    c.seq = 200;
    c.d_model = 32;
    c.heads = 4;
    c.seed = 3;
    return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_variant_takes_the_fused_step) {
    struct V {
        graphs::VariantConfig c;
        std::vector<std::string> folded;
    };
    std::vector<V> cases;
    cases.push_back({variant("causal"), {"S_masked", "S_raw", "A"}});
    auto window = variant("sliding-window");
    window.window = 30;
    cases.push_back({window, {"S_masked"}});
    window.causal = true;
    cases.push_back({window, {"S_masked"}});
    cases.push_back({variant("alibi"), {"S_bias", "S_masked"}});
    auto padded = variant("mha-batched");
    padded.lengths = {200, 0};
    cases.push_back({padded, {"S_padded"}});
    auto causal_padded = variant("causal");
    causal_padded.lengths = {150, 77};
    cases.push_back({causal_padded, {"S_masked", "S_padded"}});
    auto cross = variant("cross");
    cross.kv_seq = 150;
    cross.lengths = {150, 60};
    cases.push_back({cross, {"S_padded"}});
    auto gqa = variant("gqa");
    gqa.groups = 2;
    cases.push_back({gqa, {"S"}});
    cases.push_back({variant("mqa"), {"S"}});
    auto decode = variant("decode");
    decode.seq = 3;
    decode.past = 140;
    cases.push_back({decode, {"attn.S_masked"}});
    decode.groups = 2;
    cases.push_back({decode, {"attn.S_raw_groups", "attn.S_masked", "attn.A_groups", "attn.KT_groups"}});
    decode.seq = 150;
    cases.push_back({decode, {"attn.S_masked"}});
    cases.push_back({variant("sinks"), {"S_masked", "S_first", "S_sink", "S_sinks", "A_sinks", "A"}});
    auto sinks = variant("sinks");
    sinks.window = 30;
    sinks.lengths = {200, 0};
    cases.push_back({sinks, {"S_masked", "S_padded", "S_sinks"}});
    cases.push_back({variant("diff"), {"S_masked", "A", "A_split", "A_2_weighted", "A_diff"}});
    auto diff_padded = variant("diff");
    diff_padded.lengths = {130, 0};
    cases.push_back({diff_padded, {"S_masked", "S_padded", "A_split", "A_diff"}});
    for (const V& v : cases) {
        BOOST_TEST_CONTEXT(v.c.variant << " groups " << v.c.groups << " seq " << v.c.seq) {
            check_graph(graphs::build_variant(v.c), "Y", v.folded);
        }
    }
}

// ---- the Differential Transformer -----------------------------------------------------------

namespace {

// Q, K (B, H, 2, n|m, d) and V (B, H, 1, m, dv) -> O (B, H, 1, n, dv) as graphs/variants.cpp builds
// diff: A = softmax(mask(factor · Q·Kᵀ)), A_split = Split(A, axis -3), A_diff = A_split:0 -
// A_split:1 · lambda, O = A_diff·V. `split_axis` and `lambda_shape` make graphs that must not
// fuse; `swap_sub`: A_diff = A_2_weighted - A_split:0 (not the kernel's form either).
struct DiffCase {
    std::size_t B = 2, H = 3, n = 300, m = 300, d = 8, dv = 16;
    bool causal = true;
    std::vector<int> lengths;          // key padding per sequence (empty: none)
    std::vector<int> map_lengths;      // key padding per (b, h, map), on the scores seen as (B·H·2, n, m)
    std::vector<double> lambda{0.2};   // lambda's values, in `lambda_shape`
    Shape lambda_shape{1};
    int split_axis = -3;
    bool swap_sub = false;
};

struct DiffBuilt {
    Graph graph;
    Tensor q, k, v, lambda;
};

DiffBuilt build_diff(const DiffCase& c) {
    GraphBuilder b("diff_case");
    // the axis of two maps is axis 2, or axis 1 when the graph splits axis -4
    const bool heads_inside = c.split_axis == -4;
    const Shape qs = heads_inside ? Shape{c.B, 2, c.H, c.n, c.d} : Shape{c.B, c.H, 2, c.n, c.d};
    const Shape ks = heads_inside ? Shape{c.B, 2, c.H, c.m, c.d} : Shape{c.B, c.H, 2, c.m, c.d};
    const Shape vs = heads_inside ? Shape{c.B, 1, c.H, c.m, c.dv} : Shape{c.B, c.H, 1, c.m, c.dv};
    const Tensor qt = graphs::random_tensor(qs, DType::f32, 41), kt = graphs::random_tensor(ks, DType::f32, 42),
                 vt = graphs::random_tensor(vs, DType::f32, 43);
    Tensor lambda = zeros(DType::f32, c.lambda_shape);
    for (std::size_t i = 0; i < c.lambda.size(); ++i) lambda.as<float>().data()[i] = static_cast<float>(c.lambda[i]);
    const Value q = b.input("Q", qt), k = b.input("K", kt), v = b.input("V", vt);
    Value s = scale(matmul(q, transpose(k).named("KT")).named("S_raw"), factor).named("S");
    if (c.causal) s = mask_causal(s, 0).named("S_masked");
    if (!c.lengths.empty()) s = mask_padding(s, c.lengths).named("S_padded");
    if (!c.map_lengths.empty()) {  // the two maps of a head see different keys
        const Value flat = reshape(s, {-1}, 0, 2).named("S_flat");
        s = reshape(mask_padding(flat, c.map_lengths).named("S_flat_padded"),
                    {static_cast<int>(c.B), static_cast<int>(c.H), 2}, 0, 2)
                .named("S_map_padded");
    }
    const Value a = softmax(s).named("A");
    const std::vector<Value> maps = split(a, 2, c.split_axis, "A_split");
    const Value weighted = mul(maps[1], b.param("lambda", lambda)).named("A_2_weighted");
    const Value a_diff = (c.swap_sub ? sub(weighted, maps[0]) : sub(maps[0], weighted)).named("A_diff");
    b.output(matmul(a_diff, v).named("O"));
    return {b.build(), qt, kt, vt, lambda};
}

// A plain loop in double over the case's tensors: A_diff (B, H, 1, n, m) and O (B, H, 1, n, dv),
// lambda read as broadcast to (B, H, 1, n, m). Only for the fusing layout (split_axis -3).
ReferenceResult diff_reference(const DiffCase& c, const DiffBuilt& t) {
    ReferenceResult out;
    out.a.assign(c.B * c.H * c.n * c.m, 0.0);
    out.o.assign(c.B * c.H * c.n * c.dv, 0.0);
    const Shape target{c.B, c.H, 1, c.n, c.m};
    const auto lambda_strides = ops::broadcast_strides(c.lambda_shape, target);
    const std::vector<double> qv = values_of(t.q), kv = values_of(t.k), vv = values_of(t.v),
                              lambdas = values_of(t.lambda);
    const double *qd = qv.data(), *kd = kv.data(), *vd = vv.data();
    std::vector<double> scores(c.m), weights(2 * c.m);
    double *s = scores.data(), *w[2] = {weights.data(), weights.data() + c.m};
    for (std::size_t b = 0; b < c.B; ++b)
        for (std::size_t h = 0; h < c.H; ++h)
            for (std::size_t i = 0; i < c.n; ++i) {
                for (std::size_t p = 0; p < 2; ++p) {
                    for (std::size_t j = 0; j < c.m; ++j) s[j] = -inf;
                    double mx = -inf;
                    for (std::size_t j = 0; j < c.m; ++j) {
                        if ((c.causal && j > i) || (!c.lengths.empty() && static_cast<int>(j) >= c.lengths[b])) continue;
                        if (!c.map_lengths.empty() && static_cast<int>(j) >= c.map_lengths[(b * c.H + h) * 2 + p])
                            continue;
                        double raw = 0;
                        for (std::size_t e = 0; e < c.d; ++e)
                            raw += qd[(((b * c.H + h) * 2 + p) * c.n + i) * c.d + e] *
                                   kd[(((b * c.H + h) * 2 + p) * c.m + j) * c.d + e];
                        s[j] = factor * raw;
                        mx = std::max(mx, s[j]);
                    }
                    for (std::size_t j = 0; j < c.m; ++j) w[p][j] = 0.0;
                    if (mx == -inf) continue;  // a fully masked row: zeros
                    double sum = 0;
                    for (std::size_t j = 0; j < c.m; ++j) sum += s[j] == -inf ? 0 : std::exp(s[j] - mx);
                    for (std::size_t j = 0; j < c.m; ++j) w[p][j] = s[j] == -inf ? 0 : std::exp(s[j] - mx) / sum;
                }
                const std::size_t row = (b * c.H + h) * c.n + i;
                double* a = out.a.data() + row * c.m;
                for (std::size_t j = 0; j < c.m; ++j) {
                    const double lambda = lambdas[ops::broadcast_offset(row * c.m + j, target, lambda_strides)];
                    a[j] = w[0][j] - lambda * w[1][j];
                }
                for (std::size_t e = 0; e < c.dv; ++e) {
                    double acc = 0;
                    for (std::size_t j = 0; j < c.m; ++j) acc += a[j] * vd[((b * c.H + h) * c.m + j) * c.dv + e];
                    out.o[row * c.dv + e] = acc;
                }
            }
    return out;
}

void check_diff_case(const DiffCase& c) {
    const DiffBuilt built = build_diff(c);
    const Graph& g = built.graph;
    const Plan plan = make_plan(g, kept(g));
    BOOST_TEST(count_steps(plan, StepKind::attention) == 1u);
    BOOST_TEST(count_steps(plan, StepKind::node) == 0u);  // Split, Mul and Sub folded too
    // untraced, the step makes O alone: no n×m value (S, A, its halves, A_diff) is held
    for (const Step& st : plan.steps)
        if (st.kind == StepKind::attention) BOOST_TEST(st.outputs.size() == 1u);
    BOOST_TEST(count_steps(make_plan(g, std::vector<bool>(g.values().size(), true)), StepKind::attention) == 1u);

    RunOptions plain;
    plain.optimize = false;
    plain.trace = true;
    RunOptions fused;
    fused.threads = 1;
    RunOptions traced = fused;
    traced.trace = true;
    const RunResult rp = run(g, plain), rf = run(g, fused), rt = run(g, traced);
    const Tensor& o = rf.at(g, "O");

    const ReferenceResult want = diff_reference(c, built);
    BOOST_TEST(max_diff(o, want.o) < 2e-5);
    BOOST_TEST(max_diff(rt.at(g, "A_diff"), want.a) < 2e-6);
    BOOST_TEST(test::max_abs_diff(o, rp.at(g, "O")) < 1e-6);
    BOOST_TEST((rt.at(g, "O") == o));  // tracing changes no bit
    // every traced value: the plain run's, -inf and 0 at the same places; A and its halves
    // within the same tolerance as check_case's chain (the GEMM calls per key block may round
    // differently)
    check_traced_as_plain(g, rp, rt);
    // A_diff from the traced halves by the nodes' arithmetic, bit for bit: the fused step
    // does Mul and Sub as the ops do
    {
        const Tensor& a_diff = rt.at(g, "A_diff");
        const float *a1 = rt.at(g, "A_split:0").as<float>().data(), *a2 = rt.at(g, "A_split:1").as<float>().data(),
                    *ad = a_diff.as<float>().data(), *lambdas = built.lambda.as<float>().data();
        const Shape target{c.B, c.H, 1, c.n, c.m};
        const auto strides = ops::broadcast_strides(c.lambda_shape, target);
        std::size_t wrong = 0;
        for (std::size_t i = 0, count = a_diff.size(); i < count; ++i) {
            const float lambda = lambdas[ops::broadcast_offset(i, target, strides)];
            const float want_i = a1[i] - a2[i] * lambda;
            wrong += std::memcmp(&want_i, ad + i, sizeof(float)) != 0;
        }
        BOOST_TEST(wrong == 0u);
    }
    // a row with no key in either map gives O = 0
    std::size_t nonzero_empty = 0, empty_rows = 0;
    for (std::size_t row = 0; row < c.B * c.H * c.n; ++row) {
        bool any = false;
        for (std::size_t j = 0; j < c.m; ++j) any = any || want.a[row * c.m + j] != 0;
        if (any) continue;
        ++empty_rows;
        for (std::size_t e = 0; e < c.dv; ++e) nonzero_empty += o.at_flat(row * c.dv + e) != 0.0;
    }
    BOOST_TEST(nonzero_empty == 0u);
    BOOST_TEST_MESSAGE("diff: " << empty_rows << " fully masked rows");

    // bytewise the same for any thread count, untraced and with A_diff traced
    check_thread_counts(g, fused, o, "A_diff");
}

// A graph the kernel cannot take keeps its nodes: no attention step, the plain run's numbers.
void check_diff_falls_back(const DiffCase& c) {
    const Graph g = build_diff(c).graph;
    BOOST_TEST(count_steps(make_plan(g, kept(g)), StepKind::attention) == 0u);
    RunOptions plain;
    plain.optimize = false;
    const Tensor o = run(g, {}).at(g, "O");
    BOOST_TEST(test::max_abs_diff(o, run(g, plain).at(g, "O")) < 1e-6);
    double largest = 0;
    for (std::size_t i = 0; i < o.size(); ++i) largest = std::max(largest, std::abs(o.at_flat(i)));
    BOOST_TEST(largest > 0.01);  // real numbers, not zeros
}

}  // namespace

// Causal with one lambda (graphs/variants.cpp's); per-head lambdas, some negative, with key
// padding (a length 0: rows with no key) and no causal mask; causal with padding, per sequence
// and per map (the two maps of a head with different spans, one or both empty);
// cross-attention (m != n) unmasked.
BOOST_AUTO_TEST_CASE(diff_causal_padding_and_cross) {
    BOOST_TEST_CONTEXT("causal") { check_diff_case(DiffCase{}); }
    DiffCase padded;
    padded.causal = false;
    padded.lengths = {170, 0};
    padded.lambda = {0.2, -0.35, 0.8};
    padded.lambda_shape = {3, 1, 1, 1};
    BOOST_TEST_CONTEXT("padding, lambda per head") { check_diff_case(padded); }
    DiffCase causal_padded;
    causal_padded.lengths = {300, 129};
    BOOST_TEST_CONTEXT("causal and padding") { check_diff_case(causal_padded); }
    DiffCase maps;  // each map of a head its own keys: A_diff over the union of the spans
    maps.map_lengths = {300, 40, 0, 170, 129, 128, 1, 0, 255, 256, 300, 299};
    BOOST_TEST_CONTEXT("padding per map") { check_diff_case(maps); }
    DiffCase cross;
    cross.causal = false;
    cross.n = 140;
    cross.m = 260;
    cross.lambda = {0.5, 0.1};
    cross.lambda_shape = {2, 1, 1, 1, 1};  // per sequence
    BOOST_TEST_CONTEXT("cross") { check_diff_case(cross); }
}

// Not the kernel's graph: the split along another axis (the maps outside the heads), a lambda
// that widens A_2_weighted to both maps, A_diff the other way round.
BOOST_AUTO_TEST_CASE(diff_graphs_the_kernel_cannot_take_fall_back) {
    DiffCase other_axis;
    other_axis.split_axis = -4;
    BOOST_TEST_CONTEXT("split on axis -4") { check_diff_falls_back(other_axis); }
    DiffCase widening;
    widening.lambda = {0.2, 0.4};
    widening.lambda_shape = {2, 1, 1};
    BOOST_TEST_CONTEXT("lambda (2, 1, 1)") { check_diff_falls_back(widening); }
    DiffCase swapped;
    swapped.swap_sub = true;
    BOOST_TEST_CONTEXT("A_2_weighted - A_split:0") { check_diff_falls_back(swapped); }
}

// Attention (ops/attention.cpp) with causal, an attn_mask, softcap, GQA and a past.
BOOST_AUTO_TEST_CASE(attention_composite_with_masks_softcap_groups_and_past) {
    struct C {
        std::size_t heads, kv_heads, past;
        bool causal;
        double softcap;
        std::string mask;  // "", "additive", "boolean"
    };
    for (const C& c : {C{4, 4, 0, true, 0, ""}, C{4, 2, 20, true, 3.0, ""}, C{4, 1, 0, false, 0, "additive"},
                       C{4, 2, 0, true, 0, "boolean"}, C{2, 2, 30, true, 5.0, "additive"}}) {
        BOOST_TEST_CONTEXT("heads " << c.heads << "/" << c.kv_heads << " past " << c.past << " causal " << c.causal
                                    << " softcap " << c.softcap << " mask " << c.mask) {
            const std::size_t B = 2, n = 140, d = 8, m = c.past + n;
            GraphBuilder b("composite");
            AttentionInputs in;
            in.q = b.input("Q", graphs::random_tensor({B, c.heads, n, d}, DType::f32, 31));
            in.k = b.input("K", graphs::random_tensor({B, c.kv_heads, n, d}, DType::f32, 32));
            in.v = b.input("V", graphs::random_tensor({B, c.kv_heads, n, d}, DType::f32, 33));
            if (c.past) {
                in.past_key = b.input("past_key", graphs::random_tensor({B, c.kv_heads, c.past, d}, DType::f32, 34));
                in.past_value = b.input("past_value", graphs::random_tensor({B, c.kv_heads, c.past, d}, DType::f32, 35));
            }
            if (!c.mask.empty()) {
                Tensor mk = graphs::random_tensor({B, 1, n, m}, DType::f32, 36);
                for (std::size_t i = 0; i < mk.size(); ++i)
                    if (c.mask == "boolean")
                        mk.as<float>().data()[i] = i % 3 == 0 ? 0.0f : 1.0f;
                    else if (i % 5 == 0)
                        mk.as<float>().data()[i] = -std::numeric_limits<float>::infinity();
                in.attn_mask = b.input("mask", mk);
            }
            AttentionAttrs a;
            a.is_causal = c.causal;
            a.softcap = c.softcap;
            a.mask_type = c.mask.empty() ? "additive" : c.mask;
            const AttentionOutputs out = attention("attn", in, a);
            b.output(out.y);
            std::vector<std::string> folded{"attn.S", "attn.A"};
            if (c.causal || !c.mask.empty()) folded.push_back("attn.S_masked");
            if (c.softcap > 0) folded.push_back("attn.S_tanh");
            if (c.heads != c.kv_heads) folded.push_back("attn.S_raw_groups");
            check_graph(b.build(), "attn.O", folded);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_fused_attention
