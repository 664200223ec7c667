#pragma once
// The fused attention step of a run plan (engine/optimize.hpp):
//
//   O = softmax(chain(Q·Kᵀ))·V
//
// by blocks of gemm_row_block query rows, where `chain` is what a graph puts between the
// scores and the softmax, node by node (the score chain): Scale, Tanh (softcapping:
// S_div → S_tanh → S_capped), Alibi, Mask (a pattern and/or a mask tensor) and Add (a bias
// tensor; or, when nothing else reads the bias, the Gather along a table's last axis or the
// Mul that makes it, read through their operands), with Reshapes that keep the last two
// axes anywhere between (GQA's (B, G, r, n, m) scores viewed as (B, H, n, m)). A block computes its scores, runs them through the chain,
// the softmax and the product with V while they are in cache; the n×m matrices are never
// held unless traced.
//
// Masked key blocks are skipped. A Mask pattern (causal with an offset, window, padding)
// keeps a contiguous span of keys [lo, hi) for every query row. The block computes Q·Kᵀ,
// the chain and A·V only over the union of its rows' spans (and each row's softmax only over
// its own span): for causal attention the block of rows r0 .. r0 + 127 computes keys
// 0 .. r0 + 127 only, for a window of w keys about w + 127, for padded keys nothing past the
// sequence's length. A boolean mask tensor (FlexAttention's mask_mod, a document mask, ONNX's
// bool attn_mask) bounds each row's span the same way: its first to its last kept key, found
// by one pass over the tensor per run (the keys between are masked element by element). What
// is skipped is what the plain nodes give there: A = 0 (a fully
// masked row gives zeros, as the Softmax op does), and softmax_spans gives the bits
// softmax_rows gives on the whole row (engine/softmax_kernel.hpp). A pattern Mask is only
// taken as a span when every node after it maps -inf to -inf (not Tanh, not a Scale by a
// factor <= 0); else the chain does not fuse. A mask tensor's span is taken on the same
// condition; else the tensor is applied over every key.
//
// Every node of the chain does its op's arithmetic in its op's order (Scale f·x, Alibi
// x - slope·|i + offset - j|, Mask x (+ mask) or -inf, Add x + b with b = table[index] or
// Mul(a, c) when folded, Tanh through the op's xsimd
// batch), so a fused run gives the plain run's scores and weights; the GEMMs are the engine's
// (a transposed operand may round differently in OpenBLAS in the last bit). A traced value of
// the chain is written block by block under its own name, full rows: -inf where an earlier
// Mask removed a key, the computed values elsewhere. Tracing changes no bit of the untraced
// values: the keys a block needs are computed by the same GEMM calls either way, and
// traced-only columns by separate calls.
//
// The Differential Transformer (DiffPair) takes the same path for both of its maps: a block of
// O's rows computes the weights of the two query matrices' blocks as above, forms
// A_diff = A_1 - lambda·A_2 on the union of their key spans by the Mul and Sub ops' arithmetic
// (a key outside both spans has A_diff = 0 - 0·lambda = 0 for a finite lambda; with an inf or
// NaN lambda every key is computed, as the plain nodes compute it) and O's rows = A_diff·V by
// one GEMM over those keys.
#include <algorithm>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "engine/attention_gemm.hpp"
#include "engine/gemm.hpp"
#include "engine/kernel.hpp"
#include "engine/tensor.hpp"

namespace attngraph {

/// @brief One node of the score chain, folded into the attention step.
struct ScoreStage {
    enum class Kind { scale, tanh, alibi, mask, add };
    enum class Pattern { none, causal, window, padding };
    enum class MaskTensor { none, boolean, additive };

