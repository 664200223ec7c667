// The fused attention backward (engine/attention_kernel.hpp) for 12 heads of d_k 64: with
// the weights recomputed block by block (an untraced run; here by attention_operands' plain
// GEMM + softmax, the backward plan uses the forward's kernel), and read from a kept A (a
// traced run). Arguments: n, then threads. GFLOP/s counts the backward's GEMMs: 8·n²·d_k a head
// (dV, dA, dQ, dK), plus 2·n²·d_k for the recomputed scores.
#include <benchmark/benchmark.h>

#include <tbb/task_arena.h>

#include "engine/attention_kernel.hpp"
#include "graphs/mha.hpp"

using namespace attngraph;

namespace {

constexpr std::size_t heads = 12, dk = 64;

Array<float> random_array(const Shape& shape, std::uint64_t seed) {
    return graphs::random_tensor(shape, DType::f32, seed).as<float>();
}

void attention_backward_heads(benchmark::State& state, bool kept) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const Shape s{heads, n, dk};
    const Array<float> q = random_array(s, 1), k = random_array(s, 2), v = random_array(s, 3), d_o = random_array(s, 4);
    const float factor = 0.125f;
    const AttentionOperands<float> op = attention_operands<float>(q, k, v, factor, true);
    Array<float> a;
    if (kept) {  // the forward's weights, as a traced run keeps them
        a = Array<float>::from_shape({heads, n, n});
        for (std::size_t b = 0; b < heads; ++b)
            for (std::size_t r0 = 0; r0 < n; r0 += 128) {
                float* blk = a.data() + (b * n + r0) * n;
                op.weights(b, r0, std::min<std::size_t>(128, n - r0), 0, n, blk, nullptr, nullptr);
            }
    }
    Array<float> dq = Array<float>::from_shape(s), dkv = Array<float>::from_shape(s), dv = Array<float>::from_shape(s);
    AttentionGrads<float> g;
    g.dq = dq.data();
    g.dk = dkv.data();
    g.dv = dv.data();
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            std::fill(dq.begin(), dq.end(), 0.0f);
            std::fill(dkv.begin(), dkv.end(), 0.0f);
            std::fill(dv.begin(), dv.end(), 0.0f);
            attention_backward<float>(op, kept ? a.data() : nullptr, d_o.data(), g);
            benchmark::DoNotOptimize(dq.data());
        }
    });
    const double per_gemm = 2.0 * static_cast<double>(heads * n * n * dk);
    state.counters["GFLOP/s"] =
        benchmark::Counter((kept ? 4 : 5) * per_gemm * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

static void BM_AttentionBackwardRecompute(benchmark::State& state) {
    attention_backward_heads(state, false);
}
static void BM_AttentionBackwardKeptA(benchmark::State& state) {
    attention_backward_heads(state, true);
}

static void backward_sizes(benchmark::internal::Benchmark* b) {
    for (int threads : {1, 2})
        for (int n : {256, 1024}) b->Args({n, threads});
    b->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_AttentionBackwardRecompute)->Apply(backward_sizes);
BENCHMARK(BM_AttentionBackwardKeptA)->Apply(backward_sizes);
