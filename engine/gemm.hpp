#pragma once
// The engine's one GEMM path: row-major C = alpha·op(A)·op(B) + beta·C over OpenBLAS,
// single-threaded inside, cut into fixed blocks of rows and columns that oneTBB runs in
// parallel (one thread pool for everything; results independent of the thread count).
// A block of at most 1024 multiply-adds is a plain loop instead of an OpenBLAS call (the
// call costs more than such a product); an f32 block op(A)·B (alpha 1, beta 0 or 1) runs on
// the attention step's SIMD kernels (engine/attention_gemm.hpp), which read A and B in place
// where OpenBLAS packs them for every call.
//
// OpenBLAS picks its kernel from the CPU model when it loads, and falls back to Prescott
// (SSE3) kernels on a model it does not know. Before the first GEMM the engine checks the
// CPU's instruction sets and, when OpenBLAS picked a kernel for older instructions than the
// CPU has and OPENBLAS_CORETYPE is unset, switches OpenBLAS to the kernel for them.
#include <cstddef>
#include <string>
#include <vector>

namespace attngraph {

/// @brief C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C. Row-major; lda/ldb/ldc are
/// row strides of A, B, C as stored (A is k x m when trans_a).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

/// Rows per block of the parallel GEMM (a constant: never derived from the thread count).
constexpr std::size_t gemm_row_block = 128;
/// Columns per block of the parallel GEMM (a constant too): C is cut into blocks of
/// gemm_row_block x gemm_col_block, so a GEMM of few rows still gives every core work, and
/// evenly: at n = 128 the output projection's 768 columns are six blocks (with 256 they were
/// three, two on one core and one on the other; docs/performance.md, "Column blocks of 128").
constexpr std::size_t gemm_col_block = 128;

/// The instruction set of the SIMD kernels f32 GEMM blocks op(A)·B run on ("avx512", "avx2");
/// empty when every block runs on OpenBLAS (a CPU without AVX2 + FMA, a non-x86 build, or
/// after gemm_blocks_on_blas(true)).
std::string gemm_block_kernels();

/// @brief true: every GEMM block runs on OpenBLAS, none on the SIMD kernels (`bench --blas
/// CORE` times an OpenBLAS kernel by name). For `bench` and tests: no GEMM may run meanwhile.
void gemm_blocks_on_blas(bool on);

/// The BLAS kernel GEMMs run on and why.
struct BlasKernel {
    std::string name;       ///< OpenBLAS's core name, e.g. "SkylakeX"
    std::string chosen_by;  ///< "OpenBLAS", "OPENBLAS_CORETYPE", "request" or "cpu features (OpenBLAS picked X)"
};

/// The kernel in use (selects it first if no GEMM ran yet).
BlasKernel blas_kernel();

/// The kernels the selection can run on this CPU: OpenBLAS's own pick, and the kernel for
/// the CPU's instruction sets (what runs when OpenBLAS does not know the CPU's model).
/// Just the kernel in use when OPENBLAS_CORETYPE is set or OpenBLAS cannot switch.
std::vector<std::string> blas_selectable_kernels();

/// @brief Switches OpenBLAS to the named core (an OPENBLAS_CORETYPE name). For tests and
/// `bench`: no GEMM may run meanwhile. Returns false when this OpenBLAS cannot switch
/// (not a DYNAMIC_ARCH build, or it does not know the name).
bool blas_use_kernel(const std::string& name);

/// Applies the selection again from the kernel now in use (what happens at start-up; `bench
/// --as-unknown-cpu` calls it after switching to Prescott, the fallback for an unknown CPU).
void blas_select_kernel();

}  // namespace attngraph
