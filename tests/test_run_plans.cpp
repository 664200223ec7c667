// Run plans made once and buffers kept across runs (engine/executor.cpp's RunCache): a
// graph's repeated runs give the bits of a first run on a fresh copy of the graph (which
// makes its plan and allocates every buffer anew), for every kept set, with patches and
// hooks, at 1, 2, 4 and 8 threads, and from several threads at once; the values a run
// hands out are never written by a later run; the cache stays within its bounds.
#include <thread>

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/patch.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/reference_mha.hpp"

BOOST_AUTO_TEST_SUITE(test_run_plans)

using namespace attngraph;
namespace bdata = boost::unit_test::data;

namespace {

graphs::MhaConfig mha_config(std::size_t seq, DType dtype, std::size_t batch = 0) {
    graphs::MhaConfig c;
    c.seq = seq;
    c.d_model = 64;
    c.heads = 4;
    c.batch = batch;
    c.dtype = dtype;
    c.seed = 7;
    c.name = "mha";
    return c;
}

struct Case {
    graphs::MhaConfig config;
    graphs::MhaWeights weights;
    Graph graph;
};

// The seed (it runs inline) and two graphs above the executor's inline limit.
const std::vector<Case>& cases() {
    static const std::vector<Case> all = [] {
        std::vector<Case> v;
        auto add = [&](const graphs::MhaConfig& c, const graphs::MhaWeights& w) {
            v.push_back(Case{c, w, graphs::build_mha(c, w)});
        };
        add(graphs::seed_mha_config(), graphs::seed_mha_weights());
        const auto big = mha_config(256, DType::f32);
        add(big, graphs::random_mha_weights(big));
        const auto batched = mha_config(128, DType::f64, 2);
        add(batched, graphs::random_mha_weights(batched));
        return v;
    }();
    return all;
}

// A run of a fresh copy of `g`: the copy's cache is empty, so the run makes its plan and
// allocates every buffer, as every run did before plans were cached.
RunResult uncached_run(const Graph& g, const RunOptions& o) {
    const Graph copy = g;
    BOOST_TEST(run_cache_stats(copy).plans_made == 0u);
    RunResult r = run(copy, o);
    BOOST_TEST(run_cache_stats(copy).plans_made == 1u);
    return r;
}

// Every value either result has, with the same bits; both keep the same values.
void check_same(const Graph& g, const RunResult& a, const RunResult& b) {
    BOOST_TEST_REQUIRE(a.values.size() == b.values.size());
    for (std::size_t id = 0; id < a.values.size(); ++id)
        BOOST_TEST_CONTEXT("value " << g.values()[id].name) {
            BOOST_TEST_REQUIRE((a.values[id] != nullptr) == (b.values[id] != nullptr));
            if (a.values[id]) BOOST_TEST((*a.values[id] == *b.values[id]));
        }
}

std::vector<double> flat(const Tensor& t) {
    std::vector<double> v(t.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.at_flat(i);
    return v;
}

double max_diff(const Tensor& t, const std::vector<double>& want) {
    BOOST_TEST_REQUIRE(t.size() == want.size());
    double d = 0;
    for (std::size_t i = 0; i < want.size(); ++i) d = std::max(d, std::fabs(t.at_flat(i) - want[i]));
    return d;
}

Tensor filled(const Shape& s, DType dtype, double v) {
    Tensor t = zeros(dtype, s);
    t.visit([&](auto& a) {
        for (auto& x : a) x = static_cast<std::decay_t<decltype(x)>>(v);
    });
    return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_plans)

BOOST_DATA_TEST_CASE(repeated_runs_give_a_fresh_graphs_bits, bdata::make({1, 2, 4, 8}), threads) {
    for (const Case& c : cases()) {
        BOOST_TEST_CONTEXT(c.graph.name() << " n=" << c.config.seq << " at " << threads << " threads") {
            const Graph g = c.graph;  // a cache of this test's own
            RunOptions o;
            o.threads = threads;
            const RunResult want = uncached_run(g, o);
            // against plain loops in double: the values are right, not only repeatable
            const double tol = g.dtype() == DType::f32 ? 2e-5 : 1e-12;
            BOOST_TEST(max_diff(want.at(g, "Y"), test::reference_mha(c.config, c.weights)) <= tol);
            Executor ex(threads);
            for (int rep = 0; rep < 5; ++rep) BOOST_TEST_CONTEXT("run " << rep) {
                    check_same(g, ex.run(g, o), want);
                    check_same(g, run(g, o), want);
                }
            const RunCacheStats s = run_cache_stats(g);
            BOOST_TEST(s.plans_made == 1u);  // one kept set, one plan, for both executors
            BOOST_TEST(s.plans == 1u);
            BOOST_TEST(s.arenas_made == 1u);  // one run at a time: the same buffers every run
            BOOST_TEST(s.idle_arenas == 1u);
        }
    }
}

BOOST_AUTO_TEST_CASE(the_seed_values_after_many_runs) {
    const Graph g = load_graph(test::seed_graph());
    RunOptions o;
    o.threads = 1;
    o.trace = true;
    o.trace_only = {"head*.O", "Y"};
    RunResult r;
    for (int rep = 0; rep < 50; ++rep) r = run(g, o);
    for (const char* name : {"head1.O", "head2.O", "Y"})
        BOOST_TEST_CONTEXT(name) { BOOST_TEST(test::max_abs_diff(r.at(g, name), test::seed_values()[name]) <= 2e-6); }
    BOOST_TEST(run_cache_stats(g).plans_made == 1u);
}

BOOST_DATA_TEST_CASE(each_kept_set_has_its_plan, bdata::make({1, 4}), threads) {
    const Graph g = cases()[1].graph;
    std::vector<RunOptions> options(7);
    options[1].trace = true;  // everything
    options[2].trace = true;
    options[2].trace_only = {"head1.*"};
    options[3].trace = true;
    options[3].trace_only = {"head2.A", "O_concat"};
    options[4].keep_all = true;
    options[4].trace_only = {"head1.*"};  // moot with keep_all: the same plan as keep_all alone
    options[5].check_finite = true;
    options[6].keep_all = true;
    std::vector<RunResult> want;
    for (RunOptions& o : options) {
        o.threads = threads;
        want.push_back(uncached_run(g, o));
    }
    // interleaved, twice: each run finds its plan and gives its fresh run's bits
    for (int round = 0; round < 2; ++round)
        for (std::size_t k = 0; k < options.size(); ++k)
            BOOST_TEST_CONTEXT("options " << k << ", round " << round) { check_same(g, run(g, options[k]), want[k]); }
    // keep_all ignores the globs: 6 plans for 7 option sets (trace = true keeps what
    // keep_all keeps, but is a key of its own)
    BOOST_TEST(run_cache_stats(g).plans_made == 6u);
    BOOST_TEST(want[2].values[static_cast<std::size_t>(g.at("head1.Q"))] != nullptr);
    BOOST_TEST(want[2].values[static_cast<std::size_t>(g.at("head2.Q"))] == nullptr);
}

BOOST_AUTO_TEST_CASE(the_cache_keeps_at_most_eight_plans) {
    const Graph g = cases()[0].graph;
    RunOptions plain;
    const RunResult want_plain = uncached_run(g, plain);
    const char* names[] = {"head1.Q", "head1.K", "head1.V", "head1.KT", "head1.S_raw", "head1.S",
                           "head1.A", "head1.O", "head2.Q", "head2.K",  "head2.V",     "O_concat"};
    for (int round = 0; round < 2; ++round)
        for (const char* name : names) {
            RunOptions o;
            o.trace = true;
            o.trace_only = {name};
            const RunResult r = run(g, o);
            BOOST_TEST_CONTEXT(name) {
                BOOST_TEST_REQUIRE(r.values[static_cast<std::size_t>(g.at(name))] != nullptr);
                check_same(g, r, uncached_run(g, o));
            }
            BOOST_TEST(run_cache_stats(g).plans <= 8u);
            BOOST_TEST(run_cache_stats(g).idle_arenas <= 4u);
        }
    // the least recently used went: every round made its 12 plans again
    BOOST_TEST(run_cache_stats(g).plans_made == 24u);
    check_same(g, run(g, plain), want_plain);
}

BOOST_DATA_TEST_CASE(patched_runs_and_the_runs_after_them, bdata::make({1, 2, 4, 8}), threads) {
    for (const std::size_t which : {std::size_t{0}, std::size_t{1}}) {
        const Graph g = cases()[which].graph;
        BOOST_TEST_CONTEXT(g.name() << " n=" << cases()[which].config.seq) {
            RunOptions plain;
            plain.threads = threads;
            const RunResult want_plain = uncached_run(g, plain);
            const Shape a_shape = g.value(g.at("head2.A")).shape;
            RunOptions patched = plain;
            add_patch(g, patched, "head2.A", filled(a_shape, g.dtype(), 1.0 / static_cast<double>(a_shape.back())));
            RunOptions hooked = plain;
            add_hook(g, hooked, "head1.O", [](const Tensor& t) {
                Tensor doubled = t;
                doubled.visit([](auto& a) { a *= 2; });
                return doubled;
            });
            const RunResult want_patched = uncached_run(g, patched), want_hooked = uncached_run(g, hooked);
            BOOST_TEST(!(want_patched.at(g, "Y") == want_plain.at(g, "Y")));
            BOOST_TEST(!(want_hooked.at(g, "Y") == want_plain.at(g, "Y")));
            for (int rep = 0; rep < 3; ++rep) {
                check_same(g, run(g, patched), want_patched);
                check_same(g, run(g, plain), want_plain);  // nothing of the patch stays behind
                check_same(g, run(g, hooked), want_hooked);
                check_same(g, run(g, plain), want_plain);
            }
            // plain and patched runs are two plans (a patched run is not optimised); the
            // patched and hooked runs share theirs
            BOOST_TEST(run_cache_stats(g).plans_made == 2u);
        }
    }
}

BOOST_AUTO_TEST_CASE(a_results_values_outlive_the_next_runs) {
    const Case& c = cases()[1];
    const Graph g = c.graph;
    RunOptions o;
    o.trace = true;
    o.trace_only = {"head1.Q", "Y"};
    const RunResult first = run(g, o);
    const std::vector<double> y1 = flat(first.at(g, "Y")), q1 = flat(first.at(g, "head1.Q"));
    // other inputs, same shapes: the runs share the graph's plans and buffers
    graphs::MhaWeights w2 = c.weights;
    w2.x = graphs::random_tensor(c.weights.x.shape(), DType::f32, 99);
    const Graph g2 = g.with_tensors({{"X", w2.x}});
    for (int rep = 0; rep < 3; ++rep) {
        const RunResult other = run(g2, o);
        BOOST_TEST(max_diff(other.at(g2, "Y"), test::reference_mha(c.config, w2)) <= 2e-5);
        BOOST_TEST(flat(first.at(g, "Y")) == y1);
        BOOST_TEST(flat(first.at(g, "head1.Q")) == q1);
        BOOST_TEST(other.at(g2, "Y").as<float>().data() != first.at(g, "Y").as<float>().data());
    }
    BOOST_TEST(max_diff(first.at(g, "Y"), test::reference_mha(c.config, c.weights)) <= 2e-5);
    BOOST_TEST(run_cache_stats(g2).plans_made == 1u);  // g's cache: g2 made no plan of its own
    BOOST_TEST(run_cache_stats(g).plans_made == 1u);
}

BOOST_AUTO_TEST_CASE(with_tensors_shares_the_cache_only_when_no_shape_changes) {
    const Case& c = cases()[1];
    const Graph g = c.graph;
    RunOptions o;
    run(g, o);
    BOOST_TEST(run_cache_stats(g).plans_made == 1u);
    const Graph copy = g;  // a copy's cache is its own
    BOOST_TEST(run_cache_stats(copy).plans_made == 0u);
    // a shorter sequence: other shapes, so other plans
    graphs::MhaConfig c2 = c.config;
    c2.seq = 5;
    graphs::MhaWeights w2 = c.weights;
    w2.x = graphs::random_tensor({5, c.config.d_model}, DType::f32, 3);
    const Graph shorter = g.with_tensors({{"X", w2.x}});
    BOOST_TEST(run_cache_stats(shorter).plans_made == 0u);
    for (int rep = 0; rep < 2; ++rep)
        BOOST_TEST(max_diff(run(shorter, o).at(shorter, "Y"), test::reference_mha(c2, w2)) <= 2e-5);
    BOOST_TEST(run_cache_stats(shorter).plans_made == 1u);
    BOOST_TEST(run_cache_stats(g).plans_made == 1u);
    BOOST_TEST(max_diff(run(g, o).at(g, "Y"), test::reference_mha(c.config, c.weights)) <= 2e-5);
}

BOOST_AUTO_TEST_CASE(a_run_over_the_arena_limit_allocates_per_run) {
    // X (4096 x 4097) f32 is just over run_arena_max_bytes: its unseen Scale has no arena
    const std::size_t rows = 4096, cols = 4097;
    BOOST_TEST_REQUIRE(rows * cols * sizeof(float) > run_arena_max_bytes);
    GraphBuilder gb("big", DType::f32);
    Value x = gb.input("X", graphs::random_tensor({rows, cols}, DType::f32, 5));
    Value y = scale(scale(x, 0.5).named("half"), 3.0).named("Y");
    gb.output(y);
    const Graph g = gb.build();
    RunOptions o;
    o.threads = 2;
    const Tensor& xin = *g.value(g.at("X")).data;
    for (int rep = 0; rep < 2; ++rep) {
        const RunResult r = run(g, o);
        const float *ya = r.at(g, "Y").as<float>().data(), *xa = xin.as<float>().data();
        std::size_t wrong = 0;  // (16.8M values: no call per element at the tests' -O0)
        for (std::size_t i = 0; i < rows * cols; ++i) wrong += ya[i] != 3.0f * (0.5f * xa[i]);
        BOOST_TEST(wrong == 0u);
        BOOST_TEST(r.values[static_cast<std::size_t>(g.at("half"))] == nullptr);
    }
    BOOST_TEST(run_cache_stats(g).plans_made == 1u);
    BOOST_TEST(run_cache_stats(g).arenas_made == 0u);
    // the same graph one size smaller has its arena
    const Graph small = g.with_tensors({{"X", graphs::random_tensor({rows, cols - 2}, DType::f32, 5)}});
    run(small, o);
    run(small, o);
    BOOST_TEST(run_cache_stats(small).arenas_made == 1u);
}

// Arenas waiting between runs hold at most run_arena_max_bytes together: a run that starts
// while another holds the graph's arena makes a second one, and of the two only one stays
// when their buffers need more than that; a small graph's stay both.
BOOST_AUTO_TEST_CASE(idle_arenas_hold_at_most_the_arena_limit) {
    for (const std::size_t cols : {std::size_t{2560}, std::size_t{16}}) {
        const std::size_t rows = 2048;  // 2048 x 2560 f32: 20 MiB a value, 40 MiB an arena
        BOOST_TEST_CONTEXT("cols " << cols) {
            GraphBuilder gb("two_unseen", DType::f32);
            Value x = gb.input("X", graphs::random_tensor({rows, cols}, DType::f32, 7));
            gb.output(scale(scale(scale(x, 0.5).named("a"), 3.0).named("b"), 0.25).named("Y"));
            const Graph g = gb.build();
            const std::size_t arena_bytes = 2 * rows * cols * sizeof(float);
            BOOST_TEST_REQUIRE((cols == 16 || 2 * arena_bytes > run_arena_max_bytes));
            BOOST_TEST_REQUIRE(arena_bytes <= run_arena_max_bytes);
            Executor inner(1);
            std::atomic<bool> nested{false};
            RunResult second;
            RunOptions o;
            o.threads = 1;
            // the second run starts and ends while the first holds its arena
            o.progress = [&](std::size_t, std::size_t) {
                if (!nested.exchange(true)) second = inner.run(g, RunOptions{});
            };
            const RunResult first = run(g, o);
            BOOST_TEST(nested.load());
            const float* xa = g.value(g.at("X")).data->as<float>().data();
            for (const RunResult* r : {&first, static_cast<const RunResult*>(&second)}) {
                const float* y = r->at(g, "Y").as<float>().data();
                std::size_t wrong = 0;  // (no call per element at the tests' -O0)
                for (std::size_t i = 0; i < rows * cols; ++i) wrong += y[i] != 0.25f * (3.0f * (0.5f * xa[i]));
                BOOST_TEST(wrong == 0u);
            }
            BOOST_TEST(run_cache_stats(g).arenas_made == 2u);
            BOOST_TEST(run_cache_stats(g).idle_arenas == (cols == 16 ? 2u : 1u));
        }
    }
}

// A moved-from graph (its nodes and its run cache went with the move) refuses to run with an
// Error instead of crashing; the graph it was moved into runs with the seed's values.
BOOST_AUTO_TEST_CASE(a_moved_from_graph_refuses_to_run) {
    Graph from = cases()[0].graph;
    const RunResult want = uncached_run(from, {});
    const Graph to = std::move(from);
    BOOST_CHECK_EXCEPTION(run(from, {}), Error, [](const Error& e) {
        return std::string(e.what()).find("moved from") != std::string::npos;
    });
    BOOST_TEST((run(to, {}).at(to, "Y") == want.at(to, "Y")));
}

// Several threads run one graph at once, each on its own executor of 1, 2, 4 or 8 threads
// and all on one shared executor: every run gets the bits of the fresh run.
BOOST_AUTO_TEST_CASE(concurrent_runs_of_one_graph) {
    for (const std::size_t which : {std::size_t{0}, std::size_t{1}}) {
        const Graph g = cases()[which].graph;
        BOOST_TEST_CONTEXT(g.name() << " n=" << cases()[which].config.seq) {
            RunOptions plain, traced;
            traced.trace = true;
            traced.trace_only = {"head1.*", "Y"};
            const RunResult want_plain = uncached_run(g, plain), want_traced = uncached_run(g, traced);
            auto shared = std::make_shared<Executor>(2);
            std::atomic<int> mismatches{0}, runs{0};
            const int reps = which == 0 ? 200 : 10;
            std::vector<std::thread> workers;
            for (int t : {1, 2, 4, 8}) {
                workers.emplace_back([&, t] {
                    Executor own(t);
                    for (int rep = 0; rep < reps; ++rep) {
                        const bool trace = rep % 3 == 2;
                        const RunOptions& o = trace ? traced : plain;
                        const RunResult& want = trace ? want_traced : want_plain;
                        const RunResult r = (rep % 2 ? *shared : own).run(g, o);
                        for (std::size_t id = 0; id < r.values.size(); ++id)
                            if ((r.values[id] != nullptr) != (want.values[id] != nullptr) ||
                                (r.values[id] && !(*r.values[id] == *want.values[id])))
                                ++mismatches;
                        ++runs;
                    }
                });
            }
            for (auto& w : workers) w.join();
            BOOST_TEST(mismatches == 0);
            BOOST_TEST(runs == 4 * reps);
            const RunCacheStats s = run_cache_stats(g);
            BOOST_TEST(s.plans_made == 2u);    // each of the two kept sets planned once
            // arenas are reused (an arena returned while 4 wait idle is dropped, and a later run
            // makes a new one, so the count made has no fixed bound below the runs)
            BOOST_TEST(s.arenas_made < static_cast<std::size_t>(runs.load()));
            BOOST_TEST(s.idle_arenas <= 4u);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_run_plans
