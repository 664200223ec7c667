#pragma once
// The fused attention step's kernels: O = softmax(c · Q·Kᵀ)·V by blocks of gemm_row_block
// query rows, forward (engine/optimize.cpp) and backward (engine/attention_backward.cpp).
// Both compute a block's scores and weights with attention_weights_block, so the backward's
// recomputed A has the forward's bits.
//
// Legend: Q is (batch..., n, dk); K is (kbatch..., m, dk) and V (vbatch..., m, dv), their
// batch axes broadcasting to Q's (K and V shared across query heads: MQA, GQA); O and dO
// are (batch..., n, dv); S_raw, S, A and their gradients are (batch..., n, m).
#include <cstddef>
#include <vector>

#include "engine/graph.hpp"

namespace attngraph {

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
    T factor = T(1);                           ///< the folded Scale factor c
    bool scaled = false;                       ///< whether c applies
};

/// @brief The operands of q, k, v (shapes as in the legend; not checked here).
template <class T>
AttentionOperands<T> attention_operands(const Array<T>& q, const Array<T>& k, const Array<T>& v, T factor,
                                        bool scaled);

/// @brief Scores and weights of query rows [r0, r0 + rows) of batch b, each (rows, m):
/// s_raw = Q_blk·Kᵀ, then, when s is not null, s = c · s_raw (the Scale op's arithmetic),
/// then a = softmax(S). a may be s_raw (computed in place). The forward's own block: a
/// backward that calls it gets the forward's A bit for bit.
template <class T>
void attention_weights_block(const AttentionOperands<T>& op, std::size_t b, std::size_t r0, std::size_t rows, T* s_raw,
                             T* s, T* a);

/// @brief Where the attention backward adds its gradients (each += into a zeroed or
/// partly summed buffer; null: not wanted). dq (batch, n, dk), dk (k_batches, m, dk),
/// dv (v_batches, m, dv); ds_raw, ds, da (batch, n, m), written only when traced.
template <class T>
struct AttentionGrads {
    T* dq = nullptr;
    T* dk = nullptr;
    T* dv = nullptr;
    T* ds_raw = nullptr;
    T* ds = nullptr;
    T* da = nullptr;
};

/// @brief The backward of O = softmax(c · Q·Kᵀ)·V, FlashAttention-2 style: per query block,
/// A from `a` (the forward's kept weights) or, when `a` is null, recomputed with
/// attention_weights_block; then dV += Aᵀ·dO, dA = dO·Vᵀ, dS = A ⊙ (dA − rowsum(dA ⊙ A)),
/// dS_raw = c · dS, dQ += dS_raw·K, dK += dS_rawᵀ·Q. The query blocks of a batch add into
/// dK and dV in block order; a K or V shared by several query heads gets each head's sum in
/// its own buffer, added in head order: bit-identical for any thread count.
template <class T>
void attention_backward(const AttentionOperands<T>& op, const T* a, const T* d_o, const AttentionGrads<T>& grads);

}  // namespace attngraph
