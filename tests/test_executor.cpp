// The executor: bit-identical results at 1, 2, 4 and 8 threads on graphs large enough for
// the parallel path (and on the seed, which runs inline), what a run keeps (trace_only
// globs, released intermediates, keep_all), check_finite, errors from inside an op.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/buffer_pool.hpp"
#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/optimize.hpp"
#include "engine/parallel.hpp"
#include "engine/sanitizers.hpp"
#include "engine/trace.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/op_test.hpp"
#include "support/reference_mha.hpp"

#ifdef ATTNGRAPH_ASAN
#include <sanitizer/asan_interface.h>
#endif

BOOST_AUTO_TEST_SUITE(test_executor)

using namespace attngraph;
using namespace attngraph::test;
namespace bdata = boost::unit_test::data;

namespace {

graphs::MhaConfig big_config(DType dtype, std::size_t batch = 0) {
    graphs::MhaConfig c;
    c.seq = 256;
    c.d_model = 128;
    c.heads = 4;
    c.batch = batch;
    c.dtype = dtype;
    c.seed = 42;
    c.name = "mha_big";
    return c;
}

// The graphs of the thread-count test, each run once at 1 thread as the reference.
struct Reference {
    Graph graph;
    RunResult result;
};
const std::map<std::string, Reference>& references() {
    static const std::map<std::string, Reference> refs = [] {
        std::map<std::string, Reference> m;
        RunOptions o;
        o.threads = 1;
        o.keep_all = true;
        auto add = [&](const std::string& name, Graph g) {
            RunResult r = run(g, o);
            m.emplace(name, Reference{std::move(g), std::move(r)});
        };
        add("mha n=256 f32", graphs::build_mha(big_config(DType::f32)));
        add("mha n=256 f64", graphs::build_mha(big_config(DType::f64)));
        add("mha batch=2 n=256 f32", graphs::build_mha(big_config(DType::f32, 2)));
        add("seed n=3", load_graph(seed_graph()));
        return m;
    }();
    return refs;
}

std::size_t total_output_elements(const Graph& g) {
    std::size_t n = 0;
    for (const auto& node : g.nodes())
        for (int id : node.outputs) n += element_count(g.value(id).shape);
    return n;
}

}  // namespace

namespace {

// An op whose forward throws, to see errors cross the worker threads.
struct FailingAttrs {};
}  // namespace
BOOST_AUTO_TEST_SUITE_END()  // Hana adapts structs in the global namespace only
BOOST_HANA_ADAPT_STRUCT(test_executor::FailingAttrs);
BOOST_AUTO_TEST_SUITE(test_executor)
namespace {
struct Failing {
    static constexpr const char* name = "TestFailing";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = FailingAttrs;
    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return in[0]; }
    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "fail(" + v[0] + ")"; }
    template <class T>
    static void forward(const Attrs&, In<T>, Out<T>) {
        throw IoError("TestFailing always fails");
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(executor)

BOOST_DATA_TEST_CASE(bit_identical_for_any_thread_count, bdata::make({1, 2, 4, 8}), threads) {
    for (const auto& [label, ref] : references()) {
        BOOST_TEST_CONTEXT(label << " at " << threads << " threads") {
            RunOptions o;
            o.threads = threads;
            o.keep_all = true;
            const RunResult r = run(ref.graph, o);
            BOOST_TEST(r.complete);
            std::size_t compared = 0;
            for (std::size_t id = 0; id < ref.graph.values().size(); ++id) {
                BOOST_TEST_REQUIRE(r.values[id] != nullptr);
                BOOST_TEST((*r.values[id] == *ref.result.values[id]), "value " << ref.graph.values()[id].name);
                ++compared;
            }
            BOOST_TEST(compared == ref.graph.values().size());
            // the same Executor run twice gives the same bits too
            Executor ex(threads);
            BOOST_TEST(ex.threads() == threads);
            const RunResult a = ex.run(ref.graph, o), b = ex.run(ref.graph, o);
            const int y = ref.graph.outputs().at(0);
            BOOST_TEST((*a.values[static_cast<std::size_t>(y)] == *b.values[static_cast<std::size_t>(y)]));
            BOOST_TEST((*a.values[static_cast<std::size_t>(y)] == *ref.result.values[static_cast<std::size_t>(y)]));
        }
    }
}

BOOST_AUTO_TEST_CASE(big_graphs_take_the_parallel_path_and_seed_does_not) {
    // the executor runs graphs with fewer than 65536 output elements inline
    BOOST_TEST(total_output_elements(references().at("mha n=256 f32").graph) > 65536u);
    BOOST_TEST(total_output_elements(references().at("mha batch=2 n=256 f32").graph) > 65536u);
    BOOST_TEST(total_output_elements(references().at("seed n=3").graph) < 65536u);
}

BOOST_DATA_TEST_CASE(big_graph_matches_plain_loops, bdata::make({1, 4}), threads) {
    const auto c = big_config(DType::f64);
    const auto w = graphs::random_mha_weights(c);
    const Graph g = graphs::build_mha(c, w);
    RunOptions o;
    o.threads = threads;
    const RunResult r = run(g, o);
    const Tensor& y = r.at(g, "Y");
    const auto want = test::reference_mha(c, w);
    BOOST_TEST_REQUIRE(y.size() == want.size());
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(y.at_flat(i) - want[i]));
    BOOST_TEST(worst < 1e-12);
    // and f32 within f32 rounding
    auto c32 = c;
    c32.dtype = DType::f32;
    const Graph g32 = graphs::build_mha(c32, graphs::random_mha_weights(c32));
    const RunResult r32 = run(g32, o);
    const Tensor& y32 = r32.at(g32, "Y");
    worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(y32.at_flat(i) - want[i]));
    BOOST_TEST(worst < 1e-5);
}