    Kind kind = Kind::scale;
    double factor = 1.0;                          ///< scale: y = factor · x
    long offset = 0;                              ///< alibi; mask causal/window: keys before query 0
    bool offset_from_end = false;                 ///< mask causal/window: offset = m - n
    Pattern pattern = Pattern::none;              ///< mask: the built-in pattern (a key span per row)
    long window = 0;                              ///< mask window: the width w
    bool window_causal = false;                   ///< mask window: 0 <= p - j < w instead of |p - j| < w
    std::vector<int> lengths;                     ///< mask padding: keys per sequence (axis 0)
    MaskTensor mask_tensor = MaskTensor::none;    ///< mask: what its tensor (operand) means
    /// mask with a boolean tensor: a row's kept keys, first to last, bound its span as a pattern
    /// does (set when every node after the Mask keeps -inf at -inf, as for a pattern)
    bool tensor_span = false;
    int operand = -1;                             ///< step input: alibi slopes, mask tensor, add bias; -1 none
    Shape operand_shape;                          ///< its shape, the bias's with `index` (broadcast to `shape`)
    /// add: the bias is Gather(operand, index) along the operand's last axis (T5's relative
    /// position bias: a table per head read at q - k), read through the index in the step
    /// instead of materialised as (h, n, m). -1: the operand is the bias itself.
    int index = -1;                               ///< step input: the Gather's indices
    std::size_t table_len = 0;                    ///< the operand's last axis, the Gather's
    std::size_t index_count = 0;                  ///< the indices' elements
    std::string gather_node;                      ///< the Gather's name, for errors
    /// add: the bias is Mul(operand, multiplier) (attention-gym's ALiBi: slope[h]·(j - i)),
    /// each element by the Mul's arithmetic in the step instead of materialised. -1: no product.
    int multiplier = -1;                          ///< step input: the Mul's second operand
    Shape multiplier_shape;                       ///< its shape (broadcast to `shape`)
    Shape shape;                                  ///< this node's output: (..., n, m)
    std::vector<int> outputs;                     ///< step outputs holding this value (it, and Reshapes of it)

    /// The length of a row of the mask tensor (1: broadcast along the keys).
    std::size_t mask_width() const { return operand_shape.empty() ? 1 : std::max<std::size_t>(operand_shape.back(), 1); }

    /// Whether the stage computes anything per element (a Mask without a tensor does not: it
    /// only narrows the span).
    bool computes() const { return kind != Kind::mask || mask_tensor != MaskTensor::none; }
};

/// @brief gpt-oss's attention sinks: each row's softmax takes one more column after the m keys,
/// the head's sink logit, and the first m weights are A (the sink's weight goes nowhere). As
/// the graph builds it (graphs/variants.cpp):
///   S_first = S_raw[..., :1], S_zero = factor · S_first, S_sink = S_zero + bias (the sinks),
///   S_sinks = [S | S_sink] (S the chain's output), A_sinks = softmax(S_sinks), A = A_sinks[..., :m].
struct SinkColumn {
    double factor = 0.0;  ///< S_zero = factor · S_first (0: the column is the bias alone for finite scores)
    int operand = -1;     ///< step input: the bias (the sink logits), broadcast to `shape`
    bool bias_first = false;  ///< S_sink = bias + S_zero (the Add's operands the other way round)
    Shape operand_shape;  ///< its shape
    Shape shape;          ///< S_first's, S_zero's and S_sink's: (..., n, 1)
    /// step outputs holding S_first, S_zero, S_sink, S_sinks, A_sinks (each kept or not)
    std::vector<int> first_outputs, zero_outputs, column_outputs, scores_outputs, weights_outputs;
};

/// @brief The Differential Transformer's two maps per head: A (..., 2, n, m) holds softmax(Q1·K1ᵀ)
/// and softmax(Q2·K2ᵀ) along its last batch axis, and O = A_diff·V with, as the graph builds it
/// (graphs/variants.cpp):
///   A_split:0, A_split:1 = Split(A) on that axis, A_2_weighted = A_split:1 · lambda (ops/mul.hpp),
///   A_diff = A_split:0 - A_2_weighted (ops/sub.hpp).
/// O's matrix b reads Q's matrices 2b and 2b + 1 (the split axis is the last batch axis).
struct DiffPair {
    int operand = -1;     ///< step input: lambda, broadcast to `shape`
    Shape operand_shape;  ///< its shape
    Shape shape;          ///< A_split:0's, A_split:1's, A_2_weighted's and A_diff's: (..., 1, n, m)
    Shape batch;          ///< O's batch axes (`shape`'s), half of AttentionSpec::batch
    /// step outputs holding A_split:0, A_split:1, A_2_weighted, A_diff (each kept or not)
    std::vector<int> first_outputs, second_outputs, weighted_outputs, diff_outputs;
};

/// @brief Everything the fused attention kernel needs of the graph. Step inputs: Q, K, V,
/// then the stages' operands (and the sink's or lambda); step outputs: O, then the kept values.
struct AttentionSpec {
    Shape batch;             ///< the batch axes of Q, S and O
    Shape k_batch, v_batch;  ///< K's and V's, broadcasting to `batch` (shared across heads: MQA, GQA)
    std::size_t n = 0, m = 0, dk = 0, dv = 0;
    std::vector<int> s_raw_outputs;  ///< step outputs holding S_raw = Q·Kᵀ
    std::vector<ScoreStage> stages;  ///< the chain, in graph order
    std::vector<int> a_outputs;      ///< step outputs holding A
    std::optional<SinkColumn> sink;  ///< gpt-oss's sink column in every softmax row
    std::optional<DiffPair> diff;    ///< the Differential Transformer: O = (A_1 - lambda·A_2)·V

