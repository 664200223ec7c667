// The fused attention backward (engine/attention_backward.cpp) against a plain-loop f64
// reference written here and the plain per-node backward; bit-identical at 1, 2, 4 and 8
// threads; traced (A kept) and untraced (A recomputed) runs bit for bit; GQA and MQA
// shapes; gradcheck in f64; and a forward for backward that keeps no n×m matrix.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "graphs/mha.hpp"
#include "ops/attention.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_attention_backward)

using namespace attngraph;
namespace bdata = boost::unit_test::data;

namespace {

// Q (batch..., n, dk), K (kbatch..., m, dk), V (vbatch..., m, dv); Y = A·V with
// A = softmax(c · Q·Kᵀ) (c = 1/sqrt(dk), or no Scale node when !scaled), output Y.
struct Case {
    Shape q, k, v;
    bool scaled = true;
};

double factor_of(const Case& c) {
    return 1.0 / std::sqrt(static_cast<double>(c.q.back()));
}

Graph attention_graph(const Case& c, DType dtype) {
    GraphBuilder g("attention", dtype);
    Value q = g.input("Q", graphs::random_tensor(c.q, dtype, 1, 2.0));
    Value k = g.input("K", graphs::random_tensor(c.k, dtype, 2, 2.0));
    Value v = g.input("V", graphs::random_tensor(c.v, dtype, 3));
    Value s = matmul(q, transpose(k)).named("S_raw");
    if (c.scaled) s = scale(s, factor_of(c)).named("S");
    Value a = softmax(s).named("A");
    g.output(matmul(a, v).named("Y"));
    return g.build();
}

// dL/dQ, dL/dK, dL/dV of L = sum(G ⊙ Y) by plain loops in double: per batch of Q, with K's
// and V's matrix chosen by numpy broadcasting of the batch axes.
struct Reference {
    std::vector<double> dq, dk, dv;
    std::vector<double> dslopes;  // with an ALiBi bias
    std::vector<double> dsinks;   // with sinks
    std::vector<double> dlambda;  // with the Differential Transformer's lambda
    std::vector<double> dbias, dmultiplier;  // with an added bias: its operands'
};

std::size_t matrix_of(std::size_t b, const Shape& qbatch, const Shape& obatch) {
    std::size_t off = 0, stride = 1, rem = b;
    std::vector<std::size_t> idx(qbatch.size());
    for (std::size_t i = qbatch.size(); i-- > 0;) {
        idx[i] = rem % qbatch[i];
        rem /= qbatch[i];
    }
    for (std::size_t i = obatch.size(); i-- > 0;) {
        const std::size_t qi = idx[i + qbatch.size() - obatch.size()];
        off += (obatch[i] == 1 ? 0 : qi) * stride;
        stride *= obatch[i];
    }
    return off;
}

// keep(b, i, j): whether query i of Q's matrix b sees key j (a Mask; a row that sees none has
// A = 0); `after`: a Scale after the Mask; an ALiBi bias and then softcapping between the
// Scale and the Mask: z = c · Q·Kᵀ − slopes[b mod h]·|i + offset − j|,
// S = after · cap·tanh(z / cap) (S = after · z without a cap). `sinks`: gpt-oss's sink logit
// of head b mod h as one more column of each row's softmax, its weight dropped. `lambda`: the
// Differential Transformer, Q's matrices 2o and 2o + 1 (the maps) giving O's matrix o =
// (A_2o − lambda[o mod size]·A_2o+1)·V, so that map 2o + 1's dA is −lambda·dO·Vᵀ and its
// share of dV −lambda·Aᵀ·dO; dlambda sums −dO·Vᵀ ⊙ A_2o+1. `added`: a bias added to z after the
// ALiBi bias (before the cap), whose operands' gradients it gives from dz. `a_seed`: dL/dA
// from outside (A also an output of the graph), added to dO·Vᵀ.
struct AddedBias {
    std::function<double(std::size_t b, std::size_t i, std::size_t j)> value;  // empty: none
    // adds dz at (b, i, j) into the operands' gradients
    std::function<void(std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r)> grad;
    std::size_t sizes[2] = {0, 0};  // the operands' elements
};
using Keep = std::function<bool(std::size_t b, std::size_t i, std::size_t j)>;
struct AlibiBias {
    std::vector<double> slopes;  // empty: no bias
    long offset = 0;
    double distance(std::size_t i, std::size_t j) const {
        return std::abs(static_cast<double>(static_cast<long>(i) + offset - static_cast<long>(j)));
    }
};

Reference reference(const Case& c, const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& gt,
                    const Keep& keep = {}, double after = 1.0, const AlibiBias& alibi = {}, double cap = 0,
                    const std::vector<double>& sinks = {}, const std::vector<double>& lambda = {},
                    const AddedBias& added = {},
                    const std::function<double(std::size_t b, std::size_t i, std::size_t j)>& a_seed = {}) {
    const std::size_t n = c.q.end()[-2], dk = c.q.back(), m = c.k.end()[-2], dv = c.v.back();
    const Shape qb(c.q.begin(), c.q.end() - 2), kb(c.k.begin(), c.k.end() - 2), vb(c.v.begin(), c.v.end() - 2);
    const std::size_t batches = element_count(qb);
    const double f = c.scaled ? factor_of(c) : 1.0;
    // S = after · capped(z) and dS/dz
    auto capped = [&](double z) { return after * (cap > 0 ? cap * std::tanh(z / cap) : z); };
    auto slope = [&](double z) {
        const double t = cap > 0 ? std::tanh(z / cap) : 0.0;
        return after * (1.0 - t * t);
    };
    Reference r;
    r.dq.assign(qt.size(), 0.0);
    r.dk.assign(kt.size(), 0.0);
    r.dv.assign(vt.size(), 0.0);
    r.dslopes.assign(alibi.slopes.size(), 0.0);
    r.dsinks.assign(sinks.size(), 0.0);
    r.dlambda.assign(lambda.size(), 0.0);
    r.dbias.assign(added.sizes[0], 0.0);
    r.dmultiplier.assign(added.sizes[1], 0.0);
    for (std::size_t b = 0; b < batches; ++b) {
        // the map's O matrix and its weight in O: 1, or −lambda for the second map
        const std::size_t o = lambda.empty() ? b : b / 2, l = lambda.empty() ? 0 : o % lambda.size();
        const bool second = !lambda.empty() && b % 2 == 1;
        const double coef = second ? -lambda[l] : 1.0;
        const std::size_t h = alibi.slopes.empty() ? 0 : b % alibi.slopes.size();
        auto bias = [&](std::size_t i, std::size_t j) {
            return alibi.slopes.empty() ? 0.0 : alibi.slopes[h] * alibi.distance(i, j);
        };
        const std::size_t kj = matrix_of(b, qb, kb), vj = matrix_of(b, qb, vb);
        auto Q = [&](std::size_t i, std::size_t d) { return qt.at_flat((b * n + i) * dk + d); };
        auto K = [&](std::size_t j, std::size_t d) { return kt.at_flat((kj * m + j) * dk + d); };
        auto V = [&](std::size_t j, std::size_t d) { return vt.at_flat((vj * m + j) * dv + d); };
        auto G = [&](std::size_t i, std::size_t d) { return gt.at_flat((o * n + i) * dv + d); };
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<double> z(m), s(m), a(m), da(m);
            double mx = -INFINITY, sum = 0;
            for (std::size_t j = 0; j < m; ++j) {
                if (keep && !keep(b, i, j)) continue;
                double dot = 0;
                for (std::size_t d = 0; d < dk; ++d) dot += Q(i, d) * K(j, d);
                z[j] = f * dot - bias(i, j) + (added.value ? added.value(b, i, j) : 0.0);
                s[j] = capped(z[j]);
                mx = std::max(mx, s[j]);
            }
            if (mx == -INFINITY) continue;  // no key: A = 0, O = 0 (a sink takes all the weight)
            const double sink = sinks.empty() ? 0.0 : sinks[b % sinks.size()];
            if (!sinks.empty()) mx = std::max(mx, sink);
            for (std::size_t j = 0; j < m; ++j) sum += a[j] = keep && !keep(b, i, j) ? 0.0 : std::exp(s[j] - mx);
            if (!sinks.empty()) sum += std::exp(sink - mx);
            double rowdot = 0;
            std::vector<bool> seen(m);  // the keys the row sees (a masked key adds nothing)
            for (std::size_t j = 0; j < m; ++j) {
                seen[j] = !keep || keep(b, i, j);
                if (!seen[j]) continue;
                a[j] /= sum;
                double d_a = 0;
                for (std::size_t d = 0; d < dv; ++d) {
                    d_a += G(i, d) * V(j, d);
                    r.dv[(vj * m + j) * dv + d] += coef * a[j] * G(i, d);
                }
                if (second) r.dlambda[l] -= d_a * a[j];
                da[j] = coef * d_a + (a_seed ? a_seed(b, i, j) : 0.0);
                rowdot += a[j] * da[j];
            }
            if (!sinks.empty()) r.dsinks[b % sinks.size()] += std::exp(sink - mx) / sum * (0.0 - rowdot);
            for (std::size_t j = 0; j < m; ++j) {
                if (!seen[j]) continue;
                const double dz = slope(z[j]) * a[j] * (da[j] - rowdot), ds = f * dz;
                if (!alibi.slopes.empty()) r.dslopes[h] -= dz * alibi.distance(i, j);
                if (added.grad) added.grad(b, i, j, dz, r);
                for (std::size_t d = 0; d < dk; ++d) {
                    r.dq[(b * n + i) * dk + d] += ds * K(j, d);
                    r.dk[(kj * m + j) * dk + d] += ds * Q(i, d);
                }
            }
        }
    }
    return r;
}

