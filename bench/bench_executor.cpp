// The executor's cost per run and per node, with an Executor reused across runs: the seed
// graph (about 20 nodes, run inline), and chains and fans of Scale nodes, on tensors small
// enough to run inline and large enough to be scheduled on oneTBB. The "s/node" counter is
// wall time per node. Arguments: nodes, rows of the (rows, 8) input, threads.
#include <benchmark/benchmark.h>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"

using namespace attngraph;

namespace {

// `nodes` Scale nodes on an (rows, 8) input: a chain (each reads the previous) or a fan
// (each reads X, all joined by a Concat).
Graph scale_graph(std::size_t nodes, std::size_t rows, bool chain) {
    GraphBuilder g("scales");
    Value x = g.input("X", graphs::random_tensor({rows, 8}, DType::f32, 1));
    std::vector<Value> outs;
    Value v = x;
    for (std::size_t i = 0; i < nodes; ++i) {
        v = scale(chain ? v : x, 1.0 + 1.0 / static_cast<double>(i + 1));
        outs.push_back(v);
    }
    g.output(chain ? v : concat(outs, 0));
    return g.build();
}

void run_graph(benchmark::State& state, const Graph& g, int threads, bool trace = false) {
    Executor executor(threads);
    RunOptions options;
    options.trace = trace;
    for (auto _ : state) benchmark::DoNotOptimize(executor.run(g, options));
    state.counters["s/node"] =
        benchmark::Counter(static_cast<double>(g.nodes().size()),
                           benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

const Graph& seed_graph() {
    static const Graph g = graphs::build_mha(graphs::seed_mha_config(), graphs::seed_mha_weights());
    return g;
}

}  // namespace

static void BM_SeedGraph(benchmark::State& state) {
    run_graph(state, seed_graph(), static_cast<int>(state.range(0)));
}
static void BM_SeedGraphTraced(benchmark::State& state) {
    run_graph(state, seed_graph(), static_cast<int>(state.range(0)), true);
}
static void BM_ScaleChain(benchmark::State& state) {
    run_graph(state,
              scale_graph(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)), true),
              static_cast<int>(state.range(2)));
}
static void BM_ScaleFan(benchmark::State& state) {
    run_graph(state,
              scale_graph(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)), false),
              static_cast<int>(state.range(2)));
}

BENCHMARK(BM_SeedGraph)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
BENCHMARK(BM_SeedGraphTraced)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
// rows 4: under the inline work limit; rows 1024: 8192 values a node, scheduled on oneTBB
BENCHMARK(BM_ScaleChain)->ArgsProduct({{64}, {4, 1024}, {1, 2}})->ArgNames({"nodes", "rows", "threads"})->UseRealTime();
BENCHMARK(BM_ScaleFan)->ArgsProduct({{64}, {4, 1024}, {1, 2}})->ArgNames({"nodes", "rows", "threads"})->UseRealTime();
