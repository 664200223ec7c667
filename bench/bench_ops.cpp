// Each op's forward at attention sizes (n tokens, d_model 768, d_k 64), called through the
// op registry as the executor calls it; the engine's GEMM; and the fused attention step
// against the plain KT/S_raw/S/A chain it replaces. Arguments: n, then threads.
#include <benchmark/benchmark.h>

#include <tbb/task_arena.h>

#include "engine/gemm.hpp"
#include "engine/graph.hpp"
#include "engine/optimize.hpp"
#include "graphs/mha.hpp"

using namespace attngraph;

namespace {

constexpr std::size_t d_model = 768, dk = 64;

Array<float> random_array(const Shape& shape, std::uint64_t seed) {
    return graphs::random_tensor(shape, DType::f32, seed).as<float>();
}

// Runs op `name` with JSON attrs on inputs of the given shapes into an output of `out_shape`.
void run_op(benchmark::State& state, const std::string& name, const nlohmann::json& attrs,
            const std::vector<Shape>& in_shapes, int threads) {
    const OpDef& op = OpRegistry::instance().get(name);
    const NodeAttrs a = op.parse_attrs(attrs, "bench");
    std::vector<Array<float>> inputs;
    for (std::size_t i = 0; i < in_shapes.size(); ++i) inputs.push_back(random_array(in_shapes[i], i + 1));
    std::vector<const Array<float>*> in;
    for (const auto& x : inputs) in.push_back(&x);
    const Shape out_shape = op.infer_shapes(a, in_shapes)[0];
    Array<float> y = Array<float>::from_shape(out_shape);
    std::vector<Array<float>*> out{&y};
    tbb::task_arena arena(threads);
    arena.execute([&] {
        for (auto _ : state) {
            op.forward<float>()(a, In<float>(in), Out<float>(out));
            benchmark::DoNotOptimize(y.data());
        }
    });
    std::size_t bytes = element_count(out_shape);
    for (const auto& s : in_shapes) bytes += element_count(s);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * sizeof(float)));
}

std::size_t arg(const benchmark::State& s, int i) {
    return static_cast<std::size_t>(s.range(i));
}

void set_flops(benchmark::State& state, double flops) {
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

static void BM_Linear(benchmark::State& state) {  // x (n, 768) · W (768, 64) + b: one head's Q
    const std::size_t n = arg(state, 0);
    run_op(state, "Linear", nlohmann::json::object(), {{n, d_model}, {d_model, dk}, {1, dk}},
           static_cast<int>(state.range(1)));
    set_flops(state, 2.0 * n * d_model * dk);
}
static void BM_LinearWide(benchmark::State& state) {  // x (n, 768) · W (768, 2304): every head's Q, K, V at once
    const std::size_t n = arg(state, 0);
    run_op(state, "Linear", nlohmann::json::object(), {{n, d_model}, {d_model, 3 * d_model}, {1, 3 * d_model}},
           static_cast<int>(state.range(1)));
    set_flops(state, 2.0 * n * d_model * 3 * d_model);
}
static void BM_MatMulScores(benchmark::State& state) {  // Q (n, 64) · KT (64, n)
    const std::size_t n = arg(state, 0);
    run_op(state, "MatMul", nlohmann::json::object(), {{n, dk}, {dk, n}}, static_cast<int>(state.range(1)));
    set_flops(state, 2.0 * n * n * dk);
}
static void BM_MatMulAV(benchmark::State& state) {  // A (n, n) · V (n, 64)
    const std::size_t n = arg(state, 0);
    run_op(state, "MatMul", nlohmann::json::object(), {{n, n}, {n, dk}}, static_cast<int>(state.range(1)));
    set_flops(state, 2.0 * n * n * dk);
}
static void BM_Transpose(benchmark::State& state) {  // K (n, 64) -> KT (64, n)
    run_op(state, "Transpose", nlohmann::json::object(), {{arg(state, 0), dk}}, static_cast<int>(state.range(1)));
}
static void BM_Scale(benchmark::State& state) {  // S_raw (n, n)
    run_op(state, "Scale", {{"factor", 0.125}}, {{arg(state, 0), arg(state, 0)}}, static_cast<int>(state.range(1)));
}
static void BM_Softmax(benchmark::State& state) {  // S (n, n), last axis
    run_op(state, "Softmax", nlohmann::json::object(), {{arg(state, 0), arg(state, 0)}},
           static_cast<int>(state.range(1)));
}
static void BM_SoftmaxAxis0(benchmark::State& state) {  // S (n, n), first axis: the strided scalar path
    run_op(state, "Softmax", {{"axis", 0}}, {{arg(state, 0), arg(state, 0)}}, static_cast<int>(state.range(1)));
}
static void BM_Concat(benchmark::State& state) {  // 12 heads' O (n, 64) -> (n, 768)
    run_op(state, "Concat", nlohmann::json::object(), std::vector<Shape>(12, Shape{arg(state, 0), dk}),
           static_cast<int>(state.range(1)));
}

// Conv (ops/conv.hpp) at its two uses in front of attention; arguments: threads
static void BM_ConvPatchEmbedding(benchmark::State& state) {  // ViT-B/16: (1, 3, 224, 224), 16x16 patches -> 768
    run_op(state, "Conv", {{"strides", {16, 16}}}, {{1, 3, 224, 224}, {d_model, 3, 16, 16}, {d_model}},
           static_cast<int>(state.range(0)));
    set_flops(state, 2.0 * 196 * d_model * 3 * 16 * 16);
}
static void BM_ConvAudioFrontEnd(benchmark::State& state) {  // Whisper tiny: (1, 80, 3000), k 3, pad 1 -> 384
    run_op(state, "Conv", {{"pads", {1, 1}}}, {{1, 80, 3000}, {384, 80, 3}, {384}}, static_cast<int>(state.range(0)));
    set_flops(state, 2.0 * 3000 * 384 * 80 * 3);
}

static void BM_Gemm(benchmark::State& state) {  // N x N x N through engine/gemm.hpp
    const std::size_t n = arg(state, 0);
    const Array<float> a = random_array({n, n}, 1), b = random_array({n, n}, 2);
    Array<float> c = Array<float>::from_shape({n, n});
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
            benchmark::DoNotOptimize(c.data());
        }
    });
    set_flops(state, 2.0 * n * n * n);
}

