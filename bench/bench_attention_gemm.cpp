// The fused attention step's two products (engine/attention_gemm.hpp) on one block of 128
// query rows of one head, d_k = d_v = 64, against the OpenBLAS calls the step made before
// (engine/gemm.hpp: S = Q·Kᵀ in blocks of 128 × 256, O = A·V in one call), one thread.
// Argument: the keys. Each kernel: the set this CPU runs (AVX-512 or AVX2 + FMA); K is packed
// once outside the loop, as the step packs it once per head.
#include <benchmark/benchmark.h>

#include <vector>

#include <tbb/global_control.h>

#include "engine/attention_gemm.hpp"
#include "engine/gemm.hpp"
#include "graphs/mha.hpp"

using namespace attngraph;

namespace {

constexpr std::size_t rows = 128, dk = 64;

std::vector<float> values(std::size_t count, unsigned seed) {
    const Array<float> a = graphs::random_tensor({count}, DType::f32, seed).as<float>();
    return {a.begin(), a.end()};
}

void products(benchmark::State& state, bool kernels) {
    const attention_gemm::Kernels* k = attention_gemm::kernels();
    if (kernels && !k) {
        state.SkipWithError("no attention kernels for this CPU");
        return;
    }
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    const std::size_t m = static_cast<std::size_t>(state.range(0));
    const std::vector<float> q = values(rows * dk, 1), keys = values(m * dk, 2), v = values(m * dk, 3);
    std::vector<float> packed(attention_gemm::packed_size(m, dk)), s(rows * m), o(rows * dk);
    attention_gemm::pack_keys(keys.data(), m, dk, packed.data());
    for (auto _ : state) {
        if (kernels) {
            k->scores(q.data(), rows, dk, packed.data(), 0, m, s.data(), m);
            k->weighted_sum(s.data(), m, rows, v.data(), m, dk, o.data());
        } else {
            gemm<float>(false, true, rows, m, dk, 1.0f, q.data(), dk, keys.data(), dk, 0.0f, s.data(), m);
            gemm<float>(false, false, rows, dk, m, 1.0f, s.data(), m, v.data(), dk, 0.0f, o.data(), dk);
        }
        benchmark::DoNotOptimize(o.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(4.0 * rows * m * dk, benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

}  // namespace

BENCHMARK_CAPTURE(products, attention_kernels, true)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(products, openblas, false)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