// Largest |got - want| / max|want|: the error relative to the gradient's scale.
double rel_error(const Tensor& got, const std::vector<double>& want) {
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, std::abs(got.at_flat(i) - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    return err / scale;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    const std::size_t bytes = a.size() * (a.dtype() == DType::f32 ? 4 : 8);
    const void* pa = a.dtype() == DType::f32 ? static_cast<const void*>(a.as<float>().data())
                                             : static_cast<const void*>(a.as<double>().data());
    const void* pb = b.dtype() == DType::f32 ? static_cast<const void*>(b.as<float>().data())
                                             : static_cast<const void*>(b.as<double>().data());
    return std::memcmp(pa, pb, bytes) == 0;
}

struct Run {
    RunResult forward;
    Gradients grads;
};

enum class Mode { untraced, traced, plain };

// dL/dY of the graph's output Y
Tensor grad_of_y(const Graph& g, DType dtype) { return graphs::random_tensor(g.value(g.at("Y")).shape, dtype, 4); }

Run run_backward(const Graph& g, Mode mode, int threads, std::vector<std::string> wrt = {"Q", "K", "V"}) {
    Executor ex(threads);
    RunOptions o;
    o.keep_for_backward = mode == Mode::untraced;
    o.keep_all = mode != Mode::untraced;
    Run r{ex.run(g, o), {}};
    const Tensor grad_y = grad_of_y(g, g.dtype());
    r.grads = ex.backward(g, r.forward, {{"Y", grad_y}}, wrt, {}, mode != Mode::plain);
    return r;
}

// MHA (one head and batched), a Q batch larger than one GEMM row block with a ragged last
// block, K/V shared across heads (GQA: batch 2, 2 groups of 2 query heads on one key head
// each; MQA: one key head broadcast over batch and heads), cross-attention (m != n, dv != dk), no Scale node.
const std::vector<Case> cases = {
    {{5, 4}, {5, 4}, {5, 4}, true},
    {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true},
    {{2, 2, 2, 150, 8}, {2, 2, 1, 150, 8}, {2, 2, 1, 150, 8}, true},
    {{2, 3, 130, 8}, {1, 1, 130, 8}, {1, 1, 130, 8}, true},
    {{3, 70, 12}, {3, 300, 12}, {3, 300, 20}, true},
    {{2, 140, 8}, {2, 140, 8}, {2, 140, 8}, false},
    // steps of several forward blocks (512 rows here, then the last 188), and of one block
    // where the keys are many (engine/attention_backward.cpp's step_values)
    {{2, 700, 8}, {2, 700, 8}, {2, 700, 8}, true},
    {{1, 300, 8}, {1, 2100, 8}, {1, 2100, 8}, true},
};

}  // namespace

BOOST_DATA_TEST_CASE(fused_backward_matches_a_plain_loop_reference, bdata::xrange(cases.size()), ci) {
    const Case& c = cases[ci];
    const Graph g = attention_graph(c, DType::f32);
    const Run fused = run_backward(g, Mode::untraced, 2);
    const Run plain = run_backward(g, Mode::plain, 2);
    const auto& in = g.values();
    auto data = [&](const std::string& name) { return in[static_cast<std::size_t>(g.at(name))].data->cast(DType::f64); };
    const Tensor grad_y = grad_of_y(g, DType::f32).cast(DType::f64);
    const Reference ref = reference(c, data("Q"), data("K"), data("V"), grad_y);
    BOOST_TEST(rel_error(fused.grads.at("Q"), ref.dq) <= 2e-5);
    BOOST_TEST(rel_error(fused.grads.at("K"), ref.dk) <= 2e-5);
    BOOST_TEST(rel_error(fused.grads.at("V"), ref.dv) <= 2e-5);
    // the plain per-node backward is as close (and so within 2e-5 of the fused one's scale)
    BOOST_TEST(rel_error(plain.grads.at("Q"), ref.dq) <= 2e-5);
    BOOST_TEST(rel_error(plain.grads.at("K"), ref.dk) <= 2e-5);
    BOOST_TEST(rel_error(plain.grads.at("V"), ref.dv) <= 2e-5);
    // the untraced forward kept none of S_raw, S, A, KT
    for (const char* name : {"S_raw", "A"}) BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at(name))]);
}

BOOST_DATA_TEST_CASE(fused_backward_bit_identical_for_any_thread_count,
                     bdata::xrange(cases.size()) * bdata::make({0, 1}), ci, f64) {
    const Case& c = cases[ci];
    const Graph g = attention_graph(c, f64 ? DType::f64 : DType::f32);
    const Run one = run_backward(g, Mode::untraced, 1);
    for (int threads : {2, 4, 8}) {
        const Run many = run_backward(g, Mode::untraced, threads);
        for (const char* name : {"Q", "K", "V"}) BOOST_TEST_CONTEXT(name << " at " << threads << " threads") {
                BOOST_TEST(same_bits(one.grads.at(name), many.grads.at(name)));
            }
    }
}

BOOST_DATA_TEST_CASE(traced_and_untraced_backward_agree_bitwise, bdata::xrange(cases.size()) * bdata::make({1, 4}),
                     ci, threads) {
    // traced: A (and S_raw, S, KT) kept and read; untraced: A recomputed with the forward's kernel
    const Case& c = cases[ci];
    const Graph g = attention_graph(c, DType::f32);
    const Run untraced = run_backward(g, Mode::untraced, threads);
    std::vector<std::string> every;  // what `grad --trace` asks for: every value
    const Run traced = run_backward(g, Mode::traced, threads, every);
    BOOST_TEST(!untraced.forward.values[static_cast<std::size_t>(g.at("A"))]);
    BOOST_TEST(traced.forward.values[static_cast<std::size_t>(g.at("A"))]);
    for (const char* name : {"Q", "K", "V"}) BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(same_bits(untraced.grads.at(name), traced.grads.at(name)));
        }
    BOOST_TEST(same_bits(untraced.forward.at(g, "Y"), traced.forward.at(g, "Y")));
}

BOOST_DATA_TEST_CASE(cached_keys_as_an_output_traced_and_untraced_agree_bitwise, bdata::make({0, 1}), f64) {
    // decoding's present_key: K = Concat(past_key, K_new) is an output too, so its gradient
    // holds the ones of its seed when the step adds dK (K shared by 3 query heads, 2 steps of
    // rows); dK = 1 + the step's, in the bits `grad --trace` gives (KT kept, dKT added)
    const DType dtype = f64 ? DType::f64 : DType::f32;
    const Case c{{2, 3, 600, 8}, {2, 1, 600, 8}, {2, 1, 600, 8}, true};
    const Tensor past = graphs::random_tensor({2, 1, 450, 8}, dtype, 2, 2.0),
                 fresh = graphs::random_tensor({2, 1, 150, 8}, dtype, 5, 2.0);
    GraphBuilder b("cached_keys", dtype);
    Value q = b.input("Q", graphs::random_tensor(c.q, dtype, 1, 2.0));
    Value k = concat({b.input("past_key", past), b.input("K_new", fresh)}, 2).named("present_key");
    Value v = b.input("V", graphs::random_tensor(c.v, dtype, 3));
    Value a = softmax(scale(matmul(q, transpose(k)).named("S_raw"), factor_of(c)).named("S")).named("A");
    b.output(matmul(a, v).named("Y"));
    b.output(k);
    const Graph g = b.build();
    const std::vector<std::string> wrt = {"Q", "past_key", "K_new", "V", "present_key"};
    for (int threads : {1, 4}) BOOST_TEST_CONTEXT(threads << " threads") {
            const Run untraced = run_backward(g, Mode::untraced, threads, wrt);
            const Run traced = run_backward(g, Mode::traced, threads, {});
            BOOST_TEST(!untraced.forward.values[static_cast<std::size_t>(g.at("A"))]);
            for (const std::string& name : wrt) BOOST_TEST_CONTEXT(name) {
                    BOOST_TEST(same_bits(untraced.grads.at(name), traced.grads.at(name)));
                }
            // against the plain loops: K's rows of past_key, then of K_new
            Tensor kt = zeros(DType::f64, c.k);
            double* kd = kt.as<double>().data();
            for (std::size_t bi = 0; bi < 2; ++bi)
                for (std::size_t j = 0; j < 600; ++j)
                    for (std::size_t d = 0; d < 8; ++d)
                        kd[(bi * 600 + j) * 8 + d] = j < 450 ? past.at_flat((bi * 450 + j) * 8 + d)
                                                             : fresh.at_flat((bi * 150 + j - 450) * 8 + d);
            const auto in = [&](const char* name) { return g.value(g.at(name)).data->cast(DType::f64); };
            const Reference ref = reference(c, in("Q"), kt, in("V"), grad_of_y(g, DType::f64));
            std::vector<double> dk = ref.dk;
            for (double& e : dk) e += 1.0;  // the output's seed
            BOOST_TEST(rel_error(untraced.grads.at("present_key"), dk) <= (f64 ? 1e-12 : 2e-5));
            BOOST_TEST(rel_error(untraced.grads.at("Q"), ref.dq) <= (f64 ? 1e-12 : 2e-5));
        }
}

BOOST_AUTO_TEST_CASE(traced_intermediate_gradients_match_the_plain_backward) {
    // with every value requested, the fused step writes dA, dS, dS_raw and dKT too
    const Case c{{2, 150, 8}, {2, 150, 8}, {2, 150, 8}, true};
    const Graph g = attention_graph(c, DType::f64);
    std::vector<std::string> every;
    const Run fused = run_backward(g, Mode::traced, 2, every);
    const Run plain = run_backward(g, Mode::plain, 2, every);
    for (const auto& v : g.values()) BOOST_TEST_CONTEXT(v.name) {
            const Tensor& want = plain.grads.at(v.name);
            std::vector<double> w(want.size());
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
            BOOST_TEST(rel_error(fused.grads.at(v.name), w) <= 1e-12);
        }
}

BOOST_DATA_TEST_CASE(fused_backward_gradchecks_in_f64, bdata::xrange(cases.size()), ci) {
    Case c = cases[ci];
    for (Shape* s : {&c.q, &c.k, &c.v}) s->end()[-2] = std::min<std::size_t>(s->end()[-2], 6);  // small n, m
    const Graph g = attention_graph(c, DType::f64);
    GradcheckOptions o;  // gradcheck runs backward() with its defaults: fused
    const GradcheckResult r = gradcheck(g, o);
    BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
}

