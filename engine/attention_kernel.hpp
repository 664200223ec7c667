#pragma once
// The fused attention step's backward (engine/attention_backward.cpp) for O = softmax(chain(Q·Kᵀ))·V,
// the chain being Scales, ALiBi biases, Adds of a bias (a tensor, a Gather's, a Mul's), a Tanh
// and Masks (causal, window, padding, a boolean tensor), and Reshapes of the batch axes
// anywhere between; maybe with gpt-oss's sink column in the softmax or the Differential
// Transformer's two maps (O = (A_1 − A_2·lambda)·V); by the forward's blocks of
// gemm_row_block query rows. The backward plan recomputes a block's weights with the
// forward's own kernel (engine/fused_attention.hpp), so they have the forward's bits.
//
// Legend: Q is (batch..., n, dk); K is (kbatch..., m, dk) and V (vbatch..., m, dv), each
// matrix of Q reading one of K's and of V's (kb, vb: K and V shared across query heads, MQA,
// GQA); O and dO are (batch..., n, dv); S_raw, S, A and their gradients are (batch..., n, m).
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief One node between S_raw and the softmax in a fused step's backward: a Scale, whose
/// backward multiplies the gradient by its factor; a Mask, whose backward passes it where a
/// key is kept (where it is masked A = 0, so dS = A ⊙ (...) is ±0 already); an Alibi,
/// y = x − slopes[h]·|i + offset − j|, whose backward passes it and gives the slopes
/// −Σ dy·|i + offset − j| (head h = batch mod heads); a Tanh (Gemma 2's softcapping),
/// whose backward multiplies it by 1 − y², y recomputed with A (at most one Tanh a chain); or
/// an Add of a bias, whose backward passes it and gives the bias's operands theirs (BiasGrad);
/// or a Reshape that regroups batch axes (the same elements), which passes it.
enum class ChainKind { scale, mask, alibi, tanh, add, reshape };

template <class T>
struct ChainLink {
    using Kind = ChainKind;
    Kind kind = Kind::mask;
    T factor = T(1);         ///< a Scale's
    long offset = 0;         ///< an Alibi's: keys before query 0
    std::size_t heads = 1;   ///< an Alibi's: its slopes
};

/// @brief The gradients of an Add's bias (engine/fused_attention.hpp, ScoreStage::Kind::add) in
/// a fused step's backward: the bias's own, or its Gather's table's, or its Mul's two
/// operands'. Each operand is cut into matrices (the elements one matrix of the scores
/// reads; matrix_of maps each matrix of Q to its operand matrix); a matrix read by several
/// matrices of Q gets each one's share in a part of its own, added in Q's order, as a shared
/// K or V does.
template <class T>
struct BiasGrad {
    std::size_t link = 0;  ///< the Add's place in AttentionOperands::chain
    struct Operand {
        T* grad = nullptr;                   ///< the operand's gradient (+=); null: not wanted
        std::vector<std::size_t> matrix_of;  ///< per matrix of Q: the operand's matrix it reads
        std::size_t matrices = 0, size = 0;  ///< the operand's matrices and the elements of one
    };
    /// the bias or its Gather's table, or its Mul's two operands; third, a folded bias itself
    /// when its gradient is asked for (at most 3)
    std::vector<Operand> operands;
    /// Adds the shares of dS over query rows [r0, r0 + rows) of Q's matrix b and the keys
    /// [lo, hi) (row r at ds[r·m + j]): operand k's element e at to[k][e − base[k]] (to[k]
    /// null: not wanted), base[k] the start of b's operand matrix.
    std::function<void(std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo, std::size_t hi, const T* ds,
                       T* const* to, const std::size_t* base)>
        add;
};

