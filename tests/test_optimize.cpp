// The optimised run plan (engine/optimize.hpp) against the plain one, and both against a
// plain-loop multi-head attention in double written here: same outputs with tracing on and
// off, bytewise the same at 1, 2, 4 and 8 threads, traced values unchanged and named as in
// the graph. Also the vectorised softmax kernel against a scalar one.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <optional>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/optimize.hpp"
#include "engine/softmax_kernel.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/reference_mha.hpp"

BOOST_AUTO_TEST_SUITE(test_optimize)

using namespace attngraph;
namespace bdata = boost::unit_test::data;

namespace {

graphs::MhaConfig config(std::size_t n, std::size_t batch = 0) {
    graphs::MhaConfig c;
    c.seq = n;
    c.d_model = 48;
    c.heads = 3;
    c.batch = batch;
    c.seed = 7;
    return c;
}

double max_diff(const Tensor& t, const std::vector<double>& ref) {
    if (t.size() != ref.size()) return INFINITY;
    double m = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::abs(t.at_flat(i) - ref[i]));
    return m;
}

std::size_t count_steps(const Plan& p, StepKind kind) {
    std::size_t n = 0;
    for (const Step& s : p.steps) n += s.kind == kind;
    return n;
}

std::vector<bool> kept(const Graph& g, const std::vector<std::string>& names) {
    std::vector<bool> keep(g.values().size(), false);
    for (int id : g.outputs()) keep[static_cast<std::size_t>(id)] = true;
    for (const auto& name : names) keep[static_cast<std::size_t>(g.at(name))] = true;
    return keep;
}

}  // namespace

BOOST_AUTO_TEST_CASE(plan_fuses_only_unseen_values) {
    const Graph g = graphs::build_mha(config(8));
    const std::size_t nodes = g.nodes().size();

    const Plan untraced = make_plan(g, kept(g, {}));
    BOOST_TEST(count_steps(untraced, StepKind::attention) == 3u);
    BOOST_TEST(count_steps(untraced, StepKind::linear_group) == 1u);
    // KT, S_raw, S, A folded per head; 9 projections in one step
    BOOST_TEST(untraced.steps.size() == nodes - 3 * 4 - 8);
    BOOST_TEST(untraced.describe(g).find("attention(head2.O <- head2.KT, head2.S_raw, head2.S, head2.A)") !=
               std::string::npos);

    std::vector<std::string> all;
    for (const auto& v : g.values()) all.push_back(v.name);
    const Plan traced = make_plan(g, kept(g, all));
    // seen S_raw, S, A are written by the attention step; seen KT keeps its Transpose
    BOOST_TEST(count_steps(traced, StepKind::attention) == 3u);
    BOOST_TEST(traced.steps.size() == nodes - 3 * 3 - 8);
    const std::string text = traced.describe(g);
    BOOST_TEST(text.find("attention(head3.O <- head3.S_raw, head3.S, head3.A)") != std::string::npos);
    BOOST_TEST(text.find("linear_group(head1.Q <- head1.K, head1.V, head2.Q, head2.K, head2.V, head3.Q, head3.K, "
                         "head3.V)") != std::string::npos);
    std::size_t attention_outputs = 0;
    for (const Step& s : traced.steps)
        if (s.kind == StepKind::attention) attention_outputs += s.outputs.size();
    BOOST_TEST(attention_outputs == 3u * 4u);  // O, S_raw, S, A per head

    const Plan plain = make_plan(g, kept(g, {}), false);
    BOOST_TEST(plain.steps.size() == nodes);
}