BOOST_DATA_TEST_CASE(trace_only_keeps_exactly_the_matching_values, bdata::make({1, 4}), threads) {
    for (const std::string label : {"seed n=3", "mha n=256 f32"}) {
        const Graph& g = references().at(label).graph;
        const std::vector<std::string> globs = {"head1.*", "O_con?at"};
        RunOptions o;
        o.threads = threads;
        o.trace = true;
        o.trace_only = globs;
        const RunResult r = run(g, o);
        const int y = g.at("Y");
        std::size_t kept = 0;
        for (std::size_t id = 0; id < g.values().size(); ++id) {
            const std::string& name = g.values()[id].name;
            const bool match = name.rfind("head1.", 0) == 0 || name == "O_concat";
            BOOST_TEST_CONTEXT(label << ": " << name) {
                BOOST_TEST((r.values[id] != nullptr) == (match || static_cast<int>(id) == y));
            }
            kept += match;
        }
        BOOST_TEST(kept == 8u + 6u + 1u);  // head1's eight nodes and six tensors, O_concat
        // the trace holds the matching names only (the output is kept for printing, not traced)
        const Trace t = make_trace(g, r, globs);
        BOOST_TEST(t.entries.size() == kept);
        BOOST_TEST(t.find("Y") == nullptr);
        BOOST_TEST(t.find("head2.A") == nullptr);
        BOOST_TEST_REQUIRE(t.find("head1.A") != nullptr);
        BOOST_TEST(t.find("head1.A")->op == "Softmax");
        BOOST_TEST(t.find("head1.Wq")->kind == "param");
        // kept values are the same bits as a keep-all run
        const RunResult& all = references().at(label).result;
        for (std::size_t id = 0; id < g.values().size(); ++id)
            if (r.values[id]) BOOST_TEST((*r.values[id] == *all.values[id]));
    }
}

