// The fused attention backward (engine/attention_backward.cpp) of unmasked attention against
// a plain-loop f64 reference (support/attention_backward.hpp) and the plain per-node backward;
// bit-identical at 1, 2, 4 and 8 threads; traced (A kept) and untraced (A recomputed) runs bit
// for bit; GQA and MQA shapes; gradcheck in f64; a forward for backward that keeps no n×m
// matrix; ONNX's Attention composite; the weights A as an output. The masked chains are in
// test_attention_backward_masked.cpp.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>

#include "engine/gradcheck.hpp"
#include "engine/sanitizers.hpp"
#include "support/attention_backward.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_attention_backward)

using namespace attngraph;
using namespace attngraph::test::attention_backward;
namespace bdata = boost::unit_test::data;

namespace {

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
    // steps of several forward blocks (512 rows here, then the last 88), and of one block
    // where the keys are many (engine/attention_backward.cpp's step_values)
    {{2, 600, 8}, {2, 250, 8}, {2, 250, 8}, true},
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
    for (int threads : test::compared_thread_counts({2, 4, 8})) {
        const Run many = run_backward(g, Mode::untraced, threads);
        for (const char* name : {"Q", "K", "V"}) BOOST_TEST_CONTEXT(name << " at " << threads << " threads") {
                BOOST_TEST(same_bits(one.grads.at(name), many.grads.at(name)));
            }
    }
}

BOOST_DATA_TEST_CASE(traced_and_untraced_backward_agree_bitwise,
                     bdata::xrange(cases.size()) * bdata::make(test::compared_thread_counts({1, 4})), ci, threads) {
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
    // the plain loops' gradients: K's rows of past_key, then of K_new
    Tensor kt = zeros(DType::f64, c.k);
    double* kd = kt.as<double>().data();
    for (std::size_t bi = 0; bi < 2; ++bi)
        for (std::size_t j = 0; j < 600; ++j)
            for (std::size_t d = 0; d < 8; ++d)
                kd[(bi * 600 + j) * 8 + d] =
                    j < 450 ? past.at_flat((bi * 450 + j) * 8 + d) : fresh.at_flat((bi * 150 + j - 450) * 8 + d);
    const auto in = [&](const char* name) { return g.value(g.at(name)).data->cast(DType::f64); };
    const Reference ref = reference(c, in("Q"), kt, in("V"), grad_of_y(g, DType::f64));
    std::vector<double> dk = ref.dk;
    for (double& e : dk) e += 1.0;  // the output's seed
    for (int threads : test::compared_thread_counts({1, 4})) BOOST_TEST_CONTEXT(threads << " threads") {
            const Run untraced = run_backward(g, Mode::untraced, threads, wrt);
            const Run traced = run_backward(g, Mode::traced, threads, {});
            BOOST_TEST(!untraced.forward.values[static_cast<std::size_t>(g.at("A"))]);
            for (const std::string& name : wrt) BOOST_TEST_CONTEXT(name) {
                    BOOST_TEST(same_bits(untraced.grads.at(name), traced.grads.at(name)));
                }
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
            const std::vector<double> w = values_of(want);
            BOOST_TEST(rel_error(fused.grads.at(v.name), w) <= 1e-12);
        }
}

BOOST_DATA_TEST_CASE(fused_backward_gradchecks_in_f64, bdata::xrange(cases.size()), ci) {
#ifdef ATTNGRAPH_TSAN
    // gradcheck runs on one thread (its executors have 1, GradcheckOptions::threads is 1):
    // nothing for ThreadSanitizer to find. The release and ASan builds run it.
    return;
#endif
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
                const std::vector<double> w = values_of(want);
                BOOST_TEST(rel_error(fused.at(v.name), w) <= 2e-5);
            }
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
            const std::vector<double> w = values_of(want);
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
        const std::vector<double> w = values_of(want);
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
            const std::vector<double> w = values_of(want);
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
            const double* seed_a = grad_a.as<double>().data();
            const Reference ref =
                reference(c, q, k, v, grad_y, keep, 1.0, {}, 0, {}, {}, {},
                          [&](std::size_t b, std::size_t i, std::size_t j) { return seed_a[(b * n + i) * m + j]; });
            auto masked = [&](const Tensor& t, const std::vector<double>& want, bool keys) {
                // the padded keys' gradients are 0 (K, V there are NaN and get nothing)
                std::vector<double> w = want;
                const std::vector<double> got = values_of(t);
                for (std::size_t e = 0; e < w.size(); ++e)
                    if (keys && (e / d) % m >= static_cast<std::size_t>(lengths[e / (m * d) / 2])) {
                        BOOST_TEST(got[e] == 0.0);
                        w[e] = got[e];
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
            for (int threads : test::compared_thread_counts({1, 4})) {
                const Gradients other = backward_of(g, Mode::untraced, threads);
                for (const char* name : {"Q", "K", "V"})
                    BOOST_TEST(same_bits(other.at(name), fused.at(name)), name << threads);
            }
            const Gradients traced = backward_of(g, Mode::traced, 2);
            for (const char* name : {"Q", "K", "V"}) BOOST_TEST(same_bits(traced.at(name), fused.at(name)), name);
            // in f64 without NaN, every gradient as the plain nodes' backward gives it (A's, S's too)
            const Gradients want = backward_of(clean, Mode::plain, 2);
            const Gradients got = backward_of(clean, Mode::traced, 2);
            BOOST_TEST(want.seconds().contains("A"));
            BOOST_TEST(!got.seconds().contains("A"));
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
            const Gradients one_thread = backward_of(g, Mode::untraced, 1, false);
            for (const char* name : {"Q", "K", "V"})
                BOOST_TEST(same_bits(one_thread.at(name), fused_ones.at(name)), name);
            const Gradients want_ones = backward_of(clean, Mode::plain, 2, false);
            const Gradients got_ones = backward_of(clean, Mode::traced, 2, false);
            BOOST_TEST(!got_ones.seconds().contains("A"));
            for (const char* name : {"Q", "K", "V", "A", "S", "S_raw"})
                BOOST_TEST(rel_error(got_ones.at(name), values_of(want_ones.at(name))) <= 1e-12, name);
            // A's gradient on every key, by hand
            const double* v64 = clean.value(clean.at("V")).data->as<double>().data();
            const double* gy = grad_y.as<double>().data();
            std::vector<double> da_ones(2 * 2 * n * m, 1.0);
            double* da = da_ones.data();  // (no call per element at the tests' -O0)
            for (std::size_t b = 0; b < 4; ++b)
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j)
                        for (std::size_t e = 0; e < d; ++e)
                            da[(b * n + i) * m + j] += gy[(b * n + i) * d + e] * v64[(b * m + j) * d + e];
            BOOST_TEST(rel_error(got_ones.at("A"), da_ones) <= 1e-12);
        }
}

BOOST_AUTO_TEST_SUITE_END()  // test_attention_backward
