// engine/finite.hpp's any_not_finite (tests of the exponent bits, which vectorise) against
// the loop of float tests it replaced (std::isfinite on each value: one value a cycle under
// g++'s -ftrapping-math), on finite values: the fused attention step's check of a head's V
// (m × 64 at m = 1024, decoding), and of a backward step's dO (128 × 64), and a large span.
// Argument: the values. One thread.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "engine/finite.hpp"
#include "graphs/mha.hpp"

using namespace attngraph;

namespace {

void finite_check(benchmark::State& state, bool bits) {
    const auto count = static_cast<std::size_t>(state.range(0));
    const Array<float> a = graphs::random_tensor({count}, DType::f32, 1).as<float>();
    const std::vector<float> x(a.begin(), a.end());
    for (auto _ : state) {
        bool bad = false;
        if (bits) {
            bad = any_not_finite(x.data(), count);
        } else {
            for (std::size_t i = 0; i < count; ++i) bad = bad || !std::isfinite(x[i]);
        }
        benchmark::DoNotOptimize(bad);
    }
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(count * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
}

}  // namespace

BENCHMARK_CAPTURE(finite_check, any_not_finite, true)->Arg(8192)->Arg(65536)->Arg(1 << 22);
BENCHMARK_CAPTURE(finite_check, isfinite_loop, false)->Arg(8192)->Arg(65536)->Arg(1 << 22);