BOOST_DATA_TEST_CASE(untraced_intermediates_are_released, bdata::make({1, 4}), threads) {
    for (const std::string label : {"seed n=3", "mha n=256 f64"}) {
        const Graph& g = references().at(label).graph;
        RunOptions o;
        o.threads = threads;
        const RunResult r = run(g, o);
        const int y = g.at("Y");
        for (std::size_t id = 0; id < g.values().size(); ++id)
            BOOST_TEST_CONTEXT(label << ": " << g.values()[id].name) {
                BOOST_TEST((r.values[id] != nullptr) == (static_cast<int>(id) == y));
            }
        BOOST_TEST((r.at(g, "Y") == *references().at(label).result.values[static_cast<std::size_t>(y)]));
        BOOST_CHECK_THROW(r.at(g, "head1.A"), GraphError);
        BOOST_CHECK_THROW(r.at(g, "no.such.name"), GraphError);
        // every step of the plan was timed under the node it writes; nodes folded into
        // another step have no time of their own
        BOOST_TEST_REQUIRE(r.seconds.size() == g.nodes().size());
        std::vector<bool> keep(g.values().size(), false);
        keep[static_cast<std::size_t>(y)] = true;
        std::vector<bool> timed(g.nodes().size(), false);
        for (const Step& step : make_plan(g, keep).steps) timed[static_cast<std::size_t>(step.node)] = true;
        for (std::size_t i = 0; i < g.nodes().size(); ++i) BOOST_TEST_CONTEXT(label << ": node " << g.nodes()[i].name) {
                if (timed[i])
                    BOOST_TEST(r.seconds[i] > 0);
                else
                    BOOST_TEST(r.seconds[i] == 0);
            }
        // in seconds, not clock ticks (a run of steps in sequence counts ticks and scales them):
        // steps one after another (one thread, or the seed's little work inline) add up to no
        // more than the wall time around the run
        if (threads == 1 || label == "seed n=3") {
            const auto start = std::chrono::steady_clock::now();
            const RunResult again = run(g, o);
            const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const double steps = std::accumulate(again.seconds.begin(), again.seconds.end(), 0.0);
            BOOST_TEST(steps > 0);
            BOOST_TEST(steps <= wall);
        }
        // trace = true without globs keeps everything, like keep_all
        o.trace = true;
        const RunResult t = run(g, o);
        for (std::size_t id = 0; id < g.values().size(); ++id) BOOST_TEST(t.values[id] != nullptr);
    }
}

BOOST_AUTO_TEST_CASE(keep_all_keeps_every_value) {
    const Graph& g = references().at("seed n=3").graph;
    RunOptions o;
    o.keep_all = true;
    o.trace = true;
    o.trace_only = {"nothing*"};  // keep_all wins over the globs
    const RunResult r = run(g, o);
    BOOST_TEST(r.values.size() == g.values().size());
    for (std::size_t id = 0; id < g.values().size(); ++id) BOOST_TEST(r.values[id] != nullptr);
    BOOST_TEST(g.values().size() == 33u);
}

// The VmFlags of the mapping of /proc/self/smaps that holds `address` ("" when none does).
std::string vm_flags_at(const void* address) {
    std::ifstream smaps("/proc/self/smaps");
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long long lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
            inside = lo <= a && a < hi;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return line;
        }
    }
    return "";
}

BOOST_AUTO_TEST_CASE(a_large_run_value_is_advised_for_huge_pages) {
    // 1024 x 1024 f32 = 4 MiB = huge_page_min_bytes: the run's output buffer is advised
    // (MADV_HUGEPAGE, "hg" in its mapping's VmFlags), and holds x·2 as a small one would
    static_assert(huge_page_min_bytes == std::size_t{4} << 20);
    Array<float> xs = Array<float>::from_shape({1024, 1024});
    for (std::size_t i = 0; i < xs.size(); ++i) xs.data()[i] = static_cast<float>(i % 1000) * 0.25f;
    GraphBuilder gb("huge", DType::f32);
    Value x = gb.input("X", Tensor(xs));
    Value a = scale(x, 2).named("a");
    gb.output(a);
    const Graph g = gb.build();
    RunOptions o;
    o.threads = 2;
    const RunResult r = run(g, o);
    const Array<float>& out = r.at(g, "a").as<float>();
    for (std::size_t i = 0; i < out.size(); i += 4099) BOOST_TEST(out.data()[i] == xs.data()[i] * 2.0f);
    // the 2 MiB-aligned middle of the buffer (the advice covers the aligned part only)
    const auto mid = (reinterpret_cast<std::uintptr_t>(out.data()) + (std::uintptr_t{2} << 20)) &
                     ~((std::uintptr_t{2} << 20) - 1);
    const std::string flags = vm_flags_at(reinterpret_cast<const void*>(mid));
    BOOST_TEST_INFO("VmFlags of the output's mapping: " << flags);
    if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
        BOOST_TEST(flags.find(" hg") != std::string::npos);
    else  // a kernel without transparent huge pages takes no such advice
        BOOST_TEST(flags.find(" hg") == std::string::npos);
}