BOOST_AUTO_TEST_CASE(no_keys_give_zero_gradients) {
    // m = 0: O is an empty sum, so dQ is 0, and dK, dV are empty (the step size must not
    // divide by m)
    const Case c{{1, 5, 4}, {1, 0, 4}, {1, 0, 4}, true};
    const Graph g = attention_graph(c, DType::f32);
    for (Mode mode : {Mode::untraced, Mode::traced})
        for (int threads : {1, 2}) {
            const Run r = run_backward(g, mode, threads);
            const Tensor& dq = r.grads.at("Q");
            BOOST_REQUIRE_EQUAL(dq.size(), 20u);
            for (std::size_t i = 0; i < dq.size(); ++i) BOOST_TEST(dq.at_flat(i) == 0.0);
            BOOST_TEST(r.grads.at("K").size() == 0u);
            BOOST_TEST(r.grads.at("V").size() == 0u);
        }
}

BOOST_AUTO_TEST_CASE(only_the_gradients_asked_for_are_computed) {
    // dV alone needs no dS; dQ alone no dV
    const Case c{{2, 140, 8}, {2, 140, 8}, {2, 140, 8}, true};
    const Graph g = attention_graph(c, DType::f32);
    const Run all = run_backward(g, Mode::untraced, 2);
    const Run v_only = run_backward(g, Mode::untraced, 2, {"V"});
    const Run q_only = run_backward(g, Mode::untraced, 2, {"Q"});
    BOOST_TEST(same_bits(all.grads.at("V"), v_only.grads.at("V")));
    BOOST_TEST(same_bits(all.grads.at("Q"), q_only.grads.at("Q")));
    BOOST_TEST(!v_only.grads.contains("Q"));
}

namespace {

// The per-head multi-head attention graph of graphs/mha.hpp, and the two forward runs a
// backward reads: the lean one (what the backward needs) and every value.
Graph per_head_mha(std::size_t seq, std::size_t d_model, std::size_t heads) {
    graphs::MhaConfig cfg;
    cfg.seq = seq;
    cfg.d_model = d_model;
    cfg.heads = heads;
    return graphs::build_mha(cfg);
}
RunOptions for_backward() {
    RunOptions o;
    o.keep_for_backward = true;
    return o;
}
}  // namespace

BOOST_AUTO_TEST_CASE(mha_graph_forward_for_backward_keeps_no_scores) {
    // the per-head graph (Linear projections, Scale, Concat): the forward for backward keeps
    // every value but each head's KT, S_raw, S, A; the gradients match a keep_all run's
    const Graph g = per_head_mha(160, 32, 4);
    Executor ex(2);
    const RunResult fl = ex.run(g, for_backward()), fa = ex.run(g, test::keep_all());
    std::size_t dropped = 0;
    for (std::size_t v = 0; v < g.values().size(); ++v) {
        const std::string& name = g.values()[v].name;
        const bool score = name.ends_with(".S_raw") || name.ends_with(".S") || name.ends_with(".A") ||
                           name.ends_with(".KT");
        BOOST_TEST_CONTEXT(name) { BOOST_TEST(!fl.values[v] == score); }
        dropped += score;
    }
    BOOST_TEST(dropped == 16u);
    const Gradients gl = ex.backward(g, fl), ga = ex.backward(g, fa);
    for (const auto& v : g.values())
        if (v.data) BOOST_TEST_CONTEXT(v.name) { BOOST_TEST(same_bits(gl.at(v.name), ga.at(v.name))); }
}

BOOST_AUTO_TEST_CASE(mha_graph_fused_backward_matches_the_per_node_backward) {
    // projections grouped (one wide dX GEMM), attention fused and recomputed, against the
    // plain per-node backward over a keep_all forward (f32, relative to each gradient's scale)
    const Graph g = per_head_mha(150, 48, 3);
    Executor ex(2);
    const Gradients fused = ex.backward(g, ex.run(g, for_backward()));
    const Gradients plain = ex.backward(g, ex.run(g, test::keep_all()), {}, {}, {}, /*fuse=*/false);
    for (const auto& v : g.values())
        // (dL/dbk is 0 but for rounding: a bias on every key shifts a row's scores alike)
        if (v.data && !v.name.ends_with(".bk")) BOOST_TEST_CONTEXT(v.name) {
                const Tensor& want = plain.at(v.name);
                std::vector<double> w(want.size());
                for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
                BOOST_TEST(rel_error(fused.at(v.name), w) <= 2e-5);
            }
}

// ---- masked chains: Scale, maybe ALiBi, maybe softcapping, then Mask (a pattern and/or a boolean
// tensor), maybe a Scale after, maybe gpt-oss's sink column in the softmax

namespace {

struct MaskCase {
    Case c;
    std::string pattern{};          // "", causal, window, padding
    int offset = 0;                 // causal/window: keys before query 0
    bool from_end = false;          // causal: offset m - n
    int window = 0;
    bool window_causal = false;
    std::vector<int> lengths{};     // padding: keys per sequence (axis 0)
    Shape keep{};                   // a boolean mask tensor of this shape (broadcast to the scores); empty: none
    double after = 1.0;             // a Scale after the Mask (1: none)
    std::vector<double> alibi{};    // an ALiBi bias's slopes, one per head (axis -3), between Scale and Mask
    int alibi_offset = 0;
    double softcap = 0;             // > 0: Gemma 2's cap·tanh(S / cap) after the ALiBi bias, before the Mask
    std::vector<double> sinks{};    // gpt-oss's sink logits, one per head (axis -3), as the sinks variant
    // the Differential Transformer (the diff variant): Q and K (..., 2, n, d) hold the two maps,
    // V (..., 1, m, dv); lambda one (shape (1)) or one per head (axis -4: shape (h, 1, 1, 1))
    std::vector<double> lambda{};
    // a bias added after the Scale (and the ALiBi bias), before the cap and the Mask, as
    // FlexAttention's score_mods: "tensor" a (h, n, m) parameter (broadcast over axis 0);
    // "gather" T5's relative positions, Gather(table (h, n + m - 1), i - j + m - 1) along the
    // table's last axis (every other index written negative, counted from the table's end); "mul" attention-gym's ALiBi, Mul(slopes (h, 1, 1), j - i (n, m))
    std::string bias{};
    bool additive = false;  // the keep tensor as an additive mask: 0 where kept, -inf where dropped
    // values written into Q's, K's or V's random data: {name, flat index, value} (NaN, ±inf)
    struct Poke {
        std::string input;
        std::size_t at = 0;
        double value = 0;
    };
    std::vector<Poke> pokes{};
};

// the added bias's operands, as masked_graph makes them (f64)
struct BiasOperands {
    Tensor first, second;  // the tensor, the table or the slopes; the Gather's indices or j - i
};

BiasOperands bias_operands(const MaskCase& mc) {
    const std::size_t h = mc.c.q.end()[-3], n = mc.c.q.end()[-2], m = mc.c.k.end()[-2];
    BiasOperands o;
    if (mc.bias == "tensor") o.first = graphs::random_tensor({h, n, m}, DType::f64, 7, 0.5);
    if (mc.bias == "gather") o.first = graphs::random_tensor({h, n + m - 1}, DType::f64, 8, 0.5);
    if (mc.bias == "mul") {
        o.first = zeros(DType::f64, {h, 1, 1});
        for (std::size_t k = 0; k < h; ++k) o.first.as<double>().data()[k] = 0.25 / static_cast<double>(k + 1);
    }
    if (mc.bias == "gather" || mc.bias == "mul") {
        o.second = zeros(DType::f64, {n, m});
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j)
                o.second.as<double>().data()[i * m + j] =
                    mc.bias == "mul"    ? static_cast<double>(j) - static_cast<double>(i)
                    : (i + j) % 2 == 0 ? static_cast<double>(i + m - 1 - j)
                                       : static_cast<double>(i + m - 1 - j) - static_cast<double>(n + m - 1);
    }
    return o;
}

// the tensor's keep value at (i, j) of its last two axes: about 7 keys in 10, and none for
// query row 3 (a fully masked row) when the tensor has query rows; with an axis -3 (the
// Differential Transformer's maps), its matrix 1 keeps no key past 3/5 of the row (the two
// maps' key spans differ)
bool keep_value(const Shape& keep, std::size_t lead, std::size_t i, std::size_t j) {
    if (keep.end()[-2] > 1 && i == 3) return false;
    if (lead == 1 && j * 5 >= keep.back() * 3) return false;
    return (i * 7 + j * 13) % 10 < 7;
}

// the index along the keep tensor's axis -3 of element e, or of Q's matrix b (0: no such axis)
std::size_t keep_lead(const Shape& keep, std::size_t matrix) {
    return keep.size() >= 3 && keep.end()[-3] > 1 ? matrix % keep.end()[-3] : 0;
}

Tensor keep_tensor(const Shape& shape, DType dtype) {
    Tensor t = zeros(DType::f64, shape);
    const std::size_t rows = shape.end()[-2], cols = shape.back();
    for (std::size_t e = 0; e < t.size(); ++e)
        if (keep_value(shape, keep_lead(shape, e / (rows * cols)), rows > 1 ? (e / cols) % rows : 0, e % cols))
            t.as<double>().data()[e] = 1.0;
    return t.cast(dtype);
}

