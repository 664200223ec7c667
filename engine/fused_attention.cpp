#include "engine/fused_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <type_traits>

#include "engine/finite.hpp"
#include "engine/parallel.hpp"
#include "engine/softmax_kernel.hpp"
#include "engine/stream_store.hpp"
#include "ops/common.hpp"
#include "ops/gather.hpp"
#include "ops/mul.hpp"
#include "ops/sub.hpp"
#include "ops/tanh.hpp"

namespace attngraph {

namespace {

// The matrix index, in an operand whose batch axes broadcast to `target`, of every batch
// index of `target` (row-major).
std::vector<std::size_t> batch_offsets(const Shape& target, const Shape& operand) {
    const auto strides = ops::broadcast_strides<boost::container::small_vector<std::size_t, 8>>(operand, target);
    std::vector<std::size_t> offsets(element_count(target));
    for (std::size_t flat = 0; flat < offsets.size(); ++flat) offsets[flat] = ops::broadcast_offset(flat, target, strides);
    return offsets;
}

void offsets_and_strides(AttentionSpec& spec) {
    spec.k_offset = batch_offsets(spec.batch, spec.k_batch);
    spec.v_offset = batch_offsets(spec.diff ? spec.diff->batch : spec.batch, spec.v_batch);  // per O matrix
    spec.operand_strides.clear();
    spec.multiplier_strides.clear();
    for (const ScoreStage& st : spec.stages) {
        spec.operand_strides.push_back(st.operand >= 0 ? ops::broadcast_strides(st.operand_shape, st.shape)
                                                       : std::vector<std::size_t>{});
        spec.multiplier_strides.push_back(st.multiplier >= 0 ? ops::broadcast_strides(st.multiplier_shape, st.shape)
                                                             : std::vector<std::size_t>{});
    }
    spec.sink_strides =
        spec.sink ? ops::broadcast_strides(spec.sink->operand_shape, spec.sink->shape) : std::vector<std::size_t>{};
    spec.lambda_strides =
        spec.diff ? ops::broadcast_strides(spec.diff->operand_shape, spec.diff->shape) : std::vector<std::size_t>{};
    spec.patterned = std::ranges::any_of(spec.stages, [](const ScoreStage& st) {
        return st.kind == ScoreStage::Kind::mask && (st.pattern != ScoreStage::Pattern::none || st.tensor_span);
    });
}

}  // namespace

void AttentionSpec::finish() {
    offsets_and_strides(*this);
    const std::size_t count = stages.size();
    auto kept = [&](std::size_t v) { return v == 0 ? !s_raw_outputs.empty() : !stages[v - 1].outputs.empty(); };
    level.assign(count + 1, count);
    for (std::size_t v = count; v-- > 0;) level[v] = kept(v) ? v : level[v + 1];
    fold_scale = false;
    if (sink && !sink->scores_outputs.empty()) return;  // S_sinks shows the chain's last value
    for (std::size_t s = count; s-- > 0;) {
        if (kept(s + 1)) break;
        if (!stages[s].computes()) continue;
        fold_scale = stages[s].kind == ScoreStage::Kind::scale;
        break;
    }
}

namespace {

// The last stage that computes something: with fold_scale, the Scale the softmax applies.
std::size_t last_computing(const AttentionSpec& spec) {
    for (std::size_t s = spec.stages.size(); s-- > 0;)
        if (spec.stages[s].computes()) return s;
    return spec.stages.size();
}

}  // namespace

namespace fused_attention_detail {

// Scratch blocks for the blocks running at once. A thread waiting in a nested parallel loop
// (the GEMM's) may start another block, so scratch belongs to a block, not to a thread.
template <class T>
class ScratchPool {
public:
    explicit ScratchPool(std::size_t size) : m_size(size) {}
    std::unique_ptr<T[]> take() {
        {
            const std::lock_guard<std::mutex> lock(m_mutex);
            if (!m_free.empty()) {
                std::unique_ptr<T[]> p = std::move(m_free.back());
                m_free.pop_back();
                return p;
            }
        }
        return std::unique_ptr<T[]>(new T[m_size ? m_size : 1]);
    }
    void give(std::unique_ptr<T[]> p) {
        const std::lock_guard<std::mutex> lock(m_mutex);
        m_free.push_back(std::move(p));
    }

private:
    std::size_t m_size;
    std::mutex m_mutex;
    std::vector<std::unique_ptr<T[]>> m_free;
};

}  // namespace fused_attention_detail

template <class T>
AttentionKernel<T>::AttentionKernel(const AttentionSpec& spec, In<T> in)
    : m_spec(spec), m_q(in[0]->data()), m_k(in[1]->data()), m_v(in[2]->data()) {
    m_batches = element_count(spec.batch);
    m_blocks = (spec.n + gemm_row_block - 1) / gemm_row_block;
    for (const ScoreStage& st : spec.stages) {
        m_operands.push_back(st.operand >= 0 ? in[static_cast<std::size_t>(st.operand)]->data() : nullptr);
        m_multipliers.push_back(st.multiplier >= 0 ? in[static_cast<std::size_t>(st.multiplier)]->data() : nullptr);
    }
    for (std::size_t s = 0; s < spec.stages.size(); ++s) {
        const ScoreStage& st = spec.stages[s];
        if (st.tensor_span) {
            m_tensor_spans.resize(spec.stages.size());
            m_tensor_spans[s] = tensor_spans(st, m_operands[s]);
        }
        if (st.index >= 0) {  // the Gather's checks and errors, as its node would give them
            const Array<T>& index = *in[static_cast<std::size_t>(st.index)];
            m_indices.resize(spec.stages.size());
            m_indices[s] = index.data();
            try {
                try {
                    parallel_chunks(index.size(), grain_for(8), [&](std::size_t p0, std::size_t p1) {
                        ops::Gather::positions(index, st.table_len, -1, p0, p1);
                    });
                } catch (const ValueError&) {  // the first bad index's error, as the node names it
                    ops::Gather::positions(index, st.table_len, -1, 0, index.size());
                }
            } catch (const ValueError& e) {
                throw ValueError("node '" + st.gather_node + "' (Gather, fused into this attention step): " + e.what());
            }
        }
    }
    if (spec.sink) m_sink_bias = in[static_cast<std::size_t>(spec.sink->operand)]->data();
    if (spec.diff) {
        const Array<T>& lambda = *in[static_cast<std::size_t>(spec.diff->operand)];
        m_lambda = lambda.data();
        m_lambda_finite = std::all_of(m_lambda, m_lambda + lambda.size(), [](T x) { return std::isfinite(x); });
    }
    // V's values that are inf or NaN matter only at the keys a block skips (poison_columns),
    // which only a patterned Mask makes: then each matrix of V is checked when a block first
    // skips keys of it (never for decoding's or an unmasked step's blocks of all m keys)
    const std::size_t m = spec.m, dv = spec.dv, v_size = m * dv;
    if (spec.patterned && v_size) {
        const std::size_t v_matrices = in[2]->size() / v_size;
        m_v_checked = std::make_unique<std::once_flag[]>(v_matrices);
        m_v_bad.assign(v_matrices * dv, Span{0, 0});
    }
    // f32: K packed once per matrix for the attention kernels (a key span of fewer than a
    // panel's keys is left to gemm: a tiny graph's run allocates nothing more). A K matrix
    // that one block alone reads (decoding; a short prompt) is not: scores() packs each panel
    // as it reads it, into a buffer that stays in L1, instead of writing all of K packed to
    // memory and reading it back.
    if constexpr (std::is_same_v<T, float>) {
        const std::size_t dk = spec.dk;
        m_products = m >= attention_gemm::panel && dk ? attention_gemm::kernels() : nullptr;
        if (m_products && !one_reader_per_k(in[1]->size() / (m * dk))) {
            const std::size_t k_matrices = in[1]->size() / (m * dk), packed = attention_gemm::packed_size(m, dk);
            m_packed_k = std::make_unique_for_overwrite<float[]>(k_matrices * packed);
            parallel_chunks(k_matrices, grain_for(m * dk), [&](std::size_t k0, std::size_t k1) {
                for (std::size_t k = k0; k < k1; ++k)
                    attention_gemm::pack_keys(m_k + k * m * dk, m, dk, m_packed_k.get() + k * packed);
            });
        }
    }
}

// Matrix v of V: a pass over its bits that vectorises, then, only if one is inf or NaN, where
// they are, column by column, into m_v_bad.
template <class T>
void AttentionKernel<T>::find_bad_values(std::size_t v) const {
    const std::size_t m = m_spec.m, dv = m_spec.dv;
    const T* vm = m_v + v * m * dv;
    if (!any_not_finite(vm, m * dv)) return;
    for (std::size_t j = 0; j < m; ++j)
        for (std::size_t c = 0; c < dv; ++c) {
            if (std::isfinite(vm[j * dv + c])) continue;
            Span& bad = m_v_bad[v * dv + c];
            if (bad.lo == bad.hi) bad.lo = j;
            bad.hi = j + 1;
        }
}

// The plain A·V gives O NaN in every column where V has an inf or a NaN at a key the block's
// rows all weigh 0 (0·inf and 0·NaN are NaN): outside the block's keys [lo, hi), which the
// step skips. V's matrix v, the block's `rows` rows of O at o.
template <class T>
void AttentionKernel<T>::poison_columns(std::size_t v, std::size_t lo, std::size_t hi, std::size_t rows, T* o) const {
    if (m_v_bad.empty() || (lo == 0 && hi == m_spec.m)) return;  // no key skipped: V's values are in the product
    std::call_once(m_v_checked[v], [&] { find_bad_values(v); });
    const std::size_t dv = m_spec.dv;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    for (std::size_t c = 0; c < dv; ++c) {
        const Span bad = m_v_bad[v * dv + c];
        if (bad.lo == bad.hi || (lo < hi && bad.lo >= lo && bad.hi <= hi)) continue;
        for (std::size_t r = 0; r < rows; ++r) o[r * dv + c] = nan;
    }
}

// Whether each of the k_matrices matrices of K is read by one block of query rows at most:
// one matrix of Q (no GQA sharing) of at most gemm_row_block rows, and d_k small enough for
// scores()'s buffer of one panel.
template <class T>
bool AttentionKernel<T>::one_reader_per_k(std::size_t k_matrices) const {
    if (m_blocks > 1 || m_spec.dk > panel_buffer_max_dk) return false;
    std::vector<bool> read(k_matrices);
    for (std::size_t b = 0; b < m_batches; ++b) {
        const std::size_t k = m_spec.k_offset[b];
        if (read[k]) return false;
        read[k] = true;
    }
    return true;
}

template <class T>
void AttentionKernel<T>::scores(const T* q, std::size_t rows, std::size_t kmat, std::size_t from, std::size_t to, T* s,
                                std::size_t ld) const {
    if (from >= to) return;
    const std::size_t m = m_spec.m, dk = m_spec.dk;
    if constexpr (std::is_same_v<T, float>)
        if (m_products) {
            if (m_packed_k) {
                m_products->scores(q, rows, dk, m_packed_k.get() + kmat * attention_gemm::packed_size(m, dk), from, to,
                                   s, ld);
                return;
            }
            // K's panels packed here, one at a time (the constructor's comment)
            constexpr std::size_t panel = attention_gemm::panel;
            alignas(64) float packed[panel * panel_buffer_max_dk];
            const float* k = m_k + kmat * m * dk;
            for (std::size_t c0 = from; c0 < to; c0 += panel) {
                const std::size_t keys = std::min(panel, to - c0);
                attention_gemm::pack_keys(k + c0 * dk, keys, dk, packed);
                m_products->scores(q, rows, dk, packed, 0, keys, s + (c0 - from), ld);
            }
            return;
        }
    gemm<T>(false, true, rows, to - from, dk, T(1), q, dk, m_k + (kmat * m + from) * dk, dk, T(0), s, ld);
}

template <class T>
void AttentionKernel<T>::weighted_sum(const T* a, std::size_t lda, std::size_t rows, const T* v, std::size_t keys,
                                      T* o) const {
    const std::size_t dv = m_spec.dv;
    if constexpr (std::is_same_v<T, float>)
        if (m_products && dv % m_products->value_width == 0) {
            m_products->weighted_sum(a, lda, rows, v, keys, dv, o);
            return;
        }
    gemm<T>(false, false, rows, dv, keys, T(1), a, lda, v, dv, T(0), o, dv);
}

template <class T>
std::size_t AttentionKernel<T>::scratch_size() const {
    return std::min(m_spec.n, gemm_row_block) * m_spec.m * (m_spec.diff ? 3 : 1);
}

// Each row's span of a boolean mask tensor of its own shape (a row of one element is
// broadcast along the keys: all of them or none): from its first nonzero to its last.
template <class T>
std::vector<typename AttentionKernel<T>::Span> AttentionKernel<T>::tensor_spans(const ScoreStage& st,
                                                                                const T* mask) const {
    const std::size_t width = st.mask_width(), rows = element_count(st.operand_shape) / width;
    const std::size_t m = m_spec.m;
    std::vector<Span> spans(rows);
    parallel_chunks(rows, grain_for(width), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
            const T* x = mask + r * width;
            if (width == 1) {
                spans[r] = x[0] != T(0) ? Span{0, m} : Span{0, 0};
                continue;
            }
            std::size_t lo = 0, hi = width;
            while (lo < hi && x[lo] == T(0)) ++lo;
            while (hi > lo && x[hi - 1] == T(0)) --hi;
            spans[r] = lo < hi ? Span{lo, hi} : Span{0, 0};
        }
    });
    return spans;
}