// A run's value of 4 MiB or more, once the caller lets it go, lends its buffer to the next
// run (engine/buffer_pool.hpp); a value the caller still holds is never written again.
BOOST_AUTO_TEST_CASE(let_go_values_lend_their_buffers_to_the_next_run) {
    static_assert(buffer_pool_min_bytes == std::size_t{4} << 20);
    release_buffer_pool();
    Array<float> xs = Array<float>::from_shape({1024, 1024});
    for (std::size_t i = 0; i < xs.size(); ++i) xs.data()[i] = static_cast<float>(i % 997) - 300.0f;
    GraphBuilder gb("pooled", DType::f32);
    Value x = gb.input("X", Tensor(xs));
    Value a = scale(x, 2).named("a");  // 4 MiB
    Value b = add(a, x).named("b");    // 4 MiB
    gb.output(b);
    const Graph g = gb.build();
    RunOptions o;
    o.threads = 2;
    o.trace = true;
    const auto check = [&](const RunResult& r) {
        const float* va = r.at(g, "a").as<float>().data();
        const float* vb = r.at(g, "b").as<float>().data();
        for (std::size_t i = 0; i < xs.size(); ++i) {
            if (va[i] != xs.data()[i] * 2.0f || vb[i] != xs.data()[i] * 3.0f) {
                BOOST_ERROR("element " << i << ": a " << va[i] << ", b " << vb[i] << ", x " << xs.data()[i]);
                return;
            }
        }
    };
    const BufferPoolStats start = buffer_pool_stats();
    BOOST_TEST(start.buffers == 0u);
    auto first = std::make_unique<RunResult>(run(g, o));
    check(*first);
    const float* a_buffer = first->at(g, "a").as<float>().data();
    const float* b_buffer = first->at(g, "b").as<float>().data();
    // held: the next run writes elsewhere, and the held values keep their numbers
    const RunResult second = run(g, o);
    check(second);
    check(*first);
    BOOST_TEST(second.at(g, "a").as<float>().data() != a_buffer);
    BOOST_TEST(second.at(g, "b").as<float>().data() != b_buffer);
    BOOST_TEST(buffer_pool_stats().taken == start.taken);
    // `a` still referenced from outside the result: only b's buffer returns
    std::shared_ptr<const Tensor> a_held = first->values[static_cast<std::size_t>(g.at("a"))];
    first.reset();
    BOOST_TEST(buffer_pool_stats().buffers == 1u);
    BOOST_TEST(buffer_pool_stats().bytes == std::size_t{4} << 20);
    const RunResult third = run(g, o);
    check(third);
    BOOST_TEST(a_held->as<float>().data() == a_buffer);
    BOOST_TEST(third.at(g, "a").as<float>().data() == b_buffer);  // the first step takes it
    BOOST_TEST(third.at(g, "b").as<float>().data() != a_buffer);
    BOOST_TEST(buffer_pool_stats().taken == start.taken + 1);
    BOOST_TEST(buffer_pool_stats().buffers == 0u);
    for (std::size_t i = 0; i < xs.size(); i += 4099) BOOST_TEST(a_held->as<float>().data()[i] == xs.data()[i] * 2.0f);
    a_held.reset();
    BOOST_TEST(buffer_pool_stats().buffers == 1u);
    release_buffer_pool();
    BOOST_TEST(buffer_pool_stats().buffers == 0u);
}