    /// The last stage is a Scale whose value (and nothing after it, S_sinks included) is not
    /// kept: the softmax applies the factor (one pass fewer, the same bits). Set by finish().
    bool fold_scale = false;
    /// level[v]: which stages' spans bound the columns value v needs (v = 0 S_raw, v = s + 1
    /// stage s's output): the spans of stages [0, level[v]). Set by finish().
    std::vector<std::size_t> level;
    /// The matrix index of K per batch index of `batch` (row-major), and of V per O matrix (of
    /// diff's batch with a DiffPair). Set by finish().
    std::vector<std::size_t> k_offset, v_offset;
    /// Per stage: its operand's and multiplier's broadcast strides into its shape (empty: none); the sink
    /// operand's into the sink column; diff's lambda's into A_diff. Set by finish().
    std::vector<std::vector<std::size_t>> operand_strides, multiplier_strides;
    std::vector<std::size_t> sink_strides, lambda_strides;
    /// Whether a Mask stage has a pattern or a tensor span (else every row sees all m keys).
    /// Set by finish().
    bool patterned = false;

    /// Derives fold_scale, level and the shapes' offsets and strides from the rest: a run plan
    /// does it once, not every run (a tiny graph's head costs about as much to set up as to
    /// compute).
    void finish();
};

/// @brief The per-block computation of fused attention, for the forward step and for a
/// backward that recomputes A block by block with the forward's bits.
///
/// Block (b, i): rows i·gemm_row_block .. of query matrix b (b a flat index into `batch`).
/// weights() gives its attention weights over the keys [lo, hi) the block can see;
/// forward() adds A·V (with `diff`, A_diff·V from the blocks of query matrices 2b and 2b + 1).
/// Thread-safe (const); each call needs its own scratch.
template <class T>
class AttentionKernel {
public:
    /// `in`: Q, K, V and the stages' operands, as the step's inputs.
    AttentionKernel(const AttentionSpec& spec, In<T> in);

    std::size_t batches() const { return m_batches; }
    /// O's matrices: batches(), or half of them with `diff`.
    std::size_t outputs() const { return m_spec.diff ? m_batches / 2 : m_batches; }
    std::size_t blocks() const { return m_blocks; }
    /// Whether K was packed whole for the kernels when this was made (false: on OpenBLAS, or
    /// each matrix of K read by one block, whose panels scores() packs as it reads them).
    bool k_packed() const { return m_packed_k != nullptr; }
    /// Scratch elements one call to forward() needs: rows × m (at most gemm_row_block × m),
    /// three times that with `diff` (both maps' weights and A_diff). weights() needs rows × m.
    std::size_t scratch_size() const;