Graph masked_graph(const MaskCase& mc, DType dtype) {
    const Case& c = mc.c;
    GraphBuilder g("masked_attention", dtype);
    Tensor qt = graphs::random_tensor(c.q, dtype, 1, 2.0), kt = graphs::random_tensor(c.k, dtype, 2, 2.0),
           vt = graphs::random_tensor(c.v, dtype, 3);
    for (const MaskCase::Poke& p : mc.pokes) {
        Tensor& t = p.input == "Q" ? qt : p.input == "K" ? kt : vt;
        if (dtype == DType::f64)
            t.as<double>().data()[p.at] = p.value;
        else
            t.as<float>().data()[p.at] = static_cast<float>(p.value);
    }
    Value q = g.input("Q", qt), k = g.input("K", kt), v = g.input("V", vt);
    const Value s_raw = matmul(q, transpose(k)).named("S_raw");
    Value s = scale(s_raw, factor_of(c)).named("S");
    if (!mc.alibi.empty()) {
        Tensor slopes = zeros(DType::f64, {mc.alibi.size()});
        for (std::size_t h = 0; h < mc.alibi.size(); ++h) slopes.as<double>()(h) = mc.alibi[h];
        s = alibi(s, g.param("alibi_slopes", slopes.cast(dtype)), mc.alibi_offset).named("S_alibi");
    }
    if (!mc.bias.empty()) {
        const BiasOperands o = bias_operands(mc);
        Value bias;
        if (mc.bias == "tensor") bias = g.param("bias", o.first.cast(dtype));
        if (mc.bias == "gather") bias = gather(g.param("rel_table", o.first.cast(dtype)), g.input("rel_index", o.second.cast(dtype)), -1);
        if (mc.bias == "mul") bias = mul(g.param("bias_slopes", o.first.cast(dtype)), g.input("distance", o.second.cast(dtype)));
        if (mc.bias != "tensor") bias = bias.named("bias_value");
        s = add(s, bias).named("S_bias");
    }
    if (mc.softcap > 0)  // as graphs/flex_mods.hpp's softcap
        s = scale(tanh(scale(s, 1.0 / mc.softcap).named("S_div")).named("S_tanh"), mc.softcap).named("S_capped");
    if (!mc.keep.empty()) {
        Tensor t = keep_tensor(mc.keep, DType::f64);
        if (mc.additive)
            for (double& x : t.as<double>()) x = x != 0.0 ? 0.0 : -INFINITY;
        Value keep = g.input("keep", t.cast(dtype));
        s = mask_tensor(s, keep, mc.additive, mc.pattern == "causal", mc.from_end ? causal_from_end : mc.offset);
    } else if (mc.pattern == "causal") {
        s = mask_causal(s, mc.from_end ? causal_from_end : mc.offset);
    } else if (mc.pattern == "window") {
        s = mask_window(s, mc.window, mc.window_causal);
    } else {
        s = mask_padding(s, mc.lengths);
    }
    s = s.named("S_masked");
    if (mc.after != 1.0) s = scale(s, mc.after).named("S_after");
    Value a;
    if (!mc.sinks.empty()) {  // as graphs/variants.cpp builds it
        Tensor logits = zeros(DType::f64, {mc.sinks.size()});
        for (std::size_t h = 0; h < mc.sinks.size(); ++h) logits.as<double>()(h) = mc.sinks[h];
        Value heads = reshape(g.param("sinks", logits.cast(dtype)), {-1, 1, 1}).named("sinks_heads");
        Value first = slice(s_raw, -1, 0, 1).named("S_first");
        Value column = add(scale(first, 0.0).named("zero_column"), heads).named("S_sink");
        Value a_sinks = softmax(concat({s, column}, -1).named("S_sinks")).named("A_sinks");
        a = slice(a_sinks, -1, 0, -1).named("A");
    } else {
        a = softmax(s).named("A");
    }
    if (!mc.lambda.empty()) {  // as graphs/variants.cpp builds it
        const Shape shape = mc.lambda.size() == 1 ? Shape{1} : Shape{mc.lambda.size(), 1, 1, 1};
        Tensor lambda = zeros(DType::f64, shape);
        for (std::size_t h = 0; h < mc.lambda.size(); ++h) lambda.as<double>().data()[h] = mc.lambda[h];
        const std::vector<Value> maps = split(a, 2, -3, "A_split");
        a = sub(maps[0], mul(maps[1], g.param("lambda", lambda.cast(dtype))).named("A_2_weighted")).named("A_diff");
    }
    g.output(matmul(a, v).named("Y"));
    return g.build();
}

Keep keep_of(const MaskCase& mc) {
    const std::size_t n = mc.c.q.end()[-2], m = mc.c.k.end()[-2];
    const std::size_t batches = element_count(Shape(mc.c.q.begin(), mc.c.q.end() - 2));
    return [=](std::size_t b, std::size_t i, std::size_t j) {
        const long p = static_cast<long>(i) + (mc.from_end ? static_cast<long>(m) - static_cast<long>(n) : mc.offset);
        const long jj = static_cast<long>(j);
        if (!mc.keep.empty() && !keep_value(mc.keep, keep_lead(mc.keep, b), mc.keep.end()[-2] > 1 ? i : 0, j))
            return false;
        if (mc.pattern == "causal") return jj <= p;
        if (mc.pattern == "window")
            return mc.window_causal ? (p - jj >= 0 && p - jj < mc.window) : std::abs(p - jj) < mc.window;
        if (mc.pattern == "padding") return jj < mc.lengths[b / (batches / mc.c.q[0])];
        return true;
    };
}

const std::vector<MaskCase> masked_cases = {
    // causal over several ragged blocks; a decode-style offset from the end (cross lengths)
    {.c = {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true}, .pattern = "causal"},
    {.c = {{3, 70, 12}, {3, 300, 12}, {3, 300, 20}, true}, .pattern = "causal", .from_end = true},
    // a window both ways, and a causal window over steps of several blocks
    {.c = {{2, 300, 8}, {2, 300, 8}, {2, 300, 8}, true}, .pattern = "window", .window = 40},
    {.c = {{1, 700, 8}, {1, 700, 8}, {1, 700, 8}, true}, .pattern = "window", .window = 64, .window_causal = true},
    // padded keys, the second sequence with none (every row fully masked)
    {.c = {{2, 3, 150, 8}, {2, 3, 150, 8}, {2, 3, 150, 8}, true}, .pattern = "padding", .lengths = {90, 0}},
    // a boolean tensor with a fully masked row, and causal on top; a key padding row (1, m)
    {.c = {{2, 150, 8}, {2, 150, 8}, {2, 150, 8}, true}, .pattern = "causal", .keep = {150, 150}},
    {.c = {{2, 140, 8}, {2, 140, 8}, {2, 140, 8}, true}, .keep = {1, 140}},
    // a second Scale after the Mask; GQA shapes under a causal mask; many keys (one-block steps)
    {.c = {{2, 150, 8}, {2, 150, 8}, {2, 150, 8}, true}, .pattern = "causal", .offset = 5, .after = 0.5},
    {.c = {{2, 2, 2, 150, 8}, {2, 2, 1, 150, 8}, {2, 2, 1, 150, 8}, true}, .pattern = "causal"},
    {.c = {{1, 300, 8}, {1, 2100, 8}, {1, 2100, 8}, true}, .pattern = "causal", .from_end = true},
    // ALiBi under a causal mask (the alibi variant); with an offset, a window and a Scale after
    {.c = {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true}, .pattern = "causal", .alibi = {0.5, 0.25, 0.125}},
    {.c = {{2, 2, 300, 8}, {2, 2, 300, 8}, {2, 2, 300, 8}, true},
     .pattern = "window",
     .window = 40,
     .after = 0.5,
     .alibi = {0.3, 0.05},
     .alibi_offset = 5},
    // softcapping (the softcap variant) under a causal mask with a cap that bends the scores
    // (|z| up to about 4 against 3); a window, an ALiBi bias before and a Scale after; GQA
    {.c = {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true}, .pattern = "causal", .softcap = 3.0},
    {.c = {{2, 2, 300, 8}, {2, 2, 300, 8}, {2, 2, 300, 8}, true},
     .pattern = "window",
     .window = 40,
     .after = 0.5,
     .alibi = {0.3, 0.05},
     .softcap = 2.0},
    {.c = {{2, 2, 2, 150, 8}, {2, 2, 1, 150, 8}, {2, 2, 1, 150, 8}, true}, .pattern = "causal", .softcap = 1.5},
    // gpt-oss's sinks (the sinks variant) under a causal mask; a causal window (rows whose keys
    // leave out key 0, which S_first reads); padding with a sequence of no keys (the sink takes
    // every row's weight); softcapping and GQA with sinks
    {.c = {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true}, .pattern = "causal", .sinks = {0.5, -1.0, 2.0}},
    {.c = {{1, 2, 700, 8}, {1, 2, 700, 8}, {1, 2, 700, 8}, true},
     .pattern = "window",
     .window = 64,
     .window_causal = true,
     .sinks = {1.0, -0.5}},
    {.c = {{2, 3, 150, 8}, {2, 3, 150, 8}, {2, 3, 150, 8}, true},
     .pattern = "padding",
     .lengths = {90, 0},
     .sinks = {0.25, 0.0, -2.0}},
    {.c = {{2, 2, 2, 150, 8}, {2, 2, 1, 150, 8}, {2, 2, 1, 150, 8}, true},
     .pattern = "causal",
     .softcap = 2.0,
     .sinks = {0.3, 1.5}},
    // the Differential Transformer (the diff variant: causal, one lambda); a causal window over
    // steps of several blocks with a lambda per head; padding with a sequence of no keys and
    // softcapping; cross lengths from the end with a negative lambda; a boolean tensor that
    // gives the two maps different key spans (their union is computed), causal on top
    {.c = {{2, 3, 2, 200, 16}, {2, 3, 2, 200, 16}, {2, 3, 1, 200, 16}, true}, .pattern = "causal", .lambda = {0.2}},
    {.c = {{1, 2, 2, 700, 8}, {1, 2, 2, 700, 8}, {1, 2, 1, 700, 8}, true},
     .pattern = "window",
     .window = 64,
     .window_causal = true,
     .lambda = {0.3, 0.7}},
    {.c = {{2, 2, 2, 150, 8}, {2, 2, 2, 150, 8}, {2, 2, 1, 150, 8}, true},
     .pattern = "padding",
     .lengths = {90, 0},
     .softcap = 2.0,
     .lambda = {0.8}},
    {.c = {{3, 2, 70, 12}, {3, 2, 300, 12}, {3, 1, 300, 20}, true},
     .pattern = "causal",
     .from_end = true,
     .lambda = {0.5, -0.25, 1.0}},
    {.c = {{2, 2, 150, 8}, {2, 2, 150, 8}, {2, 1, 150, 8}, true}, .pattern = "causal", .keep = {2, 150, 150}, .lambda = {0.4}},
    // an added bias (FlexAttention's score_mods): a (h, n, m) tensor read by both sequences
    // under a causal mask; T5's relative positions through a Gather over several blocks with
    // a window; attention-gym's ALiBi through a Mul, with softcapping after it
    {.c = {{2, 3, 200, 16}, {2, 3, 200, 16}, {2, 3, 200, 16}, true}, .pattern = "causal", .bias = "tensor"},
    {.c = {{1, 2, 300, 8}, {1, 2, 300, 8}, {1, 2, 300, 8}, true}, .pattern = "window", .window = 40, .bias = "gather"},
    {.c = {{2, 2, 150, 8}, {2, 2, 150, 8}, {2, 2, 150, 8}, true}, .pattern = "causal", .softcap = 2.0, .bias = "mul"},
    // additive mask tensors (ONNX's float attn_mask), whose gradient is dS where they keep a
    // key: a causal one with a fully masked row, and a key padding row shared by every row
    {.c = {{2, 150, 8}, {2, 150, 8}, {2, 150, 8}, true}, .pattern = "causal", .keep = {150, 150}, .additive = true},
    {.c = {{2, 140, 8}, {2, 140, 8}, {2, 140, 8}, true}, .keep = {1, 140}, .additive = true},
};

