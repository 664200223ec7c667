// The fused attention kernel with a score chain (engine/fused_attention.hpp) on 12 heads of
// d_k 64: unmasked, causal, a causal window of 256 keys, ALiBi then causal, key padding to
// half the keys, a causal boolean mask tensor (FlexAttention's mask_mod), a relative position
// bias read through a Gather's indices, and ALiBi as a Mul bias with the causal mask tensor
// (flex/alibi). The masked ones skip the key blocks their masks remove, so their time
// against the unmasked kernel's is the fraction of the scores they compute. GFLOP/s counts
// the unmasked product's 4·n²·d_k a head for every mask (an effective rate). Arguments: n,
// then threads. And a decoding step: one query row per head against m cached keys (each K
// matrix then read by one block: its panels packed as the scores read them).
#include <benchmark/benchmark.h>

#include <cmath>

#include <tbb/task_arena.h>

#include "engine/fused_attention.hpp"
#include "engine/stream_store.hpp"
#include "graphs/mha.hpp"

using namespace attngraph;

namespace {

constexpr std::size_t heads = 12, dk = 64;

enum class Chain { none, causal, window, alibi, padding, mask_tensor, gathered, product };

void fused(benchmark::State& state, Chain chain) {
    const std::size_t n = static_cast<std::size_t>(state.range(0));
    const Shape qkv{heads, n, dk}, scores{heads, n, n};
    const Array<float> q = graphs::random_tensor(qkv, DType::f32, 1).as<float>();
    const Array<float> k = graphs::random_tensor(qkv, DType::f32, 2).as<float>();
    const Array<float> v = graphs::random_tensor(qkv, DType::f32, 3).as<float>();
    Array<float> slopes = Array<float>::from_shape({heads});
    for (std::size_t h = 0; h < heads; ++h) slopes(h) = std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / heads);
    Array<float> o = Array<float>::from_shape(qkv);
    // the mask tensor (causal), the Gather's table (heads, 2n - 1) and indices i - j + n - 1,
    // the Mul's (n, n) factor j - i
    Array<float> keep = Array<float>::from_shape({n, n}), index = Array<float>::from_shape({n, n});
    Array<float> rel = Array<float>::from_shape({n, n});
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            keep(i, j) = j <= i;
            index(i, j) = static_cast<float>(i + n - 1 - j);
            rel(i, j) = static_cast<float>(j) - static_cast<float>(i);
        }
    const Array<float> table = graphs::random_tensor({heads, 2 * n - 1}, DType::f32, 4).as<float>();

    AttentionSpec spec;
    spec.batch = {heads};
    spec.k_batch = spec.v_batch = {heads};
    spec.n = spec.m = n, spec.dk = spec.dv = dk;
    ScoreStage scale;
    scale.kind = ScoreStage::Kind::scale;
    scale.factor = 1.0 / std::sqrt(static_cast<double>(dk));
    scale.shape = scores;
    spec.stages.push_back(scale);
    ScoreStage mask;
    mask.kind = ScoreStage::Kind::mask;
    mask.shape = scores;
    if (chain == Chain::alibi) {
        ScoreStage bias;
        bias.kind = ScoreStage::Kind::alibi;
        bias.operand = 3;
        bias.operand_shape = {heads};
        bias.shape = scores;
        spec.stages.push_back(bias);
    }
    if (chain == Chain::causal || chain == Chain::alibi) mask.pattern = ScoreStage::Pattern::causal;
    if (chain == Chain::window) {
        mask.pattern = ScoreStage::Pattern::window;
        mask.window = 256;
        mask.window_causal = true;
    }
    if (chain == Chain::padding) {  // heads as the batch axis: every head keeps the first n / 2 keys
        mask.pattern = ScoreStage::Pattern::padding;
        mask.lengths.assign(heads, static_cast<int>(n / 2));
    }
    if (chain == Chain::gathered || chain == Chain::product) {
        ScoreStage bias;
        bias.kind = ScoreStage::Kind::add;
        bias.shape = scores;
        if (chain == Chain::gathered) {
            bias.operand = 5, bias.index = 6;
            bias.operand_shape = scores;
            bias.table_len = 2 * n - 1, bias.index_count = n * n;
        } else {  // slope[h]·(j - i): the slopes as (heads, 1, 1)
            bias.operand = 3, bias.multiplier = 7;
            bias.operand_shape = {heads, 1, 1};
            bias.multiplier_shape = {n, n};
        }
        spec.stages.push_back(bias);
    }
    if (chain == Chain::mask_tensor || chain == Chain::product) {
        mask.mask_tensor = ScoreStage::MaskTensor::boolean;
        mask.operand = 4;
        mask.operand_shape = {n, n};
        mask.tensor_span = true;
    }
    if (chain != Chain::none && chain != Chain::gathered) spec.stages.push_back(mask);
    spec.finish();

    const Array<float>* in[] = {&q, &k, &v, &slopes, &keep, &table, &index, &rel};
    Array<float>* out[] = {&o};
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            fused_attention_forward<float>(spec, In<float>(in, 8), Out<float>(out, 1));
            benchmark::DoNotOptimize(o.data());
        }
    });
    state.counters["GFLOP/s"] = benchmark::Counter(4.0 * heads * n * n * dk * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

static void BM_FusedAttention(benchmark::State& state) {
    fused(state, Chain::none);
}
static void BM_FusedAttentionCausal(benchmark::State& state) {
    fused(state, Chain::causal);
}
static void BM_FusedAttentionWindow256(benchmark::State& state) {
    fused(state, Chain::window);
}
static void BM_FusedAttentionAlibiCausal(benchmark::State& state) {
    fused(state, Chain::alibi);
}
static void BM_FusedAttentionPaddedHalf(benchmark::State& state) {
    fused(state, Chain::padding);
}

static void BM_FusedAttentionMaskTensorCausal(benchmark::State& state) {
    fused(state, Chain::mask_tensor);
}
static void BM_FusedAttentionGatheredBias(benchmark::State& state) {
    fused(state, Chain::gathered);
}
static void BM_FusedAttentionProductBiasCausal(benchmark::State& state) {
    fused(state, Chain::product);
}

// One query row per head against m keys and values, unmasked (`decode --seq 1 --past m-1`'s
// attention step). Arguments: m, then threads. GFLOP/s counts 4·m·d_k a head.
static void BM_FusedAttentionDecode(benchmark::State& state) {
    const std::size_t m = static_cast<std::size_t>(state.range(0));
    const Array<float> q = graphs::random_tensor({heads, 1, dk}, DType::f32, 1).as<float>();
    const Array<float> k = graphs::random_tensor({heads, m, dk}, DType::f32, 2).as<float>();
    const Array<float> v = graphs::random_tensor({heads, m, dk}, DType::f32, 3).as<float>();
    Array<float> o = Array<float>::from_shape({heads, 1, dk});
    AttentionSpec spec;
    spec.batch = {heads};
    spec.k_batch = spec.v_batch = {heads};
    spec.n = 1, spec.m = m, spec.dk = spec.dv = dk;
    ScoreStage scale;
    scale.kind = ScoreStage::Kind::scale;
    scale.factor = 1.0 / std::sqrt(static_cast<double>(dk));
    scale.shape = {heads, 1, m};
    spec.stages.push_back(scale);
    spec.finish();
    const Array<float>* in[] = {&q, &k, &v};
    Array<float>* out[] = {&o};
    tbb::task_arena arena(static_cast<int>(state.range(1)));
    arena.execute([&] {
        for (auto _ : state) {
            fused_attention_forward<float>(spec, In<float>(in, 3), Out<float>(out, 1));
            benchmark::DoNotOptimize(o.data());
        }
    });
    state.counters["GFLOP/s"] =
        benchmark::Counter(4.0 * heads * m * dk * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FusedAttentionDecode)
    ->ArgsProduct({{1025, 4097}, {1, 2}})
    ->ArgNames({"m", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// How a traced value is written (AttentionKernel::write): a block of 128 rows of 1024 scores,
// in the cache, copied row by row into the next 512 KiB of a destination of `range(0)` MiB
// that is reused from one pass to the next, by ordinary or by streaming stores
// (engine/stream_store.hpp). Bytes/s counts the bytes written.
void traced_write(benchmark::State& state, bool stream) {
    constexpr std::size_t rows = 128, width = 1024, block = rows * width;
    const std::size_t total = static_cast<std::size_t>(state.range(0)) << 20 >> 2;
    const Array<float> scores = graphs::random_tensor({rows, width}, DType::f32, 5).as<float>();
    Array<float> out = uninitialized<float>({total});
    std::fill(out.begin(), out.end(), 0.0f);
    std::size_t at = 0;
    for (auto _ : state) {
        float* to = out.data() + at;
        for (std::size_t r = 0; r < rows; ++r) {
            const float* from = scores.data() + r * width;
            if (stream)
                stream_copy(from, width, to + r * width);
            else
                std::copy(from, from + width, to + r * width);
        }
        if (stream) stream_fence();
        benchmark::DoNotOptimize(out.data());
        at = at + 2 * block <= total ? at + block : 0;
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * block * sizeof(float)));
}

static void BM_TracedWriteCopy(benchmark::State& state) {
    traced_write(state, false);
}
static void BM_TracedWriteStream(benchmark::State& state) {
    traced_write(state, true);
}
BENCHMARK(BM_TracedWriteCopy)->Arg(16)->Arg(256)->ArgName("MiB");
BENCHMARK(BM_TracedWriteStream)->Arg(16)->Arg(256)->ArgName("MiB");

static void sizes(benchmark::internal::Benchmark* b) {
    for (int threads : {1, 2})
        for (int n : {1024, 4096}) b->Args({n, threads});
    b->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_FusedAttention)->Apply(sizes);
BENCHMARK(BM_FusedAttentionCausal)->Apply(sizes);
BENCHMARK(BM_FusedAttentionWindow256)->Apply(sizes);
BENCHMARK(BM_FusedAttentionAlibiCausal)->Apply(sizes);
BENCHMARK(BM_FusedAttentionPaddedHalf)->Apply(sizes);
BENCHMARK(BM_FusedAttentionMaskTensorCausal)->Apply(sizes);
BENCHMARK(BM_FusedAttentionGatheredBias)->Apply(sizes);
BENCHMARK(BM_FusedAttentionProductBiasCausal)->Apply(sizes);