// The keys query `row` of matrix b keeps after the patterns and tensor spans of stages
// [0, level): an intersection of intervals, one per pattern or mask tensor.
template <class T>
typename AttentionKernel<T>::Span AttentionKernel<T>::span(std::size_t level, std::size_t b, std::size_t row) const {
    const long m = static_cast<long>(m_spec.m), n = static_cast<long>(m_spec.n);
    if (m == 0) return {0, 0};  // no keys (and a mask tensor of no rows)
    long lo = 0, hi = m;
    for (std::size_t s = 0; s < level; ++s) {
        const ScoreStage& st = m_spec.stages[s];
        if (st.kind != ScoreStage::Kind::mask) continue;
        if (st.tensor_span) {  // the mask tensor's row this query row reads
            const std::vector<std::size_t>& strides = m_spec.operand_strides[s];
            const std::size_t width = st.mask_width();
            const std::size_t at = ops::broadcast_offset((b * m_spec.n + row) * m_spec.m, st.shape, strides);
            const Span t = m_tensor_spans[s][width > 1 ? at / width : at];
            lo = std::max(lo, static_cast<long>(t.lo));
            hi = std::min(hi, static_cast<long>(t.hi));
        }
        if (st.pattern == ScoreStage::Pattern::none) continue;
        const long p = static_cast<long>(row) + (st.offset_from_end ? m - n : st.offset);
        switch (st.pattern) {
            case ScoreStage::Pattern::causal:  // j <= p
                hi = std::min(hi, p + 1);
                break;
            case ScoreStage::Pattern::window:  // |p - j| < w, or 0 <= p - j < w
                lo = std::max(lo, p - st.window + 1);
                hi = std::min(hi, st.window_causal ? p + 1 : p + st.window);
                break;
            case ScoreStage::Pattern::padding: {  // j < lengths[sequence]
                const std::size_t per_sequence = m_batches / st.shape[0];
                hi = std::min(hi, static_cast<long>(st.lengths[b / per_sequence]));
                break;
            }
            case ScoreStage::Pattern::none:
                break;
        }
    }
    if (lo >= hi) return {0, 0};
    return {static_cast<std::size_t>(lo), static_cast<std::size_t>(hi)};
}

