// engine/gemm.hpp against a plain-loop reference, on every BLAS kernel the engine's kernel
// selection can run on this machine, for both transposes, sizes across the row and column
// block edges, and alpha/beta; and bit-identical results for 1 and 2 threads.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include <tbb/task_arena.h>

#include "engine/gemm.hpp"

BOOST_AUTO_TEST_SUITE(test_gemm)

using namespace attngraph;
using Types = boost::mpl::list<float, double>;

namespace {

template <class T>
std::vector<T> random_values(std::size_t count, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    std::vector<T> v(count);
    for (T& x : v) x = static_cast<T>(dist(gen));
    return v;
}

// op(A)·op(B) in long double, one element at a time (m x n, row-major).
template <class T>
std::vector<long double> reference_product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                                           const std::vector<T>& a, std::size_t lda, const std::vector<T>& b,
                                           std::size_t ldb) {
    std::vector<long double> ab(m * n);
    const T *ad = a.data(), *bd = b.data();  // (no call per element at the tests' -O0)
    for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            long double sum = 0;
            for (std::size_t p = 0; p < k; ++p) {
                const long double av = ta ? ad[p * lda + i] : ad[i * lda + p];
                const long double bv = tb ? bd[j * ldb + p] : bd[p * ldb + j];
                sum += av * bv;
            }
            ab[i * n + j] = sum;
        }
    return ab;
}

// C = alpha·AB + beta·C, AB from reference_product.
template <class T>
std::vector<T> reference(const std::vector<long double>& ab, std::size_t m, std::size_t n, T alpha, T beta,
                         std::vector<T> c, std::size_t ldc) {
    for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j)
            c[i * ldc + j] = static_cast<T>(alpha * ab[i * n + j] + beta * static_cast<long double>(c[i * ldc + j]));
    return c;
}

struct Case {
    std::size_t m, n, k;
};

// Row and column block edges (128 rows, 128 columns), one-element and empty sums, blocks
// of at most 1024 multiply-adds (the plain loop: 3x5x7, 32x32x1 at the limit, 2x300x1 over three
// column blocks), and f32 A·B blocks on the SIMD kernels (columns a multiple of 16: 129x272x300
// over six blocks, one row of 64 as decoding makes it; 200x600x300's last block of 88
// columns is OpenBLAS's).
const Case cases[] = {{1, 1, 1},      {3, 5, 7},       {129, 129, 33}, {128, 128, 64}, {129, 257, 33},
                      {128, 256, 64}, {200, 600, 300}, {17, 513, 5},   {4, 3, 0},      {32, 32, 1},
                      {2, 300, 1},    {129, 272, 300}, {1, 64, 768}};

// One product to check: its operands, and the reference result computed once for every kernel.
template <class T>
struct Problem {
    Case c;
    bool ta, tb;
    std::size_t lda, ldb, ldc;
    T alpha, beta;
    std::vector<T> a, b, c0, want;
};

template <class T>
std::vector<Problem<T>> problems() {
    std::vector<Problem<T>> all;
    unsigned seed = 1;
    for (const Case& c : cases)
        for (int t = 0; t < 4; ++t) {
            const bool ta = t & 1, tb = t & 2;
            const std::size_t lda = (ta ? c.m : c.k) + 3, ldb = (tb ? c.k : c.n) + 1, ldc = c.n + 2;
            const auto a = random_values<T>((ta ? c.k : c.m) * lda, seed++);
            const auto b = random_values<T>((tb ? c.n : c.k) * ldb, seed++);
            const auto c0 = random_values<T>(c.m * ldc, seed++);
            const auto ab = reference_product<T>(ta, tb, c.m, c.n, c.k, a, lda, b, ldb);
            // alpha 1, beta 0 or 1: an f32 op(A)·B block runs on the SIMD kernels where the CPU has them
            for (const auto& [alpha, beta] :
                 {std::pair{T(1.25), T(0)}, std::pair{T(1.25), T(0.5)}, std::pair{T(1), T(0)}, std::pair{T(1), T(1)}}) {
                auto want = reference<T>(ab, c.m, c.n, alpha, beta, c0, ldc);
                all.push_back({c, ta, tb, lda, ldb, ldc, alpha, beta, a, b, c0, std::move(want)});
            }
        }
    return all;
}