// the gradients every masked case is checked on: Q, K, V, and the ALiBi slopes and the sink
// logits when there are
std::vector<std::string> grad_names(const MaskCase& mc) {
    std::vector<std::string> names{"Q", "K", "V"};
    if (!mc.alibi.empty()) names.emplace_back("alibi_slopes");
    if (!mc.sinks.empty()) names.emplace_back("sinks");
    if (!mc.lambda.empty()) names.emplace_back("lambda");
    if (mc.bias == "tensor") names.emplace_back("bias");
    if (mc.bias == "gather") names.emplace_back("rel_table");
    if (mc.bias == "mul") names.insert(names.end(), {"bias_slopes", "distance"});
    if (mc.additive) names.emplace_back("keep");
    return names;
}

// the plain loop's view of the added bias, from the graph's own operands (cast to f64)
AddedBias added_of(const MaskCase& mc, const Graph& g) {
    AddedBias ab;
    if (mc.additive) {  // the mask adds 0 where it keeps a key; its gradient there is dz
        const Shape k = mc.keep;
        const std::size_t rows = k.end()[-2], cols = k.back();
        ab.value = [](std::size_t, std::size_t, std::size_t) { return 0.0; };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[(keep_lead(k, b) * rows + (rows > 1 ? i : 0)) * cols + j] += dz;
        };
        ab.sizes[0] = element_count(k);
        return ab;
    }
    if (mc.bias.empty()) return ab;
    const std::size_t h = mc.c.q.end()[-3], n = mc.c.q.end()[-2], m = mc.c.k.end()[-2], len = n + m - 1;
    auto data = [&](const std::string& name) {
        return std::make_shared<Tensor>(g.values()[static_cast<std::size_t>(g.at(name))].data->cast(DType::f64));
    };
    if (mc.bias == "tensor") {
        const auto t = data("bias");
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) { return t->at_flat(((b % h) * n + i) * m + j); };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[((b % h) * n + i) * m + j] += dz;
        };
        ab.sizes[0] = h * n * m;
    } else if (mc.bias == "gather") {
        const auto t = data("rel_table");
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) { return t->at_flat((b % h) * len + i + m - 1 - j); };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[(b % h) * len + i + m - 1 - j] += dz;
        };
        ab.sizes[0] = h * len;
    } else {
        const auto slopes = data("bias_slopes");
        auto dist = [](std::size_t i, std::size_t j) { return static_cast<double>(j) - static_cast<double>(i); };
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) { return slopes->at_flat(b % h) * dist(i, j); };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[b % h] += dz * dist(i, j);
            r.dmultiplier[i * m + j] += dz * slopes->at_flat(b % h);
        };
        ab.sizes[0] = h;
        ab.sizes[1] = n * m;
    }
    return ab;
}

}  // namespace

BOOST_DATA_TEST_CASE(masked_fused_backward_matches_a_plain_loop_reference, bdata::xrange(masked_cases.size()), ci) {
    const MaskCase& mc = masked_cases[ci];
    const Graph g = masked_graph(mc, DType::f32);
    const Run fused = run_backward(g, Mode::untraced, 2, grad_names(mc));
    const Run plain = run_backward(g, Mode::plain, 2, grad_names(mc));
    auto data = [&](const std::string& name) {
        return g.values()[static_cast<std::size_t>(g.at(name))].data->cast(DType::f64);
    };
    const Reference ref =
        reference(mc.c, data("Q"), data("K"), data("V"), grad_of_y(g, DType::f32).cast(DType::f64), keep_of(mc),
                  mc.after, {mc.alibi, mc.alibi_offset}, mc.softcap, mc.sinks, mc.lambda, added_of(mc, g));
    for (const Run* r : {&fused, &plain}) BOOST_TEST_CONTEXT((r == &fused ? "fused" : "plain")) {
            BOOST_TEST(rel_error(r->grads.at("Q"), ref.dq) <= 2e-5);
            BOOST_TEST(rel_error(r->grads.at("K"), ref.dk) <= 2e-5);
            BOOST_TEST(rel_error(r->grads.at("V"), ref.dv) <= 2e-5);
            if (!mc.alibi.empty()) BOOST_TEST(rel_error(r->grads.at("alibi_slopes"), ref.dslopes) <= 2e-5);
            if (!mc.sinks.empty()) BOOST_TEST(rel_error(r->grads.at("sinks"), ref.dsinks) <= 2e-5);
            if (!mc.lambda.empty()) BOOST_TEST(rel_error(r->grads.at("lambda"), ref.dlambda) <= 2e-5);
            if (!mc.bias.empty() || mc.additive) {
                const std::vector<std::string> names = grad_names(mc);
                BOOST_TEST(rel_error(r->grads.at(names[3]), ref.dbias) <= 2e-5);
                if (mc.bias == "mul") BOOST_TEST(rel_error(r->grads.at("distance"), ref.dmultiplier) <= 2e-5);
            }
        }
    // the fused backward ran: the untraced forward kept none of the n×m values
    for (const char* name : {"S_raw", "S", "S_alibi", "S_div", "S_tanh", "S_capped", "S_masked", "S_sinks", "A_sinks", "A",
                             "A_split:0", "A_split:1", "A_2_weighted", "A_diff", "S_bias", "bias_value"})
        if (g.find(name) >= 0) BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at(name))], name);
}

BOOST_DATA_TEST_CASE(masked_fused_backward_bit_identical_for_any_thread_count,
                     bdata::xrange(masked_cases.size()) * bdata::make({0, 1}), ci, f64) {
    const MaskCase& mc = masked_cases[ci];
    const Graph g = masked_graph(mc, f64 ? DType::f64 : DType::f32);
    const Run one = run_backward(g, Mode::untraced, 1, grad_names(mc));
    for (int threads : {2, 4}) {
        const Run many = run_backward(g, Mode::untraced, threads, grad_names(mc));
        for (const std::string& name : grad_names(mc)) BOOST_TEST_CONTEXT(name << " at " << threads << " threads") {
                BOOST_TEST(same_bits(one.grads.at(name), many.grads.at(name)));
            }
    }
}

// The step's parameters (ALiBi slopes, sinks, lambda, a bias's operands, an additive mask)
// asked for alone, or with V only: none of Q's and K's gradients is wanted, yet dS is made for
// them, and they get the bits they get along with Q, K and V.
BOOST_DATA_TEST_CASE(masked_fused_backward_of_the_parameters_alone, bdata::xrange(masked_cases.size()), ci) {
    const MaskCase& mc = masked_cases[ci];
    const std::vector<std::string> all = grad_names(mc);
    const std::vector<std::string> params(all.begin() + 3, all.end());
    if (params.empty()) return;
    const Graph g = masked_graph(mc, DType::f32);
    const Run full = run_backward(g, Mode::untraced, 2, all);
    std::vector<std::string> with_v = params;
    with_v.emplace_back("V");
    for (const auto& wrt : {params, with_v}) {
        const Run alone = run_backward(g, Mode::untraced, 2, wrt);
        for (const std::string& name : wrt) BOOST_TEST_CONTEXT(name << " of " << wrt.size()) {
                BOOST_TEST(same_bits(alone.grads.at(name), full.grads.at(name)));
                double largest = 0;  // (not the zeros of a step that skipped dS)
                for (std::size_t e = 0; e < alone.grads.at(name).size(); ++e)
                    largest = std::max(largest, std::abs(alone.grads.at(name).at_flat(e)));
                BOOST_TEST(largest > 0.0);
            }
    }
}

BOOST_DATA_TEST_CASE(masked_traced_and_untraced_backward_agree_bitwise, bdata::xrange(masked_cases.size()), ci) {
    const MaskCase& mc = masked_cases[ci];
    const Graph g = masked_graph(mc, DType::f32);
    const Run untraced = run_backward(g, Mode::untraced, 2, grad_names(mc));
    const Run traced = run_backward(g, Mode::traced, 2, {});  // every value, as `grad --trace`
    BOOST_TEST(traced.forward.values[static_cast<std::size_t>(g.at("A"))]);
    for (const std::string& name : grad_names(mc)) BOOST_TEST_CONTEXT(name) {
            // a bias made by a Gather or a Mul: traced, the forward keeps it and the Gather's or
            // the Mul's own backward sums its operands' gradients, in another order than the
            // step that read the bias through them untraced (dQ, dK, dV stay bitwise)
            const bool folded = name == "rel_table" || name == "bias_slopes" || name == "distance";
            if (!folded) {
                BOOST_TEST(same_bits(untraced.grads.at(name), traced.grads.at(name)));
                continue;
            }
            const Tensor& want = traced.grads.at(name);
            std::vector<double> w(want.size());
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
            BOOST_TEST(rel_error(untraced.grads.at(name), w) <= 2e-5);  // f32 sums of n·m terms, as against f64
        }
}

BOOST_DATA_TEST_CASE(masked_traced_intermediate_gradients_match_the_plain_backward,
                     bdata::xrange(masked_cases.size()), ci) {
    // every value requested: the fused step writes dA (whole rows, masked keys too), the
    // chain's gradients, dS_raw, and the mask tensor's (0)
    const MaskCase& mc = masked_cases[ci];
    const Graph g = masked_graph(mc, DType::f64);
    const Run fused = run_backward(g, Mode::traced, 2, {});
    const Run plain = run_backward(g, Mode::plain, 2, {});
    for (const auto& v : g.values()) BOOST_TEST_CONTEXT(v.name) {
            const Tensor& want = plain.grads.at(v.name);
            const Tensor& got = fused.grads.at(v.name);
            BOOST_REQUIRE(got.shape() == want.shape());
            double err = 0, scale = 0;
            for (std::size_t i = 0; i < want.size(); ++i) {
                err = std::max(err, std::abs(got.at_flat(i) - want.at_flat(i)));
                scale = std::max(scale, std::abs(want.at_flat(i)));
            }
            BOOST_TEST(err <= 1e-12 * std::max(scale, 1e-300));
        }
}