template <class T>
typename AttentionKernel<T>::Block AttentionKernel<T>::block(std::size_t b, std::size_t i) const {
    Block blk;
    blk.b = b;
    blk.r0 = i * gemm_row_block;
    blk.rows = std::min(gemm_row_block, m_spec.n - blk.r0);
    if (!m_spec.patterned && m_spec.m > 0) {  // every row sees every key
        blk.row_lo.assign(blk.rows, 0);
        blk.row_hi.assign(blk.rows, m_spec.m);
        blk.hi = m_spec.m;
        return blk;
    }
    blk.row_lo.resize(blk.rows);
    blk.row_hi.resize(blk.rows);
    bool any = false;
    for (std::size_t r = 0; r < blk.rows; ++r) {
        const Span s = span(m_spec.stages.size(), b, blk.r0 + r);
        blk.row_lo[r] = s.lo, blk.row_hi[r] = s.hi;
        if (s.lo == s.hi) continue;
        blk.lo = any ? std::min(blk.lo, s.lo) : s.lo;
        blk.hi = any ? std::max(blk.hi, s.hi) : s.hi;
        any = true;
    }
    return blk;
}

// Writes the block's rows of a kept value into each of `slots`: the computed columns (the
// span of `level`) from s, `fill` elsewhere (-inf where a Mask removed the key, 0 for A).
// With `last` (S_sinks, A_sinks), rows of m + 1 values: the sink column last[r] after the keys.
template <class T>
void AttentionKernel<T>::write(const std::vector<int>& slots, Out<T> kept, const Block& blk, const T* s,
                               std::size_t ld, std::size_t c0, std::size_t level, T fill, const T* last) const {
    const std::size_t m = m_spec.m, width = last ? m + 1 : m;
    if (kept.empty()) return;  // weights() for a recomputation: nothing to write
    bool streamed = false;
    for (int slot : slots) {
        Array<T>& value = *kept[static_cast<std::size_t>(slot)];
        // a value beyond the cache goes to memory by streaming stores (engine/stream_store.hpp)
        const bool stream = streams(value.size() * sizeof(T));
        streamed = streamed || stream;
        auto put = [stream](const T* from, std::size_t count, T* to) {
            if (stream)
                stream_copy(from, count, to);
            else
                std::copy(from, from + count, to);
        };
        auto fill_with = [stream, fill](T* to, std::size_t count) {
            if (stream)
                stream_fill(to, count, fill);
            else
                std::fill(to, to + count, fill);
        };
        T* out = value.data() + (blk.b * m_spec.n + blk.r0) * width;
        for (std::size_t r = 0; r < blk.rows; ++r) {
            const Span sp = span(level, blk.b, blk.r0 + r);
            T* row = out + r * width;
            if (last) row[m] = last[r];
            if (sp.lo == sp.hi) {
                fill_with(row, m);
                continue;
            }
            fill_with(row, sp.lo);
            put(s + r * ld + (sp.lo - c0), sp.hi - sp.lo, row + sp.lo);
            fill_with(row + sp.hi, m - sp.hi);
        }
    }
    if (streamed) stream_fence();  // before the task returns and another thread reads the value
}