// Scores without the A·V product: the attention rewrite does not apply, the smaller ones do.
BOOST_AUTO_TEST_CASE(transposed_operand_and_scaled_softmax_match_plain) {
    GraphBuilder b("scores");
    Value q = b.input("Q", graphs::random_tensor({2, 37, 24}, DType::f32, 3));
    Value k = b.input("K", graphs::random_tensor({2, 29, 24}, DType::f32, 4));
    Value a = softmax(scale(matmul(q, transpose(k)).named("S_raw"), 0.3).named("S")).named("A");
    b.output(a);
    const Graph g = b.build();
    const Plan p = make_plan(g, kept(g, {}));
    BOOST_TEST(p.describe(g) == "matmul_tb(S_raw <- Transpose_1)\nscaled_softmax(A <- S)\n");

    RunOptions plain;
    plain.optimize = false;
    RunOptions fast;
    const RunResult rp = run(g, plain), rf = run(g, fast);
    BOOST_TEST(test::max_abs_diff(rf.at(g, "A"), rp.at(g, "A")) < 1e-7);
    for (int threads : {1, 2, 4}) {
        fast.threads = threads;
        BOOST_TEST((run(g, fast).at(g, "A") == rf.at(g, "A")));
    }
}

// The attention rewrite reads the attributes: an explicit perm swapping the last two axes and
// softmax on the last axis by number fuse; any other perm or axis does not (cubes, so that
// every perm gives a valid graph).
BOOST_AUTO_TEST_CASE(attention_rewrite_checks_perm_and_axis) {
    struct Case {
        std::optional<std::vector<int>> perm;
        int axis;
        bool fused;
    };
    for (const Case& c : {Case{std::nullopt, -1, true}, Case{std::vector<int>{0, 2, 1}, 2, true},
                          Case{std::vector<int>{0, -1, -2}, -1, true}, Case{std::vector<int>{1, 0, 2}, -1, false},
                          Case{std::nullopt, 1, false}}) {
        GraphBuilder b("chain");
        Value q = b.input("Q", graphs::random_tensor({6, 6, 6}, DType::f32, 5));
        Value k = b.input("K", graphs::random_tensor({6, 6, 6}, DType::f32, 6));
        Value v = b.input("V", graphs::random_tensor({6, 6, 6}, DType::f32, 7));
        Value kt = c.perm ? transpose(k, *c.perm) : transpose(k);
        b.output(matmul(softmax(scale(matmul(q, kt), 0.5), c.axis), v).named("O"));
        const Graph g = b.build();
        std::string perm = "none";
        if (c.perm) perm = std::to_string((*c.perm)[0]) + std::to_string((*c.perm)[1]) + std::to_string((*c.perm)[2]);
        BOOST_TEST_CONTEXT("perm " << perm << " axis " << c.axis) {
            const Plan p = make_plan(g, kept(g, {}));
            BOOST_TEST((count_steps(p, StepKind::attention) == 1u) == c.fused);
            RunOptions plain;
            plain.optimize = false;
            BOOST_TEST(test::max_abs_diff(run(g, {}).at(g, "O"), run(g, plain).at(g, "O")) < 1e-6);
        }
    }
}

// Keys and values shared across query heads (GQA: (2, 1, m, d) for queries (2, 3, n, d);
// MQA: one (m, d) for all) fuse; K whose batch axes do not repeat to Q's do not.
BOOST_AUTO_TEST_CASE(attention_with_shared_keys_and_values) {
    struct Case {
        Shape q, kv;
        bool fused;
    };
    for (const Case& c : {Case{{2, 3, 130, 8}, {2, 1, 70, 8}, true}, Case{{2, 3, 130, 8}, {70, 8}, true},
                          Case{{1, 130, 8}, {3, 70, 8}, false}}) {
        GraphBuilder b("shared");
        Value q = b.input("Q", graphs::random_tensor(c.q, DType::f32, 8));
        Value k = b.input("K", graphs::random_tensor(c.kv, DType::f32, 9));
        Value v = b.input("V", graphs::random_tensor(c.kv, DType::f32, 10));
        b.output(matmul(softmax(scale(matmul(q, transpose(k)), 0.35)), v).named("O"));
        const Graph g = b.build();
        BOOST_TEST_CONTEXT("Q (" << shape_str(c.q) << "), K, V (" << shape_str(c.kv) << ")") {
            BOOST_TEST((count_steps(make_plan(g, kept(g, {})), StepKind::attention) == 1u) == c.fused);
            RunOptions plain;
            plain.optimize = false;
            RunOptions fast;
            fast.threads = 1;
            const RunResult rf = run(g, fast);
            BOOST_TEST(test::max_abs_diff(rf.at(g, "O"), run(g, plain).at(g, "O")) < 1e-6);
            fast.threads = 4;
            BOOST_TEST((run(g, fast).at(g, "O") == rf.at(g, "O")));
        }
    }
}