// The pool matches dtype and element count (any shape), takes the newest buffer first, and
// lets small values go as usual.
BOOST_AUTO_TEST_CASE(the_buffer_pool_matches_dtype_and_size) {
    release_buffer_pool();
    const std::size_t n = (std::size_t{4} << 20) / sizeof(float);
    const auto filled = [](std::size_t count, float v) {
        Array<float> a = Array<float>::from_shape({count});
        std::fill(a.begin(), a.end(), v);
        return a;
    };
    std::shared_ptr<const Tensor> older = share_pooled(Tensor(filled(n, 1.0f)));
    std::shared_ptr<const Tensor> newer = share_pooled(Tensor(filled(n, 2.0f)));
    std::shared_ptr<const Tensor> small = share_pooled(Tensor(filled(n - 1, 3.0f)));
    const float* newer_buffer = newer->as<float>().data();
    older.reset();
    newer.reset();
    small.reset();
    BOOST_TEST(buffer_pool_stats().buffers == 2u);  // not the one under 4 MiB
#ifdef ATTNGRAPH_ASAN
    // a waiting buffer is poisoned: a pointer kept past the value's release is reported
    BOOST_TEST(__asan_address_is_poisoned(newer_buffer + n / 2));
#endif
    Array<double> d;
    BOOST_TEST(!take_pooled(d, Shape{n / 2}));  // the same bytes, another dtype
    Array<float> f;
    BOOST_TEST(!take_pooled(f, Shape{n + 1}));
    BOOST_TEST(take_pooled(f, Shape{512, n / 512}));
    BOOST_TEST(f.data() == newer_buffer);
#ifdef ATTNGRAPH_ASAN
    BOOST_TEST(!__asan_address_is_poisoned(f.data() + n / 2));
#endif
    BOOST_TEST((Shape(f.shape().begin(), f.shape().end()) == Shape{512, n / 512}));
    BOOST_TEST(f(511, n / 512 - 1) == 2.0f);          // the contents are whatever they were
    Array<float> g = uninitialized<float>(Shape{n});  // the older one, through the allocator
    BOOST_TEST(g(0) == 1.0f);
    BOOST_TEST(buffer_pool_stats().buffers == 0u);
}

BOOST_AUTO_TEST_CASE(explicit_outputs_and_tensor_outputs_are_kept) {
    GraphBuilder gb("outs", DType::f64);
    Value x = gb.input("X", Tensor(literal<double>({2, 2}, {1, 2, 3, 4})));
    Value a = scale(x, 2).named("a");
    Value b = scale(a, 3).named("b");
    scale(b, 5).named("dead_end");  // consumed by nothing, not an output
    gb.output(a);
    gb.output(x);
    const Graph g = gb.build();
    const RunResult r = run(g, {});
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("a"))] != nullptr);
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("X"))] != nullptr);
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("b"))] == nullptr);
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("dead_end"))] == nullptr);
    check_close(r.at(g, "a").as<double>(), {2, 2}, {2, 4, 6, 8}, 0);
}

namespace {

// X (rows x cols) -> big = 1e30·X (inf in f32 where |X| > 3.4e8/1e30... i.e. the 1e10 entries)
//   -> A = softmax(big) (NaN) -> O = A·W; plus an independent healthy branch.
Graph overflow_graph(std::size_t rows, std::size_t cols) {
    GraphBuilder gb("overflow", DType::f32);
    Array<float> xd = random_array<float>({rows, cols}, 5);
    xd(rows / 2, cols / 2) = 1e10f;
    Value x = gb.input("X", Tensor(xd));
    Value w = gb.param("W", Tensor(random_array<float>({cols, cols}, 6)));
    Value healthy = matmul(softmax(x).named("healthy.A"), w).named("healthy.O");
    Value big = scale(x, 1e30).named("big");
    Value a = softmax(big).named("A");
    Value o = matmul(a, w).named("O");
    gb.output(o);
    gb.output(healthy);
    return gb.build();
}

}  // namespace