    /// A block's rows and the keys each can see.
    struct Block {
        std::size_t b = 0, r0 = 0, rows = 0;
        std::size_t lo = 0, hi = 0;          ///< the union of the rows' spans (lo == hi: none)
        /// each row's span, row r: [row_lo[r], row_hi[r]) (inline: a block has at most
        /// gemm_row_block rows, and a tiny graph's run allocates nothing for its blocks)
        boost::container::small_vector<std::size_t, gemm_row_block> row_lo, row_hi;
    };
    Block block(std::size_t b, std::size_t i) const;

    /// Where weights() left A: A[r][j] = a[r·lda + j - lo] for j in [lo, hi), zero outside the
    /// row's span; every other key has weight 0. A row whose softmax gave NaN is NaN on every
    /// key, as the Softmax op gives it (and so are its rows of a kept A).
    struct Weights {
        const T* a;
        std::size_t lda;
        std::bitset<gemm_row_block> nan_rows;  ///< the rows that are NaN (a NaN score or sink logit)
    };
    /// What a backward needs besides A: a stage's output over the block's rows (a Tanh's,
    /// whose derivative reads it; `out` null: none), row r's keys [lo, hi) at
    /// out[r·ld + j - lo], the row's span as computed and zeros around it (the keys outside
    /// the row's span have A = 0); and with sinks, each row's sink weight into `sink`.
    struct Capture {
        std::size_t stage = 0;
        T* out = nullptr;
        std::size_t ld = 0, lo = 0, hi = 0;
        T* sink = nullptr;
    };
    /// @brief A of `blk` in `scratch` (rows × m elements). `kept`: the step's outputs, the
    /// kept values of the chain written for the block's rows; empty: nothing written (a
    /// backward recomputing A gets the forward's bits either way). `capture`: one stage's
    /// output copied out on the way (null: none). `rows_ld` > 0: `scratch` is the block's rows
    /// of m keys, rows_ld apart (key j of row r at scratch[r·rows_ld + j]), and the weights are
    /// computed there (the same bits); keys outside [lo, hi) are left as they were or hold
    /// scores of kept values, not weights.
    Weights weights(const Block& blk, T* scratch, Out<T> kept, const Capture* capture = nullptr,
                    std::size_t rows_ld = 0) const;
    /// @brief The backward of Add stage `st` for its operands (ops/add.hpp, and the folded
    /// ops/gather.hpp's or ops/mul.hpp's; an additive Mask's tensor as a bias, ops/mask.hpp):
    /// dS of query rows [r0, r0 + rows) of Q's matrix b
    /// over the keys [lo, hi) (row r at ds[r·m + j]) added to the bias's elements (the
    /// table's at the indices; a Mul's operands times the other's values), operand k's
    /// element e at to[k][e − base[k]] (to[k] null: not wanted), row by row, key by key.
    void add_backward(const ScoreStage& st, std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo,
                      std::size_t hi, const T* ds, T* const* to, const std::size_t* base) const;
    /// @brief The same dS added to a tensor broadcast to `st`'s shape by `strides`, as the Add
    /// op's backward reduces it (a bias, or a folded bias itself): element e at to[e − base].
    void add_broadcast(const ScoreStage& st, const std::vector<std::size_t>& strides, std::size_t b, std::size_t r0,
                       std::size_t rows, std::size_t lo, std::size_t hi, const T* ds, T* to, std::size_t base) const;
    /// @brief O's rows of block (b, i) of O's matrix b: weights(), then o = A·V, or with `diff`
    /// the weights of both maps, A_diff and o = A_diff·V (o points at row i·gemm_row_block of
    /// O's matrix b).
    void forward(std::size_t b, std::size_t i, T* scratch, Out<T> kept, T* o) const;

private:
    struct Span {
        std::size_t lo, hi;
    };
    std::vector<Span> tensor_spans(const ScoreStage& st, const T* mask) const;
    Span span(std::size_t level, std::size_t b, std::size_t row) const;
    void write(const std::vector<int>& slots, Out<T> kept, const Block& blk, const T* s, std::size_t ld,
               std::size_t c0, std::size_t level, T fill, const T* last = nullptr) const;
    void stage(const ScoreStage& st, const Block& blk, T* s, std::size_t ld, std::size_t c0, std::size_t level) const;
    void sink_column(const Block& blk, T* column, Out<T> kept) const;
    void forward_diff(std::size_t b, std::size_t i, T* scratch, Out<T> kept, T* o) const;
    void poison_columns(std::size_t v, std::size_t lo, std::size_t hi, std::size_t rows, T* o) const;
    void find_bad_values(std::size_t v) const;
    bool one_reader_per_k(std::size_t k_matrices) const;
    // the largest d_k whose K scores() packs a panel at a time (into a buffer of panel · d_k
    // floats on the stack)
    static constexpr std::size_t panel_buffer_max_dk = 256;
    // S = Q·Kᵀ of the block's rows (q) on the keys [from, to) of K's matrix kmat into s
    // (row stride ld), and o = A·V of `rows` rows over `keys` keys (V's rows of dv from v,
    // o's rows dv apart): engine/attention_gemm.hpp's kernels where they serve, else gemm.
    void scores(const T* q, std::size_t rows, std::size_t kmat, std::size_t from, std::size_t to, T* s,
                std::size_t ld) const;
    void weighted_sum(const T* a, std::size_t lda, std::size_t rows, const T* v, std::size_t keys, T* o) const;