// The block's sink logits into `column`, each row's by its nodes' arithmetic: S_first =
// S_raw[row, 0] by a GEMM call of its own (a window may leave the block no key 0; one call
// whatever is traced), S_zero = factor · S_first (ops/scale.hpp), S_sink = S_zero + bias
// (ops/add.hpp, in the Add's operand order). Kept ones are written on the way.
template <class T>
void AttentionKernel<T>::sink_column(const Block& blk, T* column, Out<T> kept) const {
    const AttentionSpec& spec = m_spec;
    const SinkColumn& sc = *spec.sink;
    const std::size_t first = blk.b * spec.n + blk.r0;  // the block's first row of (..., n, 1)
    auto put = [&](const std::vector<int>& slots) {
        if (kept.empty()) return;
        for (int slot : slots) std::copy(column, column + blk.rows, kept[static_cast<std::size_t>(slot)]->data() + first);
    };
    gemm<T>(false, true, blk.rows, 1, spec.dk, T(1), m_q + first * spec.dk, spec.dk,
            m_k + m_spec.k_offset[blk.b] * spec.m * spec.dk, spec.dk, T(0), column, 1);
    put(sc.first_outputs);
    const T f = static_cast<T>(sc.factor);
    for (std::size_t r = 0; r < blk.rows; ++r) column[r] = f * column[r];
    put(sc.zero_outputs);
    for (std::size_t r = 0; r < blk.rows; ++r) {
        const T bias = m_sink_bias[ops::broadcast_offset(first + r, sc.shape, m_spec.sink_strides)];
        column[r] = sc.bias_first ? bias + column[r] : column[r] + bias;
    }
    put(sc.column_outputs);
}