/// @brief The operands of one fused attention step, flattened to matrices.
template <class T>
struct AttentionOperands {
    const T* q = nullptr;
    const T* k = nullptr;
    const T* v = nullptr;
    std::size_t n = 0, m = 0, dk = 0, dv = 0;  ///< query rows, key rows, key width, value width
    std::size_t batches = 0;                   ///< matrices of Q (and of O)
    std::size_t k_batches = 0, v_batches = 0;  ///< matrices of K and of V
    std::vector<std::size_t> kb, vb;           ///< batch of Q -> its matrix of K, of V
    /// The nodes between S_raw and the softmax, from the softmax's input back to S_raw's reader.
    std::vector<ChainLink<T>> chain;
    /// The keys [lo, hi) that the query rows [r0, r0 + rows) of batch b may weigh: A is 0
    /// outside them (a Mask's spans), and the backward computes nothing there.
    /// attention_operands() sets every key.
    std::function<std::pair<std::size_t, std::size_t>(std::size_t b, std::size_t r0, std::size_t rows)> keys;
    /// Each row's own keys: row r0 + r of batch b keeps [lo[r], hi[r]) (lo == hi: none), its
    /// Masks remove the others. Asked for only where a step is not finite (below: then every
    /// key is computed and dS is 0 at the removed keys, as the Mask op's backward gives it).
    /// attention_operands() sets every key.
    std::function<void(std::size_t b, std::size_t r0, std::size_t rows, std::size_t* lo, std::size_t* hi)> row_keys;
    /// A of the forward's block of query rows [r0, r0 + rows) of batch b into `a` (rows, m),
    /// on the keys [lo, hi) at least (those of `keys` for a step holding the block; other
    /// columns may be left as they were): the backward's recomputation. The backward plan
    /// sets it to the forward's own kernel (AttentionKernel::weights,
    /// engine/fused_attention.hpp), which gives the forward's bits and applies the step's
    /// masks; attention_operands() sets softmax(c·Q·Kᵀ) by the engine's GEMM and softmax
    /// kernel, on every key. With a Tanh in the chain, `y` (else null) gets its output the
    /// same way (columns [lo, hi), 0 where A is masked to 0); with sinks, `sink` (else null)
    /// each row's sink weight.
    std::function<void(std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo, std::size_t hi, T* a, T* y,
                       T* sink)>
        weights;
    /// gpt-oss's sinks (engine/fused_attention.hpp, SinkColumn, with S_zero = 0·S_first): each
    /// row's softmax has one more column, the sink logit of batch b's element sink_of[b] of
    /// the sink operand (one per matrix: the same for every row). Empty: no sinks.
    std::vector<std::size_t> sink_of;
    /// The Differential Transformer (engine/fused_attention.hpp, DiffPair): O's matrix b is
    /// A_diff·V with A_diff = A_{2b} − A_{2b+1}·lambda_b as the Sub and Mul ops compute it,
    /// A_{2b} and A_{2b+1} the weights of Q's matrices 2b and 2b + 1 (V's matrix vb[2b]), and
    /// lambda_b = lambda[lambda_of[b]] (one per O matrix). Empty: O's matrix b is A_b·V.
    std::vector<std::size_t> lambda_of;
    const T* lambda = nullptr;
    /// The Adds of the chain whose bias's operands want gradients.
    std::vector<BiasGrad<T>> biases;
};

/// @brief The operands of q, k, v (shapes as in the legend; not checked here), for
/// O = softmax(c·Q·Kᵀ)·V (with !scaled: no Scale node, c = 1).
template <class T>
AttentionOperands<T> attention_operands(const Array<T>& q, const Array<T>& k, const Array<T>& v, T factor,
                                        bool scaled);