// A projection of n = 128 rows, (128 x 768)·(768 x 768): one row block, so only the GEMM's
// column blocks give the second core work.
static void BM_GemmFewRows(benchmark::State& state) {
    const std::size_t m = arg(state, 0), d = 768;
    const Array<float> a = random_array({m, d}, 1), b = random_array({d, d}, 2);
    Array<float> c = Array<float>::from_shape({m, d});
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            gemm<float>(false, false, m, d, d, 1.0f, a.data(), d, b.data(), d, 0.0f, c.data(), d);
            benchmark::DoNotOptimize(c.data());
        }
    });
    set_flops(state, 2.0 * m * d * d);
}

// One head's attention from Q, K, V: the fused step, or the plain chain (traced run).
static void attention_head(benchmark::State& state, bool fused) {
    const std::size_t n = arg(state, 0);
    graphs::MhaConfig c;
    c.seq = n;
    c.d_model = dk;
    c.heads = 1;
    const Graph g = graphs::build_mha(c);
    std::vector<bool> keep(g.values().size(), !fused);
    for (int id : g.outputs()) keep[static_cast<std::size_t>(id)] = true;
    const Plan plan = make_plan(g, keep);
    const int q = g.at("head1.Q"), k = g.at("head1.K"), v = g.at("head1.V");
    std::vector<Array<float>> values(g.values().size());
    values[static_cast<std::size_t>(q)] = random_array({n, dk}, 1);
    values[static_cast<std::size_t>(k)] = random_array({n, dk}, 2);
    values[static_cast<std::size_t>(v)] = random_array({n, dk}, 3);
    std::vector<const Step*> steps;  // from KT to O
    for (const Step& s : plan.steps) {
        const std::string& name = g.nodes()[static_cast<std::size_t>(s.node)].name;
        if (name != "head1.Q" && name != "head1.K" && name != "head1.V" && name.rfind("head1.", 0) == 0)
            steps.push_back(&s);
    }
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            for (const Step* s : steps) {
                std::vector<const Array<float>*> in;
                for (int id : s->inputs) in.push_back(&values[static_cast<std::size_t>(id)]);
                Array<float>& y = values[static_cast<std::size_t>(s->outputs[0])];
                y = Array<float>::from_shape(g.value(s->outputs[0]).shape);
                std::vector<Array<float>*> out{&y};
                run_step<float>(g, *s, In<float>(in), Out<float>(out));
            }
            benchmark::DoNotOptimize(values[static_cast<std::size_t>(g.at("head1.O"))].data());
        }
    });
    set_flops(state, 4.0 * n * n * dk);
}
static void BM_AttentionHeadFused(benchmark::State& state) {
    attention_head(state, true);
}
static void BM_AttentionHeadPlain(benchmark::State& state) {
    attention_head(state, false);
}

static void sizes(benchmark::internal::Benchmark* b) {
    for (int threads : {1, 2})
        for (int n : {128, 1024}) b->Args({n, threads});
    b->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Linear)->Apply(sizes);
BENCHMARK(BM_LinearWide)->Apply(sizes);
BENCHMARK(BM_MatMulScores)->Apply(sizes);
BENCHMARK(BM_MatMulAV)->Apply(sizes);
BENCHMARK(BM_Transpose)->Apply(sizes);
BENCHMARK(BM_Scale)->Apply(sizes);
BENCHMARK(BM_Softmax)->Apply(sizes);
BENCHMARK(BM_SoftmaxAxis0)->Apply(sizes);
BENCHMARK(BM_Concat)->Apply(sizes);
BENCHMARK(BM_AttentionHeadFused)->Apply(sizes);
BENCHMARK(BM_AttentionHeadPlain)->Apply(sizes);
BENCHMARK(BM_ConvPatchEmbedding)
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_ConvAudioFrontEnd)
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_GemmFewRows)
    ->ArgsProduct({{128}, {1, 2}})
    ->ArgNames({"m", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{512, 2048}, {1, 2}})
    ->ArgNames({"n", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