BOOST_DATA_TEST_CASE(optimised_equals_plain_and_reference, bdata::make({1, 64, 130, 200}) * bdata::make({0, 2}), n,
                     batch) {
    const graphs::MhaConfig c = config(static_cast<std::size_t>(n), static_cast<std::size_t>(batch));
    const graphs::MhaWeights w = graphs::random_mha_weights(c);
    const Graph g = graphs::build_mha(c, w);
    const std::vector<double> ref = test::reference_mha(c, w);

    RunOptions plain;
    plain.threads = 2;
    plain.optimize = false;
    RunOptions fast = plain;
    fast.optimize = true;
    RunOptions traced = fast;
    traced.trace = true;
    plain.trace = true;  // the plain run keeps every value, to compare the traced ones

    const RunResult rp = run(g, plain), rf = run(g, fast), rt = run(g, traced);
    const Tensor &yp = rp.at(g, "Y"), &yf = rf.at(g, "Y"), &yt = rt.at(g, "Y");
    BOOST_TEST(max_diff(yp, ref) < 2e-5);
    BOOST_TEST(max_diff(yf, ref) < 2e-5);
    // the fused kernel may differ from the plain steps only by OpenBLAS reading Kᵀ in place
    BOOST_TEST(test::max_abs_diff(yf, yp) < 1e-6);
    BOOST_TEST(test::max_abs_diff(yt, yp) < 1e-6);
    BOOST_TEST((yt == yf));  // keeping the intermediates does not change the arithmetic
    for (const char* name : {"head1.KT", "head1.S_raw", "head2.S", "head3.A", "head3.O"}) {
        BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(test::max_abs_diff(rt.at(g, name), rp.at(g, name)) < 1e-6);
        }
    }
    BOOST_TEST(rf.values[static_cast<std::size_t>(g.at("head1.S_raw"))] == nullptr);
    BOOST_TEST(rf.values[static_cast<std::size_t>(g.at("head1.A"))] == nullptr);
}

BOOST_DATA_TEST_CASE(optimised_is_bytewise_the_same_for_any_thread_count, bdata::make({0, 3}), batch) {
    const Graph g = graphs::build_mha(config(200, static_cast<std::size_t>(batch)));
    for (const std::vector<std::string>& only : {std::vector<std::string>{}, std::vector<std::string>{"head1.A"}}) {
        RunOptions o;
        o.trace = !only.empty();
        o.trace_only = only;
        o.threads = 1;
        const RunResult one = run(g, o);
        for (int threads : {2, 4, 8}) {
            o.threads = threads;
            const RunResult r = run(g, o);
            BOOST_TEST_CONTEXT("threads " << threads << ", traced " << only.size()) {
                BOOST_TEST((r.at(g, "Y") == one.at(g, "Y")));
                if (!only.empty()) BOOST_TEST((r.at(g, "head1.A") == one.at(g, "head1.A")));
            }
        }
    }
}

