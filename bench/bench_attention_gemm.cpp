// The fused attention step's two products (engine/attention_gemm.hpp) on one block of 128
// query rows of one head, d_k = d_v = 64, against the OpenBLAS calls the step made before
// (engine/gemm.hpp: S = Q·Kᵀ in blocks of 128 × 256, O = A·V in one call), one thread.
// Argument: the keys. Each kernel: the set this CPU runs (AVX-512 or AVX2 + FMA); K is packed
// once outside the loop, as the step packs it once per head. And the strided product on
// the blocks the engine's f32 GEMM gives it (engine/gemm.cpp), against one OpenBLAS call;
// and pack_keys (K's panels, by 4 × 4 transposes) against a loop of its elements.
#include <benchmark/benchmark.h>

#include <vector>

#include <cblas.h>

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

// One OpenBLAS call, as the engine's GEMM made one per block before the kernels.
void blas_gemm_block(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                     std::size_t ldb, float* c, std::size_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c,
                static_cast<int>(ldc));
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
            blas_gemm_block(rows, dk, m, s.data(), m, v.data(), dk, o.data(), dk);
        }
        benchmark::DoNotOptimize(o.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(4.0 * rows * m * dk, benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

// A block of the engine's f32 GEMM (engine/gemm.cpp) as a projection makes it: x (rows ×
// 768) · the first `cols` columns of W (768 × 768), on the kernels' strided product against
// OpenBLAS. Arguments: rows, cols (64: one head's projection; 256: a block of a wide one).
void projection(benchmark::State& state, bool kernels) {
    const attention_gemm::Kernels* k = attention_gemm::kernels();
    if (kernels && !k) {
        state.SkipWithError("no attention kernels for this CPU");
        return;
    }
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    blas_kernel();  // the engine's kernel selection and OpenBLAS set up, as before a GEMM
    const std::size_t n = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
    const std::size_t d = 768;
    const std::vector<float> x = values(n * d, 1), w = values(d * d, 2);
    std::vector<float> o(n * cols);
    for (auto _ : state) {
        if (kernels)
            k->product(x.data(), d, 1, n, w.data(), d, d, cols, o.data(), cols, false);
        else
            blas_gemm_block(n, cols, d, x.data(), d, w.data(), d, o.data(), cols);
        benchmark::DoNotOptimize(o.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * d * cols, benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

// K (m × 64) into panels, as the step packs it once per head (and the backward V), by
// pack_keys's transposes or by a loop over the elements, the layout attention_gemm.hpp gives
// (key j's element d at out[(p·dk + d)·panel + j − p·panel]). Argument: the keys.
void pack(benchmark::State& state, bool transposes) {
    const std::size_t m = static_cast<std::size_t>(state.range(0)), panel = attention_gemm::panel;
    const std::vector<float> keys = values(m * dk, 2);
    std::vector<float> packed(attention_gemm::packed_size(m, dk));
    for (auto _ : state) {
        if (transposes) {
            attention_gemm::pack_keys(keys.data(), m, dk, packed.data());
        } else {
            std::fill(packed.begin(), packed.end(), 0.0f);
            for (std::size_t j = 0; j < m; ++j)
                for (std::size_t d = 0; d < dk; ++d)
                    packed[(j / panel * dk + d) * panel + j % panel] = keys[j * dk + d];
        }
        benchmark::DoNotOptimize(packed.data());
        benchmark::ClobberMemory();
    }
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(m * dk * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
}

}  // namespace

// a head's projection, a whole block, narrower and shorter blocks, one row (decoding)
#define PROJECTION_SHAPES \
    ->Args({128, 64})->Args({128, 256})->Args({128, 128})->Args({32, 256})->Args({1, 64})->Args({1, 256})
BENCHMARK_CAPTURE(projection, attention_kernels, true) PROJECTION_SHAPES->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(projection, openblas, false) PROJECTION_SHAPES->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(products, attention_kernels, true)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(products, openblas, false)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(pack, pack_keys, true)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(pack, element_loop, false)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