BOOST_DATA_TEST_CASE(folded_bias_gradient_asked_for_untraced, bdata::make({"gather", "mul"}), kind) {
    // a bias the step reads through its Gather or Mul is not kept untraced; its gradient, when
    // asked for, is the step's dS summed over the bias's broadcast, as the Add's backward
    MaskCase mc{.c = {{2, 2, 150, 8}, {2, 2, 150, 8}, {2, 2, 150, 8}, true}, .pattern = "causal", .bias = kind};
    const Graph g = masked_graph(mc, DType::f64);
    std::vector<std::string> wrt = grad_names(mc);
    wrt.emplace_back("bias_value");
    const Run fused = run_backward(g, Mode::untraced, 2, wrt);
    const Run plain = run_backward(g, Mode::plain, 2, wrt);
    BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at("bias_value"))]);
    for (const std::string& name : wrt) BOOST_TEST_CONTEXT(name) {
            const Tensor& want = plain.grads.at(name);
            std::vector<double> w(want.size());
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
            BOOST_TEST(rel_error(fused.grads.at(name), w) <= 1e-12);
        }
}

BOOST_DATA_TEST_CASE(masked_fused_backward_gradchecks_in_f64, bdata::xrange(masked_cases.size()), ci) {
    MaskCase mc = masked_cases[ci];
    if (!mc.keep.empty()) return;  // a boolean tensor's 0 and 1 are not a differentiable input
    for (Shape* s : {&mc.c.q, &mc.c.k, &mc.c.v}) s->end()[-2] = std::min<std::size_t>(s->end()[-2], 7);
    if (mc.pattern == "window") mc.window = std::min(mc.window, 3);
    for (int& l : mc.lengths) l = std::min(l, 4);
    const Graph g = masked_graph(mc, DType::f64);
    const GradcheckResult r = gradcheck(g, GradcheckOptions{});
    BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
}

// ---- the Attention composite (ONNX's op) with GQA: Reshapes of the batch axes in the step

namespace {

// Q (2, 4, n, 8), K and V (2, 2, n, 8): the composite views Q as (2, 2, 2, n, 8), KT as
// (2, 2, 1, 8, n), S_raw back as (2, 4, n, n) and A as (2, 2, 2, n, n); its output Y is
// (2, 4, n, 8). The plain loop's view: Q (2, 2, 2, n, 8), K and V (2, 2, 1, n, 8), the same
// elements.
const std::size_t composite_n = 150;
const Case composite_view{{2, 2, 2, composite_n, 8}, {2, 2, 1, composite_n, 8}, {2, 2, 1, composite_n, 8}, true};

Graph composite_graph(DType dtype, bool causal, double softcap) {
    GraphBuilder g("composite", dtype);
    AttentionInputs in;
    in.q = g.input("Q", graphs::random_tensor({2, 4, composite_n, 8}, dtype, 1, 2.0));
    in.k = g.input("K", graphs::random_tensor({2, 2, composite_n, 8}, dtype, 2, 2.0));
    in.v = g.input("V", graphs::random_tensor({2, 2, composite_n, 8}, dtype, 3));
    AttentionAttrs a;
    a.is_causal = causal ? 1 : 0;
    a.softcap = softcap;
    g.output(attention("attn", in, a).y.named("Y"));
    return g.build();
}

}  // namespace

BOOST_DATA_TEST_CASE(composite_gqa_fused_backward, bdata::make({0, 1}) * bdata::make({0.0, 2.0}), causal, softcap) {
    const Graph g = composite_graph(DType::f32, causal, softcap);
    const Run fused = run_backward(g, Mode::untraced, 2);
    const Run plain = run_backward(g, Mode::plain, 2);
    auto data = [&](const std::string& name) {
        return g.values()[static_cast<std::size_t>(g.at(name))].data->cast(DType::f64);
    };
    const Keep keep = causal ? Keep([](std::size_t, std::size_t i, std::size_t j) { return j <= i; }) : Keep{};
    const Reference ref = reference(composite_view, data("Q"), data("K"), data("V"), grad_of_y(g, DType::f32).cast(DType::f64),
                                    keep, 1.0, {}, softcap);
    for (const Run* r : {&fused, &plain}) BOOST_TEST_CONTEXT((r == &fused ? "fused" : "plain")) {
            BOOST_TEST(rel_error(r->grads.at("Q"), ref.dq) <= 2e-5);
            BOOST_TEST(rel_error(r->grads.at("K"), ref.dk) <= 2e-5);
            BOOST_TEST(rel_error(r->grads.at("V"), ref.dv) <= 2e-5);
        }
    // the fused backward ran: the untraced forward kept none of the n×m values
    for (const char* name : {"attn.S_raw_groups", "attn.S_raw", "attn.S", "attn.A", "attn.A_groups"})
        if (g.find(name) >= 0) BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at(name))], name);
    // bit-identical for any thread count, and traced (every value asked for) as untraced
    const Run one = run_backward(g, Mode::untraced, 1);
    const Run four = run_backward(g, Mode::untraced, 4);
    const Run traced = run_backward(g, Mode::traced, 2, {});
    for (const char* name : {"Q", "K", "V"}) BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(same_bits(one.grads.at(name), fused.grads.at(name)));
            BOOST_TEST(same_bits(four.grads.at(name), fused.grads.at(name)));
            BOOST_TEST(same_bits(traced.grads.at(name), fused.grads.at(name)));
        }
}

BOOST_DATA_TEST_CASE(composite_gqa_traced_intermediate_gradients_match_the_plain_backward, bdata::make({0, 1}), causal) {
    const Graph g = composite_graph(DType::f64, causal, 0.0);
    const Run fused = run_backward(g, Mode::traced, 2, {});
    const Run plain = run_backward(g, Mode::plain, 2, {});
    for (const auto& v : g.values()) BOOST_TEST_CONTEXT(v.name) {
            const Tensor& want = plain.grads.at(v.name);
            std::vector<double> w(want.size());
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
            BOOST_TEST(rel_error(fused.grads.at(v.name), w) <= 1e-12);
        }
}

// ONNX Attention's weights output (qk_matmul_output_mode 3, GQA): A is a graph output with a
// seed of its own; the fused backward gives the plain nodes' gradients (f64)
BOOST_DATA_TEST_CASE(composite_gqa_weights_output, bdata::make({0, 1}), causal) {
    GraphBuilder gb("composite_weights", DType::f64);
    AttentionInputs in;
    in.q = gb.input("Q", graphs::random_tensor({2, 4, composite_n, 8}, DType::f64, 1, 2.0));
    in.k = gb.input("K", graphs::random_tensor({2, 2, composite_n, 8}, DType::f64, 2, 2.0));
    in.v = gb.input("V", graphs::random_tensor({2, 2, composite_n, 8}, DType::f64, 3));
    AttentionAttrs a;
    a.is_causal = causal ? 1 : 0;
    a.qk_matmul_output_mode = 3;
    AttentionOutputs out = attention("attn", in, a);
    gb.output(out.y.named("Y"));
    gb.output(out.qk);
    const Graph g = gb.build();
    const std::string weights = g.value(g.outputs()[1]).name;
    const std::map<std::string, Tensor> seeds{
        {"Y", grad_of_y(g, DType::f64)}, {weights, graphs::random_tensor(g.value(g.outputs()[1]).shape, DType::f64, 6)}};
    auto backward_of = [&](bool untraced, bool fuse) {
        Executor ex(2);
        RunOptions o;
        o.keep_for_backward = untraced;
        o.keep_all = !untraced;
        return ex.backward(g, ex.run(g, o), seeds, {"Q", "K", "V"}, {}, fuse);
    };
    const Gradients fused = backward_of(true, true), plain = backward_of(false, false);
    BOOST_TEST(!fused.seconds().contains("attn.A"));  // the Softmax ran inside the fused step
    BOOST_TEST(plain.seconds().contains("attn.A"));
    for (const char* name : {"Q", "K", "V"}) {
        const Tensor& want = plain.at(name);
        std::vector<double> w(want.size());
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
        BOOST_TEST(rel_error(fused.at(name), w) <= 1e-12, name);
    }
}

BOOST_AUTO_TEST_CASE(composite_gqa_views_asked_for_untraced) {
    // untraced (KT, KT_groups, A_groups folded into the step, not kept), their gradients asked
    // for: KT's is dKᵀ, its view KT_groups' the same elements, A_groups' A's
    const Graph g = composite_graph(DType::f64, true, 0.0);
    const std::vector<std::string> wrt{"Q", "K", "V", "attn.KT", "attn.KT_groups", "attn.A_groups"};
    const Run fused = run_backward(g, Mode::untraced, 2, wrt);
    const Run plain = run_backward(g, Mode::plain, 2, wrt);
    for (const char* name : {"attn.KT", "attn.KT_groups", "attn.A_groups"})
        BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at(name))], name);
    for (const std::string& name : wrt) BOOST_TEST_CONTEXT(name) {
            const Tensor& want = plain.grads.at(name);
            std::vector<double> w(want.size());
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = want.at_flat(i);
            BOOST_TEST(rel_error(fused.grads.at(name), w) <= 1e-12);
        }
}

