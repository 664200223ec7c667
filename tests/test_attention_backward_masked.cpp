// The fused attention backward of masked chains (Scale, maybe ALiBi, maybe softcapping, then
// a Mask, maybe a Scale after, maybe sinks, the Differential Transformer's two maps, an added
// bias) against a plain-loop f64 reference (support/attention_backward.hpp) and the plain
// per-node backward; bit-identical across thread counts and traced or not; gradcheck in f64;
// and non-finite inputs, against the plain nodes.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/gradcheck.hpp"
#include "engine/sanitizers.hpp"
#include "support/attention_backward.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_attention_backward_masked)

using namespace attngraph;
using namespace attngraph::test::attention_backward;
namespace bdata = boost::unit_test::data;

namespace {

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
    {.c = {{2, 2, 150, 8}, {2, 2, 150, 8}, {2, 1, 150, 8}, true},
     .pattern = "causal",
     .keep = {2, 150, 150},
     .lambda = {0.4}},
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
    for (const char* name : {"S_raw", "S", "S_alibi", "S_div", "S_tanh", "S_capped", "S_masked", "S_sinks", "A_sinks",
                             "A", "A_split:0", "A_split:1", "A_2_weighted", "A_diff", "S_bias", "bias_value"})
        if (g.find(name) >= 0) BOOST_TEST(!fused.forward.values[static_cast<std::size_t>(g.at(name))], name);
}

BOOST_DATA_TEST_CASE(masked_fused_backward_bit_identical_for_any_thread_count,
                     bdata::xrange(masked_cases.size()) * bdata::make({0, 1}), ci, f64) {
    const MaskCase& mc = masked_cases[ci];
    const Graph g = masked_graph(mc, f64 ? DType::f64 : DType::f32);
    const Run one = run_backward(g, Mode::untraced, 1, grad_names(mc));
    for (int threads : test::compared_thread_counts({2, 4})) {
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
                for (double x : values_of(alone.grads.at(name))) largest = std::max(largest, std::abs(x));
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
            const std::vector<double> w = values_of(want);
            BOOST_TEST(rel_error(untraced.grads.at(name), w) <= 2e-5);  // f32 sums of n·m terms, as against f64
        }
}

BOOST_DATA_TEST_CASE(masked_traced_intermediate_gradients_match_the_plain_backward, bdata::xrange(masked_cases.size()),
                     ci) {
    // every value requested: the fused step writes dA (whole rows, masked keys too), the
    // chain's gradients, dS_raw, and the mask tensor's (0)
    const MaskCase& mc = masked_cases[ci];
#ifdef ATTNGRAPH_SANITIZED
    // an f64 comparison of every value's gradient, not of threads: under a sanitizer the cases
    // of 700 rows or 2100 keys (38 s of this test's 90 s under TSan) are left to the
    // release build; the other tests above run them under the sanitizer too
    if (mc.c.q.end()[-2] >= 700 || mc.c.k.end()[-2] >= 700) return;
#endif
    const Graph g = masked_graph(mc, DType::f64);
    const Run fused = run_backward(g, Mode::traced, 2, {});
    const Run plain = run_backward(g, Mode::plain, 2, {});
    for (const auto& v : g.values()) BOOST_TEST_CONTEXT(v.name) {
            BOOST_REQUIRE(fused.grads.at(v.name).shape() == plain.grads.at(v.name).shape());
            const std::vector<double> want = values_of(plain.grads.at(v.name)), got = values_of(fused.grads.at(v.name));
            double err = 0, scale = 0;
            for (std::size_t i = 0; i < want.size(); ++i) {
                err = std::max(err, std::abs(got[i] - want[i]));
                scale = std::max(scale, std::abs(want[i]));
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
            const std::vector<double> w = values_of(want);
            BOOST_TEST(rel_error(fused.grads.at(name), w) <= 1e-12);
        }
}

BOOST_DATA_TEST_CASE(masked_fused_backward_gradchecks_in_f64, bdata::xrange(masked_cases.size()), ci) {
#ifdef ATTNGRAPH_TSAN
    // gradcheck runs on one thread (its executors have 1, GradcheckOptions::threads is 1):
    // nothing for ThreadSanitizer to find. The release and ASan builds run it.
    return;
#endif
    MaskCase mc = masked_cases[ci];
    if (!mc.keep.empty()) return;  // a boolean tensor's 0 and 1 are not a differentiable input
    for (Shape* s : {&mc.c.q, &mc.c.k, &mc.c.v}) s->end()[-2] = std::min<std::size_t>(s->end()[-2], 7);
    if (mc.pattern == "window") mc.window = std::min(mc.window, 3);
    for (int& l : mc.lengths) l = std::min(l, 4);
    const Graph g = masked_graph(mc, DType::f64);
    const GradcheckResult r = gradcheck(g, GradcheckOptions{});
    BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
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
    // V's NaN and inf before the keys of the last rows' block, which ends at the last key
    {.c = {{2, 300, 8}, {2, 300, 8}, {2, 300, 8}, true},
     .pattern = "window",
     .window = 40,
     .pokes = {{"V", 10 * 8 + 1, NAN}, {"V", (300 + 20) * 8 + 6, INFINITY}}},
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
    BOOST_TEST_REQUIRE((fused.shape() == plain.shape()), what);
    const std::vector<double> f = values_of(fused), p = values_of(plain);
    std::size_t differ = 0, nans = 0;
    for (std::size_t e = 0; e < f.size(); ++e) {
        const double x = f[e], y = p[e];
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

BOOST_AUTO_TEST_SUITE_END()  // test_attention_backward_masked
