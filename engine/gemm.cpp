#include "engine/gemm.hpp"

#include <mutex>

#include <cblas.h>

#include "engine/parallel.hpp"

namespace attngraph {

namespace {

// OpenBLAS must not start threads of its own: oneTBB owns every thread.
void single_threaded_blas() {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
               int ldb, double beta, double* c, int ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    single_threaded_blas();
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
        return;
    }
    parallel_chunks(m, gemm_row_block, [&](std::size_t r0, std::size_t r1) {
        // rows r0..r1 of op(A): A + r0*lda normally, column offset r0 when transposed
        const T* a_block = trans_a ? a + r0 : a + r0 * lda;
        blas_gemm(trans_a, trans_b, static_cast<int>(r1 - r0), static_cast<int>(n), static_cast<int>(k), alpha,
                  a_block, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c + r0 * ldc,
                  static_cast<int>(ldc));
    });
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                           const double*, std::size_t, double, double*, std::size_t);

}  // namespace attngraph