// A model that returns its attention weights (A a graph output, as Hugging Face's
// output_attentions): the fused backward starts A's gradient from A's seed, as the plain
// nodes' backward does. K and V hold NaN at the padded keys, which the fused backward now
// multiplies by their 0 as the plain one does (dQ NaN; rel_error passes NaN by). With a causal window over 700 rows,
// the second step's rows (512..) see keys from 473 on: A's seed before them joins A's traced gradient too.
BOOST_AUTO_TEST_CASE(attention_weights_as_an_output) {
    struct Form {
        std::size_t n;
        std::vector<int> lengths;
        bool causal;
        int window;  // 0: none; else causal keys i - window < j <= i
    };
    for (const Form& f :
         {Form{300, {170, 260}, false, 0}, Form{300, {170, 260}, true, 0}, Form{700, {700, 600}, false, 40}})
        BOOST_TEST_CONTEXT("n " << f.n << ", causal " << f.causal << ", window " << f.window) {
            const std::size_t n = f.n, m = f.n, d = 8;
            const Case c{{2, 2, n, d}, {2, 2, m, d}, {2, 2, m, d}, true};
            const std::vector<int>& lengths = f.lengths;
            auto poisoned = [&](std::uint64_t seed, double scale_, bool nan) {
                Tensor t = graphs::random_tensor(c.k, DType::f64, seed, scale_);
                for (std::size_t b = 0; b < 4 && nan; ++b)
                    for (std::size_t j = static_cast<std::size_t>(lengths[b / 2]); j < m; ++j)
                        for (std::size_t e = 0; e < d; ++e) t.as<double>().data()[(b * m + j) * d + e] = std::nan("");
                return t;
            };
            auto graph = [&](DType dtype, bool nan, bool a_output) {
                GraphBuilder gb("weights_out", dtype);
                Value q = gb.input("Q", graphs::random_tensor(c.q, DType::f64, 1, 2.0).cast(dtype));
                Value k = gb.input("K", poisoned(2, 2.0, nan).cast(dtype)),
                      v = gb.input("V", poisoned(3, 1.0, nan).cast(dtype));
                Value s = mask_padding(scale(matmul(q, transpose(k)).named("S_raw"), factor_of(c)).named("S"), lengths)
                              .named("S_padded");
                if (f.causal) s = mask_causal(s).named("S_masked");
                if (f.window) s = mask_window(s, f.window, true).named("S_masked");
                Value a = softmax(s).named("A");
                gb.output(matmul(a, v).named("Y"));
                if (a_output) gb.output(a);
                return gb.build();
            };
            auto keep = [&](std::size_t b, std::size_t i, std::size_t j) {
                const bool in_window = f.window == 0 || (j <= i && i - j < static_cast<std::size_t>(f.window));
                return j < static_cast<std::size_t>(lengths[b / 2]) && (!f.causal || j <= i) && in_window;
            };
            const Tensor grad_y = graphs::random_tensor({2, 2, n, d}, DType::f64, 4);
            const Tensor grad_a = graphs::random_tensor({2, 2, n, m}, DType::f64, 5);
            auto backward_of = [&](const Graph& g, Mode mode, int threads, bool seed_a = true) {
                Executor ex(threads);
                RunOptions o;
                o.keep_for_backward = mode == Mode::untraced;
                o.keep_all = mode != Mode::untraced;
                const RunResult fwd = ex.run(g, o);
                std::map<std::string, Tensor> seeds{{"Y", grad_y.cast(g.dtype())}};
                if (seed_a) seeds.emplace("A", grad_a.cast(g.dtype()));
                std::vector<std::string> wrt{"Q", "K", "V"};
                if (mode != Mode::untraced) wrt.insert(wrt.end(), {"A", "S", "S_raw"});
                return ex.backward(g, fwd, seeds, wrt, {}, mode != Mode::plain);
            };
            const Graph g = graph(DType::f32, true, true);
            const Gradients fused = backward_of(g, Mode::untraced, 2);
            BOOST_TEST(!fused.seconds().contains("A"));  // the Softmax ran inside the fused step
            // the reference reads the f32 run's inputs, without the NaN (the keys they hold are masked)
            const Graph clean = graph(DType::f64, false, true);
            auto input = [&](const char* name) {
                return clean.value(clean.at(name)).data->cast(DType::f32).cast(DType::f64);
            };
            const Tensor q = input("Q"), k = input("K"), v = input("V");
            const Reference ref = reference(
                c, q, k, v, grad_y, keep, 1.0, {}, 0, {}, {}, {},
                [&](std::size_t b, std::size_t i, std::size_t j) { return grad_a.at_flat((b * n + i) * m + j); });
            auto masked = [&](const Tensor& t, const std::vector<double>& want, bool keys) {
                // the padded keys' gradients are 0 (K, V there are NaN and get nothing)
                std::vector<double> w = want;
                for (std::size_t e = 0; e < w.size(); ++e)
                    if (keys && (e / d) % m >= static_cast<std::size_t>(lengths[e / (m * d) / 2])) {
                        BOOST_TEST(t.at_flat(e) == 0.0);
                        w[e] = t.at_flat(e);
                    }
                return rel_error(t, w);
            };
            BOOST_TEST(masked(fused.at("Q"), ref.dq, false) <= 2e-5);
            BOOST_TEST(masked(fused.at("K"), ref.dk, true) <= 2e-5);
            BOOST_TEST(masked(fused.at("V"), ref.dv, true) <= 2e-5);
            // A's seed matters: with the default one (all ones, which adds nothing: A's rows sum
            // to 1) dQ is another
            // (on the graph without the NaN: with it, dQ is NaN, as the plain nodes give it)
            BOOST_TEST(rel_error(backward_of(graph(DType::f32, false, true), Mode::untraced, 2, false).at("Q"),
                                 ref.dq) > 1e-2);
            // the same bits at 1 and 4 threads, and traced (A's whole gradient is the seed + dO·Vᵀ)
            for (int threads : {1, 4})
                for (const char* name : {"Q", "K", "V"})
                    BOOST_TEST(same_bits(backward_of(g, Mode::untraced, threads).at(name), fused.at(name)),
                               name << threads);
            const Gradients traced = backward_of(g, Mode::traced, 2);
            for (const char* name : {"Q", "K", "V"}) BOOST_TEST(same_bits(traced.at(name), fused.at(name)), name);
            // in f64 without NaN, every gradient as the plain nodes' backward gives it (A's, S's too)
            const Gradients want = backward_of(clean, Mode::plain, 2);
            const Gradients got = backward_of(clean, Mode::traced, 2);
            BOOST_TEST(want.seconds().contains("A"));
            BOOST_TEST(!got.seconds().contains("A"));
            auto values_of = [](const Tensor& t) {
                std::vector<double> out(t.size());
                for (std::size_t e = 0; e < out.size(); ++e) out[e] = t.at_flat(e);
                return out;
            };
            for (const char* name : {"Q", "K", "V", "A", "S", "S_raw"})
                BOOST_TEST(rel_error(got.at(name), values_of(want.at(name))) <= 1e-12, name);
            // A given no seed starts from ones, which the fused step reads as one row for every
            // row: A's gradient is 1 + dO·Vᵀ (the plain loop's, with a seed of ones), the rest as
            // the plain nodes give them; the same bits across threads
            const Reference ones = reference(c, q, k, v, grad_y, keep, 1.0, {}, 0, {}, {}, {},
                                             [](std::size_t, std::size_t, std::size_t) { return 1.0; });
            const Gradients fused_ones = backward_of(g, Mode::untraced, 2, false);
            BOOST_TEST(masked(fused_ones.at("Q"), ones.dq, false) <= 2e-5);
            BOOST_TEST(masked(fused_ones.at("K"), ones.dk, true) <= 2e-5);
            BOOST_TEST(masked(fused_ones.at("V"), ones.dv, true) <= 2e-5);
            for (const char* name : {"Q", "K", "V"})
                BOOST_TEST(same_bits(backward_of(g, Mode::untraced, 1, false).at(name), fused_ones.at(name)), name);
            const Gradients want_ones = backward_of(clean, Mode::plain, 2, false);
            const Gradients got_ones = backward_of(clean, Mode::traced, 2, false);
            BOOST_TEST(!got_ones.seconds().contains("A"));
            for (const char* name : {"Q", "K", "V", "A", "S", "S_raw"})
                BOOST_TEST(rel_error(got_ones.at(name), values_of(want_ones.at(name))) <= 1e-12, name);
            const Tensor& v64 = *clean.value(clean.at("V")).data;  // A's gradient on every key, by hand
            std::vector<double> da_ones(2 * 2 * n * m, 1.0);
            for (std::size_t b = 0; b < 4; ++b)
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j)
                        for (std::size_t e = 0; e < d; ++e)
                            da_ones[(b * n + i) * m + j] +=
                                grad_y.at_flat((b * n + i) * d + e) * v64.at_flat((b * m + j) * d + e);
            BOOST_TEST(rel_error(got_ones.at("A"), da_ones) <= 1e-12);
        }
}

// ---- non-finite inputs: the fused step against the plain nodes (RunOptions::optimize
// false, the plain backward), forward and backward. The plain Softmax gives a row with a NaN
// score (or inf − inf) NaN on every key, the keys its Mask removed too, and the plain A·V,
// Aᵀ·dO and dO·Vᵀ multiply the weights 0 of removed keys by V's and dO's values: an inf or a
// NaN there gives NaN. The fused step skips those keys (whole key blocks under a causal
// mask), so it has to find these cases and take every key then.

namespace {

// f64, several key blocks (n > gemm_row_block), so that masks skip whole blocks
const std::vector<MaskCase> nonfinite_cases = {
    // a NaN in a query row of head 0 (its A row NaN, so dV of every key); an inf in one of head 1
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .pokes = {{"Q", 100 * 8 + 3, NAN}, {"Q", (200 + 70) * 8 + 1, INFINITY}}},
    // a key of -inf (scores ±inf: rows whose score is +inf give inf − inf)
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .pokes = {{"K", 30 * 8 + 2, -INFINITY}, {"K", (200 + 150) * 8, INFINITY}}},
    // V's NaN and inf at keys that the earlier rows' blocks skip
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .pokes = {{"V", 150 * 8 + 2, NAN}, {"V", (200 + 10) * 8 + 5, INFINITY}}},
    // a window both ways: a NaN query row, a NaN value far from most rows
    {.c = {{2, 300, 8}, {2, 300, 8}, {2, 300, 8}, true},
     .pattern = "window",
     .window = 40,
     .pokes = {{"Q", 150 * 8, NAN}, {"V", (300 + 250) * 8 + 7, NAN}}},
    // padding: a NaN value past a sequence's length; in the sequence of no keys (every row
    // fully masked: A = 0) a NaN query (masked away) and a NaN value (0·NaN in A·V)
    {.c = {{2, 3, 150, 8}, {2, 3, 150, 8}, {2, 3, 150, 8}, true},
     .pattern = "padding",
     .lengths = {90, 0},
     .pokes = {{"V", 120 * 8 + 1, NAN}, {"Q", (3 * 150 + 5) * 8, NAN}, {"V", (4 * 150 + 7) * 8 + 3, NAN}}},
    // softcapping (tanh of NaN is NaN, of ±inf ±1: capped, finite)
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .softcap = 3.0,
     .pokes = {{"Q", 100 * 8 + 3, NAN}, {"Q", (200 + 70) * 8 + 1, INFINITY}}},
    // sinks: a NaN query row (its sink weight NaN too), a NaN value
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .sinks = {0.5, -1.0},
     .pokes = {{"Q", 100 * 8 + 3, NAN}, {"V", (200 + 150) * 8 + 2, NAN}}},
    // ALiBi: a NaN key (the rows after it NaN)
    {.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true},
     .pattern = "causal",
     .alibi = {0.5, 0.25},
     .pokes = {{"K", 120 * 8 + 4, NAN}}},
};