BOOST_DATA_TEST_CASE(check_finite_stops_at_the_first_non_finite_node, bdata::make({1, 2, 4, 8}) * bdata::make({0, 1}),
                     threads, big) {
    const std::size_t rows = big ? 400 : 3, cols = big ? 300 : 4;
    const Graph g = overflow_graph(rows, cols);
    BOOST_TEST((total_output_elements(g) > 65536u) == (big == 1));
    RunOptions o;
    o.threads = threads;
    o.keep_all = true;
    o.check_finite = true;
    const RunResult r = run(g, o);
    BOOST_TEST(!r.complete);
    BOOST_TEST(r.stopped_at == "big");
    BOOST_TEST(r.stop_reason.find("1 non-finite") != std::string::npos, r.stop_reason);
    // the bad node's output is there to look at; nothing after it ran
    BOOST_TEST_REQUIRE(r.values[static_cast<std::size_t>(g.at("big"))] != nullptr);
    BOOST_TEST(std::isinf(r.at(g, "big").at_flat((rows / 2) * cols + cols / 2)));
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("A"))] == nullptr);
    BOOST_TEST(r.values[static_cast<std::size_t>(g.at("O"))] == nullptr);
    const Trace t = make_trace(g, r);
    BOOST_TEST(!t.complete);
    BOOST_TEST(t.note.find("big") != std::string::npos);

    // without check_finite the run completes, NaN and all
    o.check_finite = false;
    const RunResult full = run(g, o);
    BOOST_TEST(full.complete);
    BOOST_TEST(std::isnan(full.at(g, "A").at_flat((rows / 2) * cols)));
}

// A Mask's -inf, and -inf carried on from an input holding it, are masked scores: a causal
// graph runs through. -inf a node makes from finite inputs, and +inf or NaN anywhere, stop it.
BOOST_AUTO_TEST_CASE(check_finite_lets_masked_scores_through) {
    auto graph = [](double factor, double x00) {
        GraphBuilder gb("masked", DType::f32);
        Array<float> xd = random_array<float>({5, 4}, 7);
        xd(0, 0) = static_cast<float>(x00);
        Value x = gb.input("X", Tensor(xd));
        Value s = mask_causal(matmul(x, transpose(x)).named("S_raw")).named("S_masked");
        Value scaled = scale(s, factor).named("S");
        gb.output(matmul(softmax(scaled).named("A"), x).named("O"));
        return gb.build();
    };
    RunOptions o;
    o.check_finite = true;
    o.keep_all = true;
    const Graph ok = graph(0.5, 1.0);
    const RunResult r = run(ok, o);
    BOOST_TEST(r.complete, r.stopped_at << ": " << r.stop_reason);
    BOOST_TEST(std::isinf(r.at(ok, "S").at_flat(1)));  // (0, 1) masked: -inf, let through
    BOOST_TEST(r.at(ok, "A").at_flat(0) == 1.0);         // row 0 sees key 0 alone
    // X(0, 0) = 1e20: S_raw(0, 0) = 1e40 overflows to +inf
    const RunResult over = run(graph(0.5, 1e20), o);
    BOOST_TEST(!over.complete);
    BOOST_TEST(over.stopped_at == "S_raw");
    BOOST_TEST(over.stop_reason.find("1 non-finite") != std::string::npos, over.stop_reason);
    // a negative Scale turns the masked -inf into +inf: that stops the run
    const Graph flipped = graph(-1.0, 1.0);
    const RunResult f = run(flipped, o);
    BOOST_TEST(!f.complete);
    BOOST_TEST(f.stopped_at == "S");
    // with no -inf in its input, a -inf a node makes from finite values stops the run
    GraphBuilder gb("neg", DType::f32);
    Value x = gb.input("X", Tensor(Array<float>({2}, -1e30f)));
    gb.output(scale(x, 1e20).named("Y"));
    const Graph neg = gb.build();
    const RunResult n = run(neg, o);
    BOOST_TEST(!n.complete);
    BOOST_TEST(n.stopped_at == "Y");
    BOOST_TEST(n.stop_reason.find("2 non-finite") != std::string::npos, n.stop_reason);
}

BOOST_AUTO_TEST_CASE(check_finite_passes_a_finite_graph) {
    const Graph& g = references().at("seed n=3").graph;
    RunOptions o;
    o.check_finite = true;
    o.threads = 2;
    const RunResult r = run(g, o);
    BOOST_TEST(r.complete);
    BOOST_TEST(r.stopped_at.empty());
}