// One stage of the chain in place on the block's scores, on each row's span of `level`:
// the op's own arithmetic.
template <class T>
void AttentionKernel<T>::stage(const ScoreStage& st, const Block& blk, T* s, std::size_t ld, std::size_t c0,
                               std::size_t level) const {
    const std::size_t si = static_cast<std::size_t>(&st - m_spec.stages.data());
    const T* operand = m_operands[si];
    const std::vector<std::size_t>& strides = m_spec.operand_strides[si];
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const std::size_t m = m_spec.m, n = m_spec.n;
    for (std::size_t r = 0; r < blk.rows; ++r) {
        const std::size_t i = blk.r0 + r;
        const Span sp = span(level, blk.b, i);
        if (sp.lo == sp.hi) continue;
        T* x = s + r * ld + (sp.lo - c0);
        const std::size_t count = sp.hi - sp.lo;
        // the operand's element for key sp.lo + k: base + k·step
        std::size_t base = 0, step = 0;
        if (operand) {
            base = ops::broadcast_offset((blk.b * n + i) * m + sp.lo, st.shape, strides);
            step = strides.back();
        }
        switch (st.kind) {
            case ScoreStage::Kind::scale: {  // ops/scale.hpp
                const T f = static_cast<T>(st.factor);
                for (std::size_t k = 0; k < count; ++k) x[k] = f * x[k];
                break;
            }
            case ScoreStage::Kind::tanh: {  // ops/tanh.hpp, through the op's xsimd batch as ops::simd_map
                using B = xsimd::batch<T>;
                constexpr std::size_t W = B::size;
                const ops::TanhAttrs attrs{};
                std::size_t k = 0;
                for (; k + W <= count; k += W) ops::Tanh::apply(attrs, B::load_unaligned(x + k)).store_unaligned(x + k);
                if (k < count) {
                    alignas(64) T buf[W];
                    for (std::size_t e = 0; e < W; ++e) buf[e] = k + e < count ? x[k + e] : x[k];
                    ops::Tanh::apply(attrs, B::load_unaligned(buf)).store_unaligned(buf);
                    for (std::size_t e = 0; k + e < count; ++e) x[k + e] = buf[e];
                }
                break;
            }
            case ScoreStage::Kind::alibi: {  // ops/alibi.hpp: x - slope[h]·|i + offset - j|
                const std::size_t heads = st.shape[st.shape.size() - 3];
                const T slope = operand[blk.b % heads];
                const long p = static_cast<long>(i) + st.offset;
                for (std::size_t k = 0; k < count; ++k) {
                    const long j = static_cast<long>(sp.lo + k);
                    x[k] = x[k] - slope * static_cast<T>(static_cast<double>(p > j ? p - j : j - p));
                }
                break;
            }
            case ScoreStage::Kind::mask:  // ops/mask.hpp: the tensor's part (the pattern made the span)
                if (st.mask_tensor == ScoreStage::MaskTensor::additive) {
                    for (std::size_t k = 0; k < count; ++k) x[k] = x[k] + operand[base + k * step];
                } else if (st.mask_tensor == ScoreStage::MaskTensor::boolean) {
                    for (std::size_t k = 0; k < count; ++k) x[k] = operand[base + k * step] == T(0) ? neg_inf : x[k];
                }
                break;
            case ScoreStage::Kind::add:  // ops/add.hpp
                if (st.index >= 0) {  // bias = Gather(table, index) (ops/gather.hpp): a table row per row
                    const T* index = m_indices[si] + base % st.index_count;
                    const T* table = operand + base / st.index_count * st.table_len;
                    const std::size_t len = st.table_len;
                    if (step == 1)
                        for (std::size_t k = 0; k < count; ++k) x[k] = x[k] + table[ops::Gather::position(index[k], len)];
                    else
                        for (std::size_t k = 0; k < count; ++k)
                            x[k] = x[k] + table[ops::Gather::position(index[k * step], len)];
                    break;
                }
                if (st.multiplier >= 0) {  // bias = Mul(operand, multiplier) (ops/mul.hpp)
                    const std::vector<std::size_t>& ms = m_spec.multiplier_strides[si];
                    const T* mult = m_multipliers[si] + ops::broadcast_offset((blk.b * n + i) * m + sp.lo, st.shape, ms);
                    const std::size_t mstep = ms.back();
                    const ops::MulAttrs mul{};
                    for (std::size_t k = 0; k < count; ++k)
                        x[k] = x[k] + ops::Mul::apply(mul, operand[base + k * step], mult[k * mstep]);
                    break;
                }
                for (std::size_t k = 0; k < count; ++k) x[k] = x[k] + operand[base + k * step];
                break;
        }
    }
}