// Steps become ready while the first ready ones are still being spawned: each must run once
// (a step run twice found its inputs released; this crashed one run in a few hundred).
// Layout chains (Split, Reshape, Permute, Transpose with unseen values between) become one
// strided copy each: the batched heads' Q, K and V out of one QKV (the Split dissolved), O
// back into rows, and a Transpose whose Reshape cannot be a view of it. Values checked
// against index formulas written here, and against the plain run at 1 and 2 threads.
BOOST_AUTO_TEST_CASE(layout_chains_are_one_copy_each) {
    const std::size_t n = 64, h = 4, d = 64, w = h * d;  // 16K elements a chain: the least that folds
    const Tensor x = graphs::random_tensor({n, 3 * w}, DType::f32, 11);
    const Tensor o = graphs::random_tensor({h, n, d}, DType::f32, 12);
    const Tensor z = graphs::random_tensor({64, 256}, DType::f32, 13);
    GraphBuilder b("layouts");
    const Value xv = b.input("X", x), ov = b.input("O", o), zv = b.input("Z", z);
    const std::vector<Value> parts = split(xv, 3, -1);
    const int hi = static_cast<int>(h), di = static_cast<int>(d), ni = static_cast<int>(n);
    for (std::size_t p = 0; p < 3; ++p)
        b.output(permute(reshape(parts[p], {ni, hi, di}), {1, 0, 2}).named(std::string(1, "QKV"[p])));
    b.output(reshape(permute(ov, {1, 0, 2}), {ni, static_cast<int>(w)}).named("O_concat"));
    // (64, 256) transposed, then (128, 128): not a view of the transposed strides; then transposed
    b.output(transpose(reshape(transpose(zv), {128, 128})).named("P"));
    const Graph g = b.build();
    const Plan plan = make_plan(g, kept(g, {}));
    BOOST_TEST(count_steps(plan, StepKind::layout) == 5u);  // Q, K, V; O_concat; Zᵀ reshaped
    BOOST_TEST(count_steps(plan, StepKind::node) == 1u);    // P's own Transpose
    BOOST_TEST(plan.steps.size() == 6u);                    // the Split runs in none of them
    BOOST_TEST(count_steps(make_plan(g, std::vector<bool>(g.values().size(), true)), StepKind::layout) == 0u);

    for (int threads : {1, 2}) {
        RunOptions fast, plain;
        fast.threads = plain.threads = threads;
        plain.optimize = false;
        const RunResult rf = run(g, fast), rp = run(g, plain);
        BOOST_TEST_CONTEXT("threads " << threads) {
            for (std::size_t p = 0; p < 3; ++p) {
                const Tensor& got = rf.at(g, std::string(1, "QKV"[p]));
                BOOST_TEST_REQUIRE((got.shape() == Shape{h, n, d}));
                std::size_t wrong = 0;
                for (std::size_t hh = 0; hh < h; ++hh)
                    for (std::size_t i = 0; i < n; ++i)
                        for (std::size_t c = 0; c < d; ++c)
                            wrong += got.at_flat((hh * n + i) * d + c) != x.at_flat(i * 3 * w + p * w + hh * d + c);
                BOOST_TEST(wrong == 0u, "QKV"[p] << ": " << wrong << " elements misplaced");
                BOOST_TEST((got == rp.at(g, std::string(1, "QKV"[p]))));
            }
            const Tensor& oc = rf.at(g, "O_concat");
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < w; ++j)
                    wrong += oc.at_flat(i * w + j) != o.at_flat(((j / d) * n + i) * d + j % d);
            BOOST_TEST(wrong == 0u, "O_concat: " << wrong << " elements misplaced");
            const Tensor& pt = rf.at(g, "P");  // P[c][r] = R[r][c], R = (Zᵀ's values in order) as (128, 128)
            wrong = 0;
            for (std::size_t c = 0; c < 128; ++c)
                for (std::size_t r = 0; r < 128; ++r) {
                    const std::size_t f = r * 128 + c;  // element f of Zᵀ (256, 64): Z[f % 64][f / 64]
                    wrong += pt.at_flat(c * 128 + r) != z.at_flat((f % 64) * 256 + f / 64);
                }
            BOOST_TEST(wrong == 0u, "P: " << wrong << " elements misplaced");
            BOOST_TEST((oc == rp.at(g, "O_concat")));
            BOOST_TEST((pt == rp.at(g, "P")));
        }
    }
}