BOOST_DATA_TEST_CASE(an_error_inside_an_op_reaches_the_caller, bdata::make({1, 4}), threads) {
    static const bool registered = [] {
        OpRegistry::instance().add<Failing>();
        return true;
    }();
    BOOST_TEST(registered);
    GraphBuilder gb("failing");
    Value x = gb.input("X", Tensor(random_array<float>({300, 300}, 1)));
    Value a = softmax(x);
    gb.output(gb.node<Failing>({a}, {}, "bad"));
    gb.output(softmax(x, 0));
    const Graph g = gb.build();
    RunOptions o;
    o.threads = threads;
    BOOST_CHECK_THROW(run(g, o), IoError);
}

// ---- the scheduler itself: Executor::execute on a TaskGraph ---------------------------------

namespace {
// 300 tasks in layers of 10: each task waits for every task of the layer before it, and task
// 10 waits for task 0 twice (listed twice); work above the inline limit, so more than one
// thread takes the parallel path
TaskGraph layered() {
    TaskGraph tg;
    tg.successors.resize(300);
    for (std::size_t i = 0; i + 10 < 300; ++i)
        for (std::size_t j = (i / 10 + 1) * 10; j < (i / 10 + 2) * 10; ++j) tg.successors[i].push_back(j);
    tg.successors[0].push_back(10);
    tg.work = inline_work_limit + 1;
    return tg;
}
}  // namespace

BOOST_DATA_TEST_CASE(execute_runs_every_task_once_after_what_it_waits_for, bdata::make({1, 2, 4, 8}), threads) {
    const TaskGraph tg = layered();
    std::vector<std::atomic<int>> runs(300);
    std::vector<std::atomic<int>> done_layers(30);  // layer -> tasks finished
    std::atomic<int> early{0};
    Executor ex(threads);
    ex.execute(tg, [&](std::size_t i) {
        if (i >= 10 && done_layers[i / 10 - 1] != 10) ++early;
        ++runs[i];
        ++done_layers[i / 10];
        return true;
    });
    BOOST_TEST(early == 0);
    for (std::size_t i = 0; i < 300; ++i) BOOST_TEST_CONTEXT("task " << i) {
            BOOST_TEST(runs[i] == 1);
        }
}

BOOST_DATA_TEST_CASE(execute_stops_after_a_task_says_stop_and_rethrows_the_first_error, bdata::make({1, 2, 4, 8}),
                     threads) {
    const TaskGraph tg = layered();
    Executor ex(threads);
    std::vector<std::atomic<int>> runs(300);
    // task 55 stops the run: nothing of layers 6 and after starts (the rest of layer 5 may
    // have started before it stopped)
    ex.execute(tg, [&](std::size_t i) {
        ++runs[i];
        return i != 55;
    });
    for (std::size_t i = 0; i < 300; ++i) BOOST_TEST_CONTEXT("task " << i) {
            if (i < 50 || i == 55)
                BOOST_TEST(runs[i] == 1);
            else if (i < 60)
                BOOST_TEST(runs[i] <= 1);
            else
                BOOST_TEST(runs[i] == 0);
        }
    BOOST_CHECK_THROW(ex.execute(tg,
                                 [&](std::size_t i) -> bool {
                                     if (i == 123) throw IoError("task 123 failed");
                                     return true;
                                 }),
                      IoError);
}

BOOST_AUTO_TEST_CASE(the_free_functions_share_one_executor) {
    // run() and backward() with the same thread count use one executor (one arena)
    const std::shared_ptr<Executor> a = default_executor(3);
    BOOST_TEST(a->threads() == 3);
    BOOST_TEST(default_executor(3).get() == a.get());
    BOOST_CHECK_THROW(default_executor(-1), Error);
}

BOOST_AUTO_TEST_CASE(thread_counts) {
    BOOST_TEST(Executor(0).threads() >= 1);
    BOOST_TEST(Executor(3).threads() == 3);
    BOOST_CHECK_THROW(Executor(-1), Error);
    BOOST_TEST(matches_any("head1.A", {}));
    BOOST_TEST(matches_any("head1.A", {"x", "head?.A"}));
    BOOST_TEST(!matches_any("head1.A", {"head2.*", "A"}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_executor