template <class T>
void AttentionKernel<T>::add_backward(const ScoreStage& st, std::size_t b, std::size_t r0, std::size_t rows,
                                      std::size_t lo, std::size_t hi, const T* ds, T* const* to,
                                      const std::size_t* base) const {
    const std::size_t si = static_cast<std::size_t>(&st - m_spec.stages.data());
    const T* operand = m_operands[si];
    const std::vector<std::size_t>& strides = m_spec.operand_strides[si];
    if (st.index < 0 && st.multiplier < 0) {  // Add's backward: db += dy
        if (to[0]) add_broadcast(st, strides, b, r0, rows, lo, hi, ds, to[0], base[0]);
        return;
    }
    const std::size_t m = m_spec.m, n = m_spec.n, count = hi - lo;
    const ops::MulAttrs mul{};
    for (std::size_t r = 0; r < rows && count > 0; ++r) {
        const T* dy = ds + r * m + lo;
        const std::size_t at = (b * n + r0 + r) * m + lo;  // (b, row, lo) in the stage's shape
        // the operand's element for key lo + k: off + k·step
        const std::size_t off = ops::broadcast_offset(at, st.shape, strides), step = strides.back();
        if (st.index >= 0) {  // Gather's backward: table[row, position] += dy
            if (!to[0]) continue;
            const T* index = m_indices[si] + off % st.index_count;
            T* table = to[0] + (off / st.index_count * st.table_len - base[0]);
            for (std::size_t k = 0; k < count; ++k) table[ops::Gather::position(index[k * step], st.table_len)] += dy[k];
        } else {  // Mul's backward: da += dy·b, db += dy·a
            const std::vector<std::size_t>& ms = m_spec.multiplier_strides[si];
            const std::size_t moff = ops::broadcast_offset(at, st.shape, ms), mstep = ms.back();
            const T* mult = m_multipliers[si];
            if (to[0])
                for (std::size_t k = 0; k < count; ++k)
                    to[0][off + k * step - base[0]] +=
                        dy[k] * ops::Mul::partial_a(mul, operand[off + k * step], mult[moff + k * mstep], T(0));
            if (to[1])
                for (std::size_t k = 0; k < count; ++k)
                    to[1][moff + k * mstep - base[1]] +=
                        dy[k] * ops::Mul::partial_b(mul, operand[off + k * step], mult[moff + k * mstep], T(0));
        }
    }
}

template <class T>
void AttentionKernel<T>::add_broadcast(const ScoreStage& st, const std::vector<std::size_t>& strides, std::size_t b,
                                       std::size_t r0, std::size_t rows, std::size_t lo, std::size_t hi, const T* ds,
                                       T* to, std::size_t base) const {
    const std::size_t m = m_spec.m, n = m_spec.n, step = strides.back();
    for (std::size_t r = 0; r < rows && lo < hi; ++r) {
        const std::size_t off = ops::broadcast_offset((b * n + r0 + r) * m + lo, st.shape, strides) - base;
        const T* dy = ds + r * m + lo;
        for (std::size_t k = 0; k < hi - lo; ++k) to[off + k * step] += dy[k];
    }
}

template <class T>
typename AttentionKernel<T>::Weights AttentionKernel<T>::weights(const Block& blk, T* scratch, Out<T> kept,
                                                                 const Capture* capture, std::size_t rows_ld) const {
    const AttentionSpec& spec = m_spec;
    const std::size_t count = spec.stages.size(), m = spec.m, dk = spec.dk;
    // the keys the block computes: those the softmax sees, and those a kept value shows
    std::size_t c0 = blk.lo, c1 = blk.hi;
    if (spec.level[0] < count) {
        bool any = blk.lo < blk.hi;
        for (std::size_t r = 0; r < blk.rows; ++r) {
            const Span sp = span(spec.level[0], blk.b, blk.r0 + r);
            if (sp.lo == sp.hi) continue;
            c0 = any ? std::min(c0, sp.lo) : sp.lo;
            c1 = any ? std::max(c1, sp.hi) : sp.hi;
            any = true;
        }
    }
    // the scores' rows: packed in the scratch, or the caller's rows of m keys
    const std::size_t ld = rows_ld ? rows_ld : c1 - c0;
    T* s = rows_ld ? scratch + c0 : scratch;
    // S_raw = Q·Kᵀ on those keys; the softmax's keys [lo, hi) by one GEMM call whatever is
    // kept, so that tracing changes none of their bits
    const T* q = m_q + (blk.b * spec.n + blk.r0) * dk;
    const std::size_t kmat = m_spec.k_offset[blk.b];
    auto scores_on = [&](std::size_t from, std::size_t to) {
        scores(q, blk.rows, kmat, from, to, s + (from - c0), ld);
    };
    if (blk.lo < blk.hi) {
        scores_on(c0, blk.lo);
        scores_on(blk.lo, blk.hi);
        scores_on(blk.hi, c1);
    } else {
        scores_on(c0, c1);
    }
    const T neg_inf = -std::numeric_limits<T>::infinity();
    if (!spec.s_raw_outputs.empty()) write(spec.s_raw_outputs, kept, blk, s, ld, c0, spec.level[0], neg_inf);
    const std::size_t folded = spec.fold_scale ? last_computing(spec) : count;
    for (std::size_t st = 0; st < count; ++st) {
        const ScoreStage& stage_ = spec.stages[st];
        if (st != folded && stage_.computes()) stage(stage_, blk, s, ld, c0, spec.level[st + 1]);
        if (!stage_.outputs.empty()) write(stage_.outputs, kept, blk, s, ld, c0, spec.level[st + 1], neg_inf);
        if (capture && capture->out && capture->stage == st)
            for (std::size_t r = 0; r < blk.rows; ++r) {  // the row's span: what the softmax reads
                T* out = capture->out + r * capture->ld;
                const std::size_t lo = std::clamp(blk.row_lo[r], capture->lo, capture->hi),
                                  hi = std::clamp(blk.row_hi[r], lo, capture->hi);
                std::fill(out, out + (lo - capture->lo), T(0));
                std::copy(s + r * ld + (lo - c0), s + r * ld + (hi - c0), out + (lo - capture->lo));
                std::fill(out + (hi - capture->lo), out + (capture->hi - capture->lo), T(0));
            }
    }
    // gpt-oss's sinks: each row's logit joins its softmax as column m (then its weight)
    T sinks[gemm_row_block];
    if (spec.sink) {
        sink_column(blk, sinks, kept);
        if (!spec.sink->scores_outputs.empty())
            write(spec.sink->scores_outputs, kept, blk, s, ld, c0, count, neg_inf, sinks);
    }
    const T factor = spec.fold_scale ? static_cast<T>(spec.stages[folded].factor) : T(1);
    softmax_spans<T>(s, ld, s, ld, c0, blk.rows, blk.row_lo.data(), blk.row_hi.data(), spec.sink ? m + 1 : m, factor,
                     spec.fold_scale, spec.sink ? sinks : nullptr);
    if (spec.sink && capture && capture->sink) std::copy(sinks, sinks + blk.rows, capture->sink);
    // zero weight for the keys of [lo, hi) outside a row's span (the A·V product reads them);
    // a row whose softmax gave NaN (a NaN score or sink logit, or inf − inf: its span and
    // sink are NaN throughout) is NaN on every key, as the Softmax op gives the whole row (its
    // masked keys' 0·(1/NaN))
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::bitset<gemm_row_block> nan_rows;
    for (std::size_t r = 0; r < blk.rows; ++r) {
        const T first = blk.row_lo[r] < blk.row_hi[r] ? s[r * ld + (blk.row_lo[r] - c0)] : spec.sink ? sinks[r] : T(0);
        nan_rows[r] = first != first;
    }
    for (std::size_t r = 0; r < blk.rows && blk.lo < blk.hi; ++r) {
        T* row = s + r * ld;
        const T fill = nan_rows[r] ? nan : T(0);
        if (blk.row_lo[r] == blk.row_hi[r]) {
            std::fill(row + (blk.lo - c0), row + (blk.hi - c0), fill);
            continue;
        }
        std::fill(row + (blk.lo - c0), row + (blk.row_lo[r] - c0), fill);
        std::fill(row + (blk.row_hi[r] - c0), row + (blk.hi - c0), fill);
    }
    if (!spec.a_outputs.empty()) write(spec.a_outputs, kept, blk, s, ld, c0, count, T(0));
    if (spec.sink && !spec.sink->weights_outputs.empty())
        write(spec.sink->weights_outputs, kept, blk, s, ld, c0, count, T(0), sinks);
    if (nan_rows.any() && !kept.empty()) {  // the kept weights' NaN rows, on every key (the sink's too)
        auto nan_fill = [&](const std::vector<int>& slots, std::size_t width) {
            for (int slot : slots) {
                T* out = kept[static_cast<std::size_t>(slot)]->data() + (blk.b * spec.n + blk.r0) * width;
                for (std::size_t r = 0; r < blk.rows; ++r)
                    if (nan_rows[r]) std::fill(out + r * width, out + (r + 1) * width, nan);
            }
        };
        nan_fill(spec.a_outputs, m);
        if (spec.sink) nan_fill(spec.sink->weights_outputs, m + 1);
    }
    return {s + (blk.lo - c0), ld, nan_rows};
}