// A Split with an output that is kept, or read by a node that is not a layout node, runs:
// the chains start at its outputs (the one-node chains there are left to their nodes). A
// chain of fewer than 16K elements stays as its nodes.
BOOST_AUTO_TEST_CASE(a_split_with_a_seen_output_runs) {
    GraphBuilder b("split_seen");
    const Value xv = b.input("X", graphs::random_tensor({64, 512}, DType::f32, 3));
    const std::vector<Value> parts = split(xv, 2, -1);
    b.output(permute(reshape(parts[0], {64, 4, 64}), {1, 0, 2}).named("A"));
    b.output(scale(parts[1], 2.0).named("B"));
    const Graph g = b.build();
    const Plan plan = make_plan(g, kept(g, {}));
    BOOST_TEST(count_steps(plan, StepKind::layout) == 1u);  // A's Reshape and Permute, from the Split's output
    BOOST_TEST(plan.steps.size() == 3u);                    // Split, layout, Scale
    RunOptions plain;
    plain.optimize = false;
    const RunResult rf = run(g, {}), rp = run(g, plain);
    BOOST_TEST((rf.at(g, "A") == rp.at(g, "A")));
    BOOST_TEST((rf.at(g, "B") == rp.at(g, "B")));

    GraphBuilder small("small_chain");
    const Value y = small.input("Y", graphs::random_tensor({64, 255}, DType::f32, 4));
    small.output(transpose(reshape(y, {255, 64})).named("C"));
    const Graph gs = small.build();
    BOOST_TEST(count_steps(make_plan(gs, kept(gs, {})), StepKind::layout) == 0u);
}

BOOST_AUTO_TEST_CASE(repeated_parallel_runs_run_each_step_once) {
    graphs::MhaConfig c = config(256);
    c.d_model = 64;
    c.heads = 4;
    const Graph g = graphs::build_mha(c);
    Executor executor(4);
    const RunResult first = executor.run(g);
    for (int i = 0; i < 300; ++i) {
        const RunResult r = executor.run(g);
        if (!(r.at(g, "Y") == first.at(g, "Y"))) BOOST_FAIL("run " << i << " differs");
    }
}

BOOST_AUTO_TEST_CASE(partial_trace_keeps_its_values_and_names) {
    const Graph g = graphs::build_mha(config(130));
    RunOptions all;
    all.threads = 2;
    all.trace = true;
    RunOptions some = all;
    some.trace_only = {"head1.KT", "head2.S", "head3.A", "head*.O"};
    const RunResult ra = run(g, all), rs = run(g, some);
    for (const char* name : {"head1.KT", "head2.S", "head3.A", "head1.O", "head2.O", "head3.O", "Y"}) {
        BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(test::max_abs_diff(rs.at(g, name), ra.at(g, name)) < 1e-6);
        }
    }
    BOOST_TEST((rs.at(g, "head1.KT") == ra.at(g, "head1.KT")));
    BOOST_TEST(rs.values[static_cast<std::size_t>(g.at("head1.S_raw"))] == nullptr);
}

BOOST_DATA_TEST_CASE(softmax_kernel_matches_scalar_softmax, bdata::make({1, 3, 7, 8, 15, 16, 17, 33, 100}), len) {
    const std::size_t n = static_cast<std::size_t>(len), rows = 4;
    std::vector<float> x(rows * n);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 9.0);
    const float inf = std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < n; ++j) x[2 * n + j] = -inf;  // a fully masked row
    if (n > 1) x[3 * n + n / 2] = -inf;                       // one masked position
    const float scale = 0.37f;
    std::vector<float> y(x.size());
    softmax_rows<float>(x.data(), y.data(), rows, n, scale, true);
    for (std::size_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(scale * x[r * n + j]));
        for (std::size_t j = 0; j < n; ++j) sum += mx == -INFINITY ? 0 : std::exp(scale * x[r * n + j] - mx);
        for (std::size_t j = 0; j < n; ++j) {
            const double want = mx == -INFINITY ? 0.0 : std::exp(scale * x[r * n + j] - mx) / sum;
            BOOST_TEST_CONTEXT("row " << r << " col " << j) {
                BOOST_TEST(std::abs(y[r * n + j] - want) <= 1e-6);
            }
        }
    }
    // in place gives the same bits
    std::vector<float> z = x;
    softmax_rows<float>(z.data(), z.data(), rows, n, scale, true);
    BOOST_TEST(std::memcmp(z.data(), y.data(), y.size() * sizeof(float)) == 0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_optimize