// fused against plain: NaN where the plain value is NaN, an inf where it is that inf, the
// other values within `tolerance` (relative); returns how many values the plain one has NaN
std::size_t check_as_plain(const Tensor& fused, const Tensor& plain, const std::string& what,
                           double tolerance = 1e-12) {
    const Tensor f = fused.cast(DType::f64), p = plain.cast(DType::f64);
    BOOST_TEST_REQUIRE((f.shape() == p.shape()), what);
    std::size_t differ = 0, nans = 0;
    for (std::size_t e = 0; e < f.size(); ++e) {
        const double x = f.at_flat(e), y = p.at_flat(e);
        nans += std::isnan(y) ? 1 : 0;
        const bool ok = std::isnan(y)   ? std::isnan(x)
                        : std::isinf(y) ? x == y
                                        : std::abs(x - y) <= tolerance * std::max(1.0, std::abs(y));
        if (!ok && differ++ < 3) BOOST_TEST(ok, what << "[" << e << "]: fused " << x << ", plain " << y);
    }
    BOOST_TEST(differ == 0u, what << ": " << differ << " of " << f.size() << " values differ");
    return nans;
}

}  // namespace

BOOST_DATA_TEST_CASE(nonfinite_fused_matches_the_plain_nodes, bdata::xrange(nonfinite_cases.size()), ci) {
    const MaskCase& mc = nonfinite_cases[ci];
    const Graph g = masked_graph(mc, DType::f64);
    const std::vector<std::string> wrt = grad_names(mc);
    Executor ex(2);
    RunOptions plain_options;
    plain_options.optimize = false;
    plain_options.keep_all = true;
    const RunResult plain = ex.run(g, plain_options);
    const Gradients plain_grads = ex.backward(g, plain, {{"Y", grad_of_y(g, DType::f64)}}, wrt, {}, false);
    // not vacuous: the plain Y has NaN, and finite values
    const Tensor y = plain.at(g, "Y");
    std::size_t finite = 0;
    for (std::size_t e = 0; e < y.size(); ++e) finite += std::isfinite(y.at_flat(e)) ? 1 : 0;
    BOOST_TEST(finite > 0u);
    for (Mode mode : {Mode::untraced, Mode::traced})
        BOOST_TEST_CONTEXT((mode == Mode::traced ? "traced" : "untraced")) {
            const Run fused = run_backward(g, mode, 2, wrt);
            BOOST_TEST(check_as_plain(fused.forward.at(g, "Y"), y, "Y") > 0u);
            if (mode == Mode::traced)
                for (const char* name : {"S_masked", "A", "A_sinks"})
                    if (g.find(name) >= 0) check_as_plain(fused.forward.at(g, name), plain.at(g, name), name);
            for (const std::string& name : wrt) check_as_plain(fused.grads.at(name), plain_grads.at(name), "d" + name);
        }
    // and bit-identical for any thread count
    const Run two = run_backward(g, Mode::untraced, 2, wrt);
    for (int threads : {1, 4}) {
        const Run other = run_backward(g, Mode::untraced, threads, wrt);
        BOOST_TEST(same_bits(two.forward.at(g, "Y"), other.forward.at(g, "Y")), "Y at " << threads << " threads");
        for (const std::string& name : wrt)
            BOOST_TEST(same_bits(two.grads.at(name), other.grads.at(name)), name << " at " << threads << " threads");
    }
}

// dO (Y's seed) with a NaN and an inf in a row: the plain Aᵀ·dO multiplies them by the weights 0
// of the keys the causal mask removed from that row (dV NaN there), and dO·Vᵀ makes dA's row
// non-finite, so its row sum is NaN; the fused backward then takes every key.
BOOST_AUTO_TEST_CASE(nonfinite_output_gradient_matches_the_plain_nodes) {
    const MaskCase mc{.c = {{1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, true}, .pattern = "causal"};
    const Graph g = masked_graph(mc, DType::f64);
    Tensor seed = grad_of_y(g, DType::f64);
    seed.as<double>().data()[5 * 8 + 2] = NAN;                 // head 0, row 5
    seed.as<double>().data()[(200 + 20) * 8 + 6] = -INFINITY;  // head 1, row 20
    const std::vector<std::string> wrt{"Q", "K", "V"};
    Executor ex(2);
    RunOptions plain_options;
    plain_options.optimize = false;
    plain_options.keep_all = true;
    const RunResult plain = ex.run(g, plain_options);
    const Gradients want = ex.backward(g, plain, {{"Y", seed}}, wrt, {}, false);
    std::vector<Gradients> fused;
    for (int threads : {1, 2, 4})
        for (bool traced : {false, true}) {
            Executor tx(threads);
            RunOptions o;
            o.keep_for_backward = !traced;
            o.keep_all = traced;
            fused.push_back(tx.backward(g, tx.run(g, o), {{"Y", seed}}, wrt, {}, true));
        }
    for (const std::string& name : wrt) {
        BOOST_TEST(check_as_plain(fused[0].at(name), want.at(name), "d" + name) > 0u);
        for (std::size_t k = 1; k < fused.size(); ++k)
            BOOST_TEST(same_bits(fused[k].at(name), fused[k % 2].at(name)), name << " run " << k);
    }
    // dV of head 0: column 2 NaN for every key (the removed ones: 0·NaN), the others finite
    const Array<double> dv = fused[0].at("V").as<double>();
    for (std::size_t j = 0; j < 200; ++j)
        for (std::size_t c = 0; c < 8; ++c)
            BOOST_TEST(std::isnan(dv(0, 0, j, c)) == (c == 2), "dV[0, 0, " << j << ", " << c << "]");
}

// The plain semantics spelled out by a plain loop for the first case: the NaN query row of
// head 0 (row 100) has A NaN on every key, the ones the causal mask removed too, and so dV of
// head 0 is NaN for every key (dV = Aᵀ·dO); the rows of head 0 before it are finite, and so
// are head 0's other rows' weights.
BOOST_AUTO_TEST_CASE(nonfinite_nan_query_row_poisons_its_whole_weight_row) {
    const MaskCase& mc = nonfinite_cases[0];
    const Graph g = masked_graph(mc, DType::f64);
    const Run fused = run_backward(g, Mode::traced, 2, {"Q", "K", "V"});
    const Array<double> a = fused.forward.at(g, "A").as<double>();
    const std::size_t n = 200;
    for (std::size_t j = 0; j < n; ++j) BOOST_TEST(std::isnan(a(0, 0, 100, j)), "A[0, 0, 100, " << j << "]");
    for (std::size_t i : {std::size_t{0}, std::size_t{99}, std::size_t{101}, std::size_t{199}})
        for (std::size_t j = 0; j < n; ++j) {
            BOOST_TEST(std::isfinite(a(0, 0, i, j)));
            if (j > i) BOOST_TEST(a(0, 0, i, j) == 0.0);
        }
    const Run untraced = run_backward(g, Mode::untraced, 2, {"Q", "K", "V"});
    for (const Run* r : {&fused, &untraced}) {
        const Array<double> dv = r->grads.at("V").as<double>();
        std::size_t nan_head0 = 0;
        for (std::size_t e = 0; e < n * 8; ++e) nan_head0 += std::isnan(dv.data()[e]) ? 1 : 0;
        BOOST_TEST(nan_head0 == n * 8);
    }
}

// K and V NaN past each sequence's length (padding holding garbage): the plain A·V, dO·Vᵀ
// and dS_raw·K multiply them by the 0 of those keys, NaN (as numpy's and PyTorch's matmul);
// the fused step once skipped them and gave finite values, and now gives the plain nodes' NaN
// (forward and backward).
BOOST_AUTO_TEST_CASE(padded_keys_holding_nan_give_the_plain_nodes_nan) {
    MaskCase mc{
        .c = {{2, 2, 300, 8}, {2, 2, 300, 8}, {2, 2, 300, 8}, true}, .pattern = "padding", .lengths = {170, 260}};
    GraphBuilder gb("padded", DType::f32);
    auto poisoned = [&](const char* name, std::uint64_t seed, double scale_) {
        Tensor t = graphs::random_tensor(mc.c.k, DType::f32, seed, scale_);
        float* x = t.as<float>().data();
        for (std::size_t b = 0; b < 4; ++b)
            for (std::size_t j = static_cast<std::size_t>(mc.lengths[b / 2]); j < 300; ++j)
                for (std::size_t d = 0; d < 8; ++d) x[(b * 300 + j) * 8 + d] = std::nanf("");
        return gb.input(name, t);
    };
    Value q = gb.input("Q", graphs::random_tensor(mc.c.q, DType::f32, 1, 2.0));
    Value k = poisoned("K", 2, 2.0), v = poisoned("V", 3, 1.0);
    Value s = mask_padding(scale(matmul(q, transpose(k)), factor_of(mc.c)), mc.lengths);
    gb.output(matmul(softmax(s), v).named("Y"));
    const Graph g = gb.build();
    Executor ex(2);
    RunOptions plain_options;
    plain_options.optimize = false;
    plain_options.keep_all = true;
    const RunResult plain = ex.run(g, plain_options);
    const Gradients want = ex.backward(g, plain, {{"Y", grad_of_y(g, DType::f32)}}, {"Q", "K", "V"}, {}, false);
    const Run r = run_backward(g, Mode::untraced, 2);
    BOOST_TEST(check_as_plain(r.forward.at(g, "Y"), plain.at(g, "Y"), "Y", 1e-5) > 0u);
    for (const char* name : {"Q", "K", "V"}) check_as_plain(r.grads.at(name), want.at(name), name, 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()  // test_attention_backward
