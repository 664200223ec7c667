#pragma once
// The engine's one GEMM path: row-major C = alpha·op(A)·op(B) + beta·C over OpenBLAS,
// single-threaded inside, cut into fixed row blocks that oneTBB runs in parallel (one
// thread pool for everything; results independent of the thread count).
#include <cstddef>

namespace attngraph {

/// @brief C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C. Row-major; lda/ldb/ldc are
/// row strides of A, B, C as stored (A is k x m when trans_a).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

/// Rows per block of the parallel GEMM (a constant: never derived from the thread count).
constexpr std::size_t gemm_row_block = 128;

}  // namespace attngraph
