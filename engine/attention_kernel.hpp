#pragma once
// The fused attention step's backward (engine/attention_backward.cpp) for O = softmax(c·Q·Kᵀ)·V,
// by the forward's blocks of gemm_row_block query rows. The backward plan recomputes a
// block's weights with the forward's own kernel (engine/fused_attention.hpp), so they have
// the forward's bits.
//
// Legend: Q is (batch..., n, dk); K is (kbatch..., m, dk) and V (vbatch..., m, dv), their
// batch axes broadcasting to Q's (K and V shared across query heads: MQA, GQA); O and dO
// are (batch..., n, dv); S_raw, S, A and their gradients are (batch..., n, m).
#include <cstddef>
#include <functional>
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
    /// A of the forward's block of query rows [r0, r0 + rows) of batch b into `a` (rows, m):
    /// the backward's recomputation. The backward plan sets it to the forward's own kernel
    /// (AttentionKernel::weights, engine/fused_attention.hpp), which gives the forward's bits
    /// and is where a mask or a bias would come in; attention_operands() sets softmax(c·Q·Kᵀ)
    /// by the engine's GEMM and softmax kernel.
    std::function<void(std::size_t b, std::size_t r0, std::size_t rows, T* a)> weights;
};

/// @brief The operands of q, k, v (shapes as in the legend; not checked here).
template <class T>
AttentionOperands<T> attention_operands(const Array<T>& q, const Array<T>& k, const Array<T>& v, T factor,
                                        bool scaled);

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

/// @brief The backward of O = softmax(c · Q·Kᵀ)·V, FlashAttention-2 style: per step of query
/// rows (a few of the forward's blocks, as many as a fixed budget of n×m values allows), A from
/// `a` (the forward's kept weights) or, when `a` is null, recomputed with op.weights block by
/// block; then dV += Aᵀ·dO, dA = dO·Vᵀ, dS = A ⊙ (dA − rowsum(dA ⊙ A)),
/// dS_raw = c · dS, dQ += dS_raw·K, dK += dS_rawᵀ·Q. The steps of a batch add into
/// dK and dV in step order; a K or V shared by several query heads gets each head's sum in
/// its own buffer, added in head order: bit-identical for any thread count.
template <class T>
void attention_backward(const AttentionOperands<T>& op, const T* a, const T* d_o, const AttentionGrads<T>& grads);

}  // namespace attngraph
