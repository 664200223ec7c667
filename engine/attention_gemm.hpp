#pragma once
// The fused attention step's two products in f32 (engine/fused_attention.cpp), S = Q·Kᵀ and
// O = A·V, by register-tiled SIMD kernels instead of OpenBLAS calls. OpenBLAS packs both
// operands of every call: the step calls it once per block of query rows and head, so it
// packed K and the block's whole score matrix again each time, and zeroed each score block
// before its product. Here K is packed once per matrix (panels of 32 keys, each dk × 32),
// and A and V are read where they are: V's rows are loaded as vectors and each weight is
// broadcast.
//
// Each element is one fused multiply-add chain in order, from the first term: S[r][j] over
// d = 0, 1, ..., dk − 1 and O[r][c] over the keys in order. Its bits depend on its operands
// only (not on the tile it falls in, the block, the key span asked for or the thread count):
// a plain loop of std::fma gives the same bits.
//
// The value kernel with strides (`product`) also takes the engine's f32 GEMM blocks A·B
// (engine/gemm.cpp): projections, MatMul and Linear nodes; the score kernel the attention
// backward's dA = dO·Vᵀ (engine/attention_backward.cpp: V packed as keys).
//
// Built for AVX-512 (attention_gemm_avx512.cpp) and AVX2 + FMA (attention_gemm_avx2.cpp);
// a CPU with neither (and a non-x86 build) takes OpenBLAS, as f64 does.
#include <cstddef>
#include <vector>

namespace attngraph::attention_gemm {

/// Keys per panel of a packed K.
constexpr std::size_t panel = 32;

/// One instruction set's kernels.
struct Kernels {
    const char* isa;          ///< "avx512" or "avx2"
    std::size_t value_width;  ///< dv must be a multiple of this (the vector's lanes)
    /// @brief S[r·lds + (j − from)] = Σ_d q[r·dk + d]·K[j][d] for the `rows` rows of q and the
    /// keys j in [from, to), K packed by pack_keys.
    void (*scores)(const float* q, std::size_t rows, std::size_t dk, const float* packed, std::size_t from,
                   std::size_t to, float* s, std::size_t lds);
    /// @brief o[r·dv + c] = Σ_j a[r·lda + j]·v[j·dv + c] for the `rows` rows of a and the keys j
    /// in [0, keys) (dv a multiple of value_width).
    void (*weighted_sum)(const float* a, std::size_t lda, std::size_t rows, const float* v, std::size_t keys,
                         std::size_t dv, float* o);
    /// @brief weighted_sum with strides, A as stored or transposed, and C accumulated or not:
    /// c[r·ldc + j] (+)= Σ_i a[r·ar + i·ac]·b[i·ldb + j] for the `rows` rows, i in [0, k) and
    /// j in [0, n) (n a multiple of value_width). A's strides are (lda, 1) as stored, (1, lda)
    /// transposed; with `accumulate` each element's chain starts from c's value (beta = 1),
    /// else from 0. The engine's f32 GEMM runs its blocks op(A)·B on it (engine/gemm.cpp).
    void (*product)(const float* a, std::size_t ar, std::size_t ac, std::size_t rows, const float* b, std::size_t ldb,
                    std::size_t k, std::size_t n, float* c, std::size_t ldc, bool accumulate);
};

/// The kernels for this CPU: AVX-512 where it has it, else AVX2 + FMA; null: neither.
const Kernels* kernels();

/// Every set of kernels this CPU can run (the tests check each).
std::vector<const Kernels*> runnable();

/// Elements of K (m × dk) packed: ⌈m / panel⌉ panels of dk × panel.
inline std::size_t packed_size(std::size_t m, std::size_t dk) {
    return (m + panel - 1) / panel * panel * dk;
}

/// @brief K (m × dk, row-major) into `out` (packed_size elements): panel p holds keys
/// [p·panel, (p + 1)·panel), key j's element d at out[(p·dk + d)·panel + j − p·panel]; keys past
/// m are 0.
void pack_keys(const float* k, std::size_t m, std::size_t dk, float* out);

}  // namespace attngraph::attention_gemm