template <class T>
void AttentionKernel<T>::forward(std::size_t b, std::size_t i, T* scratch, Out<T> kept, T* o) const {
    if (m_spec.diff) {
        forward_diff(b, i, scratch, kept, o);
        return;
    }
    const Block blk = block(b, i);
    const Weights w = weights(blk, scratch, kept);
    const std::size_t dv = m_spec.dv;
    if (blk.lo == blk.hi) {  // every row fully masked: A = 0, so O = 0 (NaN for a NaN sink)
        std::fill(o, o + blk.rows * dv, T(0));
        for (std::size_t r = 0; r < blk.rows && w.nan_rows.any(); ++r)
            if (w.nan_rows[r]) std::fill(o + r * dv, o + (r + 1) * dv, std::numeric_limits<T>::quiet_NaN());
    } else {
        weighted_sum(w.a, w.lda, blk.rows, m_v + (m_spec.v_offset[blk.b] * m_spec.m + blk.lo) * dv, blk.hi - blk.lo, o);
    }
    poison_columns(m_spec.v_offset[blk.b], blk.lo, blk.hi, blk.rows, o);
}

// Block (b, i) of O's matrix b with `diff`: the weights of query matrices 2b (A_1) and
// 2b + 1 (A_2) in the first two thirds of the scratch, A_diff over the union [lo, hi) of their
// key spans in the last third, each element as the nodes compute it: A_2_weighted = Mul(A_2,
// lambda), A_diff = Sub(A_1, A_2_weighted), with A_1, A_2 = 0 outside their blocks' spans.
// Kept ones (A_split:0 = A_1, A_split:1 = A_2, A_2_weighted, A_diff) are written in full rows.
template <class T>
void AttentionKernel<T>::forward_diff(std::size_t b, std::size_t i, T* scratch, Out<T> kept, T* o) const {
    const AttentionSpec& spec = m_spec;
    const DiffPair& dp = *spec.diff;
    const std::size_t m = spec.m, dv = spec.dv, third = scratch_size() / 3;
    const Block b1 = block(2 * b, i), b2 = block(2 * b + 1, i);
    const Weights w1 = weights(b1, scratch, kept), w2 = weights(b2, scratch + third, kept);
    const std::size_t first = b * spec.n + b1.r0;  // the block's first row in O's matrices
    // one row r of the block: its weights (0 outside the block's keys) and lambdas
    struct Row {
        const Block& b1;
        const Weights& w1;
        const Block& b2;
        const Weights& w2;
        std::size_t r;
        const T* lambda;
        std::size_t step;
        T a1(std::size_t j) const { return j >= b1.lo && j < b1.hi ? w1.a[r * w1.lda + (j - b1.lo)] : T(0); }
        T a2(std::size_t j) const { return j >= b2.lo && j < b2.hi ? w2.a[r * w2.lda + (j - b2.lo)] : T(0); }
        T weighted(std::size_t j) const { return ops::Mul::apply(ops::MulAttrs{}, a2(j), lambda[j * step]); }
        T diff(std::size_t j) const { return ops::Sub::apply(ops::SubAttrs{}, a1(j), weighted(j)); }
    };
    const std::size_t step = m_spec.lambda_strides.back();
    const ops::MulAttrs mul{};
    const ops::SubAttrs sub{};
    auto row = [&](std::size_t r) {
        return Row{b1, w1, b2, w2, r, m_lambda + ops::broadcast_offset((first + r) * m, dp.shape, m_spec.lambda_strides),
                   step};
    };
    // the kept values, full rows
    auto put = [&](const std::vector<int>& slots, T (Row::*value)(std::size_t) const) {
        if (kept.empty()) return;
        for (int slot : slots) {
            T* out = kept[static_cast<std::size_t>(slot)]->data() + first * m;
            for (std::size_t r = 0; r < b1.rows; ++r) {
                const Row x = row(r);
                for (std::size_t j = 0; j < m; ++j) out[r * m + j] = (x.*value)(j);
            }
        }
    };
    put(dp.first_outputs, &Row::a1);
    put(dp.second_outputs, &Row::a2);
    put(dp.weighted_outputs, &Row::weighted);
    put(dp.diff_outputs, &Row::diff);
    // the keys A_diff may be nonzero at: the union of the two spans (all of them when a lambda
    // is not finite: 0·lambda is NaN there)
    std::size_t lo = m, hi = 0;
    for (const Block* blk : {&b1, &b2})
        if (blk->lo < blk->hi) lo = std::min(lo, blk->lo), hi = std::max(hi, blk->hi);
    if (!m_lambda_finite) lo = 0, hi = m;
    if (lo >= hi) {  // every row fully masked in both maps: A_diff = 0, so O = 0
        std::fill(o, o + b1.rows * dv, T(0));
        poison_columns(m_spec.v_offset[b], lo, lo, b1.rows, o);
        return;
    }
    T* d = scratch + 2 * third;
    std::size_t ld = hi - lo;
    if (b1.lo == lo && b1.hi == hi && b2.lo == lo && b2.hi == hi) {
        // both maps over the same keys (the causal and padding masks give them the same spans):
        // A_diff in place of A_1, element by element as Row::diff has it
        d = scratch + (w1.a - scratch);
        ld = w1.lda;
        for (std::size_t r = 0; r < b1.rows; ++r) {
            const T* a2 = w2.a + r * w2.lda;
            const T* lambda = row(r).lambda + lo * step;
            T* a1 = d + r * ld;
            for (std::size_t k = 0; k < hi - lo; ++k)
                a1[k] = ops::Sub::apply(sub, a1[k], ops::Mul::apply(mul, a2[k], lambda[k * step]));
        }
    } else {
        for (std::size_t r = 0; r < b1.rows; ++r) {
            const Row x = row(r);
            for (std::size_t j = lo; j < hi; ++j) d[r * ld + (j - lo)] = x.diff(j);
        }
    }
    weighted_sum(d, ld, b1.rows, m_v + (m_spec.v_offset[b] * m + lo) * dv, hi - lo, o);
    poison_columns(m_spec.v_offset[b], lo, hi, b1.rows, o);
}