template <class T>
void check_every_case(const std::string& kernel, const std::vector<Problem<T>>& all) {
    const T tolerance = std::is_same_v<T, float> ? T(2e-5) : T(1e-12);
    for (const Problem<T>& p : all) {
        const Case& c = p.c;
        std::vector<T> got2 = p.c0, got1 = p.c0;
        tbb::task_arena(2).execute([&] {
            gemm<T>(p.ta, p.tb, c.m, c.n, c.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, got2.data(),
                    p.ldc);
        });
        tbb::task_arena(1).execute([&] {
            gemm<T>(p.ta, p.tb, c.m, c.n, c.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, got1.data(),
                    p.ldc);
        });
        std::size_t bad = 0, differ = 0;
        const T *want = p.want.data(), *two = got2.data(), *one = got1.data();
        for (std::size_t i = 0; i < c.m; ++i)
            for (std::size_t j = 0; j < c.n; ++j) {
                const std::size_t at = i * p.ldc + j;
                const T scale = std::max<T>(T(1), std::fabs(want[at]));
                if (!(std::fabs(two[at] - want[at]) <= tolerance * scale * T(1 + c.k / 64))) ++bad;
                if (one[at] != two[at]) ++differ;
            }
        BOOST_TEST(bad == 0u, kernel << ": " << c.m << "x" << c.n << "x" << c.k << " ta=" << p.ta << " tb=" << p.tb
                                     << " beta=" << p.beta << ": " << bad << " elements off");
        BOOST_TEST(differ == 0u, kernel << ": 1 and 2 threads differ in " << differ << " elements");
        // the padding between rows of C is never written
        for (std::size_t i = 0; i < c.m; ++i)
            for (std::size_t j = c.n; j < p.ldc; ++j) BOOST_TEST(got2[i * p.ldc + j] == p.c0[i * p.ldc + j]);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_engine)

BOOST_AUTO_TEST_CASE(by_hand) {
    // [[1,2],[3,4]]·[[5,6],[7,8]] = [[19,22],[43,50]]; alpha 2, beta 1 on C = [[1,1],[1,1]]
    const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
    float c[] = {1, 1, 1, 1};
    gemm<float>(false, false, 2, 2, 2, 2.0f, a, 2, b, 2, 1.0f, c, 2);
    BOOST_TEST(c[0] == 39.0f);
    BOOST_TEST(c[1] == 45.0f);
    BOOST_TEST(c[2] == 87.0f);
    BOOST_TEST(c[3] == 101.0f);
}

BOOST_AUTO_TEST_CASE(the_selected_kernel_is_reported) {
    const BlasKernel k = blas_kernel();
    BOOST_TEST(!k.name.empty());
    const auto kernels = blas_selectable_kernels();
    BOOST_TEST_REQUIRE(!kernels.empty());
    BOOST_TEST((std::find(kernels.begin(), kernels.end(), k.name) != kernels.end()));
    BOOST_TEST_MESSAGE("BLAS kernel: " << k.name << " (" << k.chosen_by << ")");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_selectable_kernel_against_plain_loops, T, Types) {
    const BlasKernel selected = blas_kernel();
    const auto all = problems<T>();
    for (const std::string& kernel : blas_selectable_kernels()) {
        if (kernel != blas_kernel().name) BOOST_TEST_REQUIRE(blas_use_kernel(kernel), kernel);
        BOOST_TEST_MESSAGE("kernel " << kernel);
        check_every_case<T>(kernel, all);
        gemm_blocks_on_blas(true);  // the f32 A·B blocks on this OpenBLAS kernel too
        check_every_case<T>(kernel + " alone", all);
        gemm_blocks_on_blas(false);
    }
    if (blas_kernel().name != selected.name) BOOST_TEST_REQUIRE(blas_use_kernel(selected.name));
}

// An f32 op(A)·B block on the SIMD kernels: each element one std::fma chain over k in order,
// from 0 (beta 0) or from C's value (beta 1), the same bits whichever block it falls in (here
// four blocks of rows and columns, and k past the kernels' chunks of 256).
BOOST_AUTO_TEST_CASE(f32_products_on_the_simd_kernels_are_fma_chains) {
    if (gemm_block_kernels().empty()) {
        BOOST_TEST_MESSAGE("no SIMD kernels on this CPU: every block is OpenBLAS's");
#if defined(__x86_64__)
        BOOST_TEST(!__builtin_cpu_supports("avx2"));  // every x86-64 CPU with AVX2 + FMA has them
#endif
        return;
    }
    const std::size_t m = 130, n = 272, k = 700, ldb = n + 16, ldc = n + 3;
    for (const bool ta : {false, true})
        for (const float beta : {0.0f, 1.0f}) {
            const std::size_t lda = ta ? m + 2 : k + 1;
            const auto a = random_values<float>((ta ? k : m) * lda, 7), b = random_values<float>(k * ldb, 8);
            const auto c0 = random_values<float>(m * ldc, 9);
            std::vector<float> c = c0;
            gemm<float>(ta, false, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < m; ++i) {
                for (std::size_t j = 0; j < n; ++j) {
                    float want = beta == 0.0f ? 0.0f : c0[i * ldc + j];
                    for (std::size_t p = 0; p < k; ++p)
                        want = std::fma(ta ? a[p * lda + i] : a[i * lda + p], b[p * ldb + j], want);
                    wrong += c[i * ldc + j] != want;
                }
                for (std::size_t j = n; j < ldc; ++j) BOOST_TEST(c[i * ldc + j] == c0[i * ldc + j]);
            }
            BOOST_TEST(wrong == 0u, gemm_block_kernels() << " ta=" << ta << " beta=" << beta << ": " << wrong
                                                         << " elements differ from the fma chain");
        }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_gemm