/// @brief Where the attention backward adds its gradients (each += into a zeroed or
/// partly summed buffer; null: not wanted). dq (batch, n, dk), dk (k_batches, m, dk),
/// dv (v_batches, m, dv); ds_raw, da and chain (batch, n, m), written only when traced:
/// chain[i] is the gradient of the output of op.chain[i] (empty: none wanted); slopes[i] is
/// an Alibi link's slopes' (heads).
template <class T>
struct AttentionGrads {
    T* dq = nullptr;
    T* dk = nullptr;
    T* dv = nullptr;
    T* ds_raw = nullptr;
    T* da = nullptr;
    /// A's gradient from outside the step (A, or a view of it, is a graph output and this is
    /// its seed): added to dO·Vᵀ, as the plain backward starts A's gradient from the seed.
    /// Not with the Differential Transformer.
    const T* a_seed = nullptr;
    /// a_seed is one row (m values) that is every row's seed: the ones an output given no
    /// gradient starts from.
    bool a_seed_one_row = false;
    std::vector<T*> chain;
    std::vector<T*> slopes;
    /// With sinks: the sink operand's gradient (+= each row's dS_sink = a_sink·(0 − rowsum),
    /// summed per batch in double and added in batch order); traced, A_sinks' and S_sinks'
    /// (batch, n, m + 1), S_sink's and S_zero's (batch, n, 1: dS_sink) and S_first's (0·dS_sink).
    T* sink = nullptr;
    T* a_sinks = nullptr;
    T* s_sinks = nullptr;
    T* s_sink = nullptr;
    T* s_zero = nullptr;
    T* s_first = nullptr;
    /// With the Differential Transformer: lambda's gradient (+= Σ dA_2_weighted ⊙ A_{2b+1} over
    /// O's matrix b, summed per matrix in double and added in matrix order); traced, (O's
    /// matrices, n, m): A_diff's (dO·Vᵀ), A_split:0's (the same), A_2_weighted's (−dA_diff) and
    /// A_split:1's (−dA_diff·lambda). `da` is then A's, Q's matrices: the two maps' in turn.
    T* lambda = nullptr;
    T* a_diff = nullptr;
    T* a_first = nullptr;
    T* a_second = nullptr;
    T* a_weighted = nullptr;
};

/// @brief The backward of O = softmax(chain(Q·Kᵀ))·V (or, with op.lambda_of, of the Differential
/// Transformer's O = (A_1 − A_2·lambda)·V), FlashAttention-2 style: per step of query
/// rows (a few of the forward's blocks, as many as a fixed budget of n×m values allows), on
/// the keys [lo, hi) that op.keys gives the step's rows, A from `a` (the forward's kept
/// weights) or, when `a` is null, recomputed with op.weights block by block; then
/// dV += Aᵀ·dO, dA = dO·Vᵀ, dS = A ⊙ (dA − rowsum(dA ⊙ A)) (a sink column: a_sink·(0 − rowsum)),
/// dS_raw = c_1·(...·(c_k · dS))
/// over the chain's Scales (a Tanh's 1 − y² among them, the Alibi slopes' and the Adds' biases'
/// gradients on the way), dQ += dS_raw·K,
/// dK += dS_rawᵀ·Q. Keys outside [lo, hi) have
/// A = 0 and so contribute nothing (as long as dA is finite there), and the row sums give
/// the whole row's bits (softmax_backward_dot). With the Differential Transformer both maps'
/// A are recomputed over the union of their keys (every key for a lambda that is not
/// finite, as the forward), dV += A_diffᵀ·dO, and each map goes on from its own dA:
/// dA_diff for A_1, −dA_diff·lambda for A_2. The steps of a batch add into dK and dV in
/// step order; a K or V shared by several query heads gets each head's sum in its own
/// buffer, added in head order: bit-identical for any thread count.
///
/// Not finite: a step whose A has a NaN row (a NaN score or sink, inf − inf), whose rows of
/// Q, of dO or of A's seed hold an inf or a NaN, or whose K or V does, takes every key
/// [0, m), as the plain nodes: their products of the 0 of the removed keys (weights, dS_raw)
/// with those values give NaN (in dV, dQ and dK, in dA's row sums and so in dS), and the
/// row sums then see them; dS is 0 at each row's removed keys after a Mask, as the Mask op's
/// backward gives it (op.row_keys: the span of a row, so not a boolean mask tensor's holes
/// inside it). A NaN row of A is NaN on every key there (the Softmax op's). Not with the
/// Differential Transformer.
template <class T>
void attention_backward(const AttentionOperands<T>& op, const T* a, const T* d_o, const AttentionGrads<T>& grads);

}  // namespace attngraph