template <class T>
void fused_attention_forward(const AttentionSpec& spec, In<T> in, Out<T> out) {
    const AttentionKernel<T> kernel(spec, in);
    const std::size_t blocks = kernel.blocks();
    T* o = out[0]->data();
    // one small block (a tiny graph's head): its scratch on the stack, no pool
    constexpr std::size_t stack_scratch = 1024;
    if (kernel.outputs() * blocks == 1 && kernel.scratch_size() <= stack_scratch) {
        T scratch[stack_scratch];
        kernel.forward(0, 0, scratch, out, o);
        return;
    }
    fused_attention_detail::ScratchPool<T> pool(kernel.scratch_size());
    parallel_chunks(kernel.outputs() * blocks, 1, [&](std::size_t c0, std::size_t c1) {
        for (std::size_t c = c0; c < c1; ++c) {
            const std::size_t b = c / blocks, i = c % blocks;
            std::unique_ptr<T[]> scratch = pool.take();
            kernel.forward(b, i, scratch.get(), out, o + (b * spec.n + i * gemm_row_block) * spec.dv);
            pool.give(std::move(scratch));
        }
    });
}

template class AttentionKernel<float>;
template class AttentionKernel<double>;
template void fused_attention_forward<float>(const AttentionSpec&, In<float>, Out<float>);
template void fused_attention_forward<double>(const AttentionSpec&, In<double>, Out<double>);

}  // namespace attngraph