    const AttentionSpec& m_spec;
    const T* m_q;
    const T* m_k;
    const T* m_v;
    // per stage: its operand's data (or null); inline for a few stages: a kernel is made on
    // every run of its step
    boost::container::small_vector<const T*, 8> m_operands, m_multipliers;
    // per stage with a tensor span: the span of each row of its mask tensor (its own shape's
    // rows, before broadcasting); empty for the other stages
    std::vector<std::vector<Span>> m_tensor_spans;
    // per stage with a gathered bias: its indices (checked by ops::Gather::positions, read with
    // ops::Gather::position); null for the other stages
    std::vector<const T*> m_indices;
    const T* m_sink_bias = nullptr;  // the sink logits (spec.sink's operand)
    const T* m_lambda = nullptr;     // diff: lambda (spec.diff's operand)
    bool m_lambda_finite = true;     // diff: no lambda is inf or NaN
    // per matrix of V and column c (at v·dv + c): the rows [first, last + 1) holding its
    // values that are inf or NaN (first == last + 1 == 0: none). The plain A·V multiplies
    // them by the weights 0 of keys the step skips: NaN. Found for matrix v when a block
    // first skips keys of it (m_v_checked[v]); both empty without a patterned Mask.
    mutable std::vector<Span> m_v_bad;
    std::unique_ptr<std::once_flag[]> m_v_checked;
    std::size_t m_batches = 0, m_blocks = 0;
    // f32 on a CPU with the attention kernels (engine/attention_gemm.hpp), at sizes where they
    // serve: the kernels, and each matrix of K packed for them (packed_size(m, dk) apart;
    // empty when one block reads each, which scores() packs as it goes: one_reader_per_k);
    // otherwise null and empty (gemm); not zeroed first: pack_keys writes every element (3 MB
    // of zeros at decoding's 1024 keys were 3.6 % of a step)
    const attention_gemm::Kernels* m_products = nullptr;
    std::unique_ptr<float[]> m_packed_k;
};

/// @brief Runs the fused attention step: in = Q, K, V, operands; out = O, kept values.
template <class T>
void fused_attention_forward(const AttentionSpec& spec, In<T> in, Out<T> out);

}  // namespace attngraph
