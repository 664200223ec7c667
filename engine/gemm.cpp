#include "engine/gemm.hpp"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include <cblas.h>

#include "engine/attention_gemm.hpp"
#include "engine/parallel.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace attngraph {

namespace {

// ---- kernel selection ---------------------------------------------------------------
// OpenBLAS 0.3.21's DYNAMIC_ARCH build chooses its kernel table in its constructor, from
// the CPU model (not its feature bits), and reads OPENBLAS_CORETYPE there to override it.
// gotoblas_dynamic_quit()/gotoblas_dynamic_init() (exported by that build) redo the choice
// later; they are looked up at run time so that any other OpenBLAS build still links.

// Instruction-set level of an OpenBLAS core: 0 SSE, 1 AVX, 2 AVX2+FMA, 3 AVX-512.
int core_level(const std::string& core) {
    struct Entry {
        const char* name;
        int level;
    };
    static const Entry table[] = {{"Sandybridge", 1}, {"Bulldozer", 1},     {"Piledriver", 1}, {"Steamroller", 1},
                                  {"Haswell", 2},     {"Zen", 2},           {"Excavator", 2},  {"SkylakeX", 3},
                                  {"Cooperlake", 3},  {"SapphireRapids", 3}};
    for (const Entry& e : table)
        if (strcasecmp(core.c_str(), e.name) == 0) return e.level;
    return 0;
}

// The best level this CPU and its operating system support (cpuid and XCR0).
int cpu_level() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const bool avx = (c & bit_AVX) && (c & bit_OSXSAVE);
    const bool fma = c & bit_FMA;
    if (!avx) return 0;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6) != 0x6) return 0;  // the OS saves XMM and YMM state
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 1;
    const bool avx2 = b & bit_AVX2;
    const bool avx512 = (b & bit_AVX512F) && (b & bit_AVX512CD) && (b & bit_AVX512BW) && (b & bit_AVX512DQ) &&
                        (b & bit_AVX512VL) && (xcr0_lo & 0xe0) == 0xe0;  // and opmask/ZMM state
    if (avx512 && fma) return 3;
    if (avx2 && fma) return 2;
    return 1;
#else
    return 0;
#endif
}

// The OpenBLAS core for a level (OpenBLAS 0.3.21 cannot be forced to Cooperlake; its
// sgemm/dgemm kernels are SkylakeX's).
const char* core_for_level(int level) {
    switch (level) {
        case 3:
            return "SkylakeX";
        case 2:
            return "Haswell";
        case 1:
            return "Sandybridge";
        default:
            return nullptr;
    }
}

std::string current_core() {
    const char* name = openblas_get_corename();
    return name ? name : "unknown";
}

struct Selection {
    std::mutex mutex;
    BlasKernel kernel;
    std::vector<std::string> selectable;
};

Selection& selection() {
    static Selection s;
    return s;
}

bool switch_core(const std::string& name) {
    using Fn = void (*)();
    const auto quit = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
    const auto init = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
    if (!quit || !init) return false;
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = user ? user : "";
    setenv("OPENBLAS_CORETYPE", name.c_str(), 1);
    quit();
    init();
    if (user)
        setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    return strcasecmp(current_core().c_str(), name.c_str()) == 0;
}

void select_locked(Selection& s) {
    const std::string picked = current_core();
    s.kernel = {picked, "OpenBLAS"};
    s.selectable = {picked};
    if (std::getenv("OPENBLAS_CORETYPE")) {
        s.kernel.chosen_by = "OPENBLAS_CORETYPE";
        return;
    }
    const int level = cpu_level();
    const char* better = core_for_level(level);
    if (!better) return;
    // the kernel the selection runs on this CPU when OpenBLAS does not know its model
    if (strcasecmp(better, picked.c_str()) != 0 && dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"))
        s.selectable.push_back(better);
    if (core_level(picked) >= level) return;
    if (switch_core(better))
        s.kernel = {current_core(), "cpu features (OpenBLAS picked " + picked + ")"};
    else
        switch_core(picked);  // stay on OpenBLAS's own choice
}

// Selects the kernel and keeps OpenBLAS from starting threads of its own: oneTBB owns
// every thread. Once per process (a function-local static: after the first call, one load
// and a branch; std::call_once sets two thread-locals on every call).
void prepare_blas() {
    static const bool prepared = [] {
        Selection& s = selection();
        std::lock_guard<std::mutex> lock(s.mutex);
        select_locked(s);
        openblas_set_num_threads(1);
        return true;
    }();
    (void)prepared;
}

// At load time, while only the main thread runs (setenv is not safe beside other threads).
[[maybe_unused]] const bool prepared_at_load = (prepare_blas(), true);

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
}

// A block of at most this many multiply-adds (rows x cols x k) is computed by a plain loop:
// OpenBLAS spends more on a call (argument checks, locking its buffers, packing) than on
// such a product (the seed graph's GEMMs are 18 to 48 multiply-adds).
constexpr std::size_t small_gemm_limit = 1024;

// C = alpha·op(A)·op(B) + beta·C, each element's sum over k in order: its bits depend on the
// block's sizes and data only, as OpenBLAS's do. The transposes are template parameters, and
// so is k when it is at most 8 (K; 0: k as given): the operands' strides are known, and a
// short sum is unrolled. At the seed's sizes (k of 2 to 4) a loop over k spends most of its
// instructions on its own control.
template <bool TA, bool TB, std::size_t K, class T>
void small_gemm(std::size_t m, std::size_t n, std::size_t k_given, T alpha, const T* a, std::size_t lda, const T* b,
                std::size_t ldb, T beta, T* c, std::size_t ldc) {
    const std::size_t k = K ? K : k_given;
    const std::size_t a_row = TA ? 1 : lda, a_col = TA ? lda : 1, b_row = TB ? 1 : ldb, b_col = TB ? ldb : 1;
    for (std::size_t i = 0; i < m; ++i, a += a_row, c += ldc)
        for (std::size_t j = 0; j < n; ++j) {
            const T* bj = b + j * b_col;
            T sum = 0;
            for (std::size_t p = 0; p < k; ++p) sum += a[p * a_col] * bj[p * b_row];
            c[j] = beta == T(0) ? alpha * sum : alpha * sum + beta * c[j];
        }
}

template <bool TA, bool TB, class T>
void small_gemm(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
                std::size_t ldb, T beta, T* c, std::size_t ldc) {
    const auto with_k = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        small_gemm<TA, TB, K>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    };
    switch (k) {
        case 1: return with_k(std::integral_constant<std::size_t, 1>{});
        case 2: return with_k(std::integral_constant<std::size_t, 2>{});
        case 3: return with_k(std::integral_constant<std::size_t, 3>{});
        case 4: return with_k(std::integral_constant<std::size_t, 4>{});
        case 5: return with_k(std::integral_constant<std::size_t, 5>{});
        case 6: return with_k(std::integral_constant<std::size_t, 6>{});
        case 7: return with_k(std::integral_constant<std::size_t, 7>{});
        case 8: return with_k(std::integral_constant<std::size_t, 8>{});
        default: return with_k(std::integral_constant<std::size_t, 0>{});
    }
}

template <class T>
void small_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    if (ta)
        tb ? small_gemm<true, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
           : small_gemm<true, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        tb ? small_gemm<false, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
           : small_gemm<false, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

BlasKernel blas_kernel() {
    prepare_blas();
    Selection& s = selection();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.kernel;
}

std::vector<std::string> blas_selectable_kernels() {
    prepare_blas();
    Selection& s = selection();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.selectable;
}

bool blas_use_kernel(const std::string& name) {
    prepare_blas();
    Selection& s = selection();
    std::lock_guard<std::mutex> lock(s.mutex);
    const bool ok = switch_core(name);
    s.kernel = {current_core(), ok ? "request" : s.kernel.chosen_by};
    return ok;
}

void blas_select_kernel() {
    prepare_blas();
    Selection& s = selection();
    std::lock_guard<std::mutex> lock(s.mutex);
    select_locked(s);
}

// ---- the parallel GEMM ----------------------------------------------------------------

namespace {

// f32 blocks C = op(A)·B and C += op(A)·B (B not transposed, alpha 1, beta 0 or 1, columns a
// multiple of the vector width: the projections, and the backward's dW = Xᵀ·dY, dV = Aᵀ·dO,
// dK = dSᵀ·Q) run on the register-tile kernels of the attention step
// (engine/attention_gemm.hpp), not OpenBLAS: they read A and B in place where OpenBLAS packs
// both for every call; with beta 1 each element's chain starts from C's value. On a Zen 5
// against OpenBLAS's Cooperlake kernel, one thread (bench/bench_attention_gemm.cpp): a head's projection
// (128 x 64 x 768) 1.25x as fast, a whole block (128 x 256 x 768) 1.1x, a block of 32 rows
// 1.4x, one row (decoding) level. The choice depends on the block's shape only, never on
// the thread count; each element is one multiply-add chain in order, as on OpenBLAS.
std::atomic<bool> blocks_on_blas{false};

const attention_gemm::Kernels* block_kernels(bool trans_b, float alpha, float beta) {
    const attention_gemm::Kernels* k = attention_gemm::kernels();
    return k && !trans_b && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && !blocks_on_blas.load() ? k : nullptr;
}
const attention_gemm::Kernels* block_kernels(bool, double, double) {
    return nullptr;
}

}  // namespace

std::string gemm_block_kernels() {
    const attention_gemm::Kernels* k = block_kernels(false, 1.0f, 0.0f);
    return k ? k->isa : "";
}

void gemm_blocks_on_blas(bool on) {
    blocks_on_blas = on;
}

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    prepare_blas();
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
        return;
    }
    // Blocks of C in row-major block order; each is one BLAS call over the whole of k, so
    // every element's sum runs in the same order whatever the thread count.
    const std::size_t row_blocks = (m + gemm_row_block - 1) / gemm_row_block;
    const std::size_t col_blocks = (n + gemm_col_block - 1) / gemm_col_block;
    if (row_blocks * col_blocks == 1 && m * n * k <= small_gemm_limit) {  // a tiny graph's: no task at all
        small_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    const attention_gemm::Kernels* kernels = block_kernels(trans_b, alpha, beta);
    parallel_chunks(row_blocks * col_blocks, 1, [&](std::size_t b0, std::size_t b1) {
        for (std::size_t blk = b0; blk < b1; ++blk) {
            const std::size_t r0 = (blk / col_blocks) * gemm_row_block, c0 = (blk % col_blocks) * gemm_col_block;
            const std::size_t rows = std::min(gemm_row_block, m - r0), cols = std::min(gemm_col_block, n - c0);
            // rows r0.. of op(A): A + r0*lda normally, column offset r0 when transposed;
            // columns c0.. of op(B): B + c0 normally, row offset c0 when transposed
            const T* a_block = trans_a ? a + r0 : a + r0 * lda;
            const T* b_block = trans_b ? b + c0 * ldb : b + c0;
            if (rows * cols * k <= small_gemm_limit) {
                small_gemm(trans_a, trans_b, rows, cols, k, alpha, a_block, lda, b_block, ldb, beta, c + r0 * ldc + c0,
                           ldc);
                continue;
            }
            if constexpr (std::is_same_v<T, float>) {
                if (kernels && cols % kernels->value_width == 0) {
                    kernels->product(a_block, trans_a ? 1 : lda, trans_a ? lda : 1, rows, b_block, ldb, k, cols,
                                     c + r0 * ldc + c0, ldc, beta == 1.0f);
                    continue;
                }
            }
            blas_gemm(trans_a, trans_b, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), alpha,
                      a_block, static_cast<int>(lda), b_block, static_cast<int>(ldb), beta, c + r0 * ldc + c0,
                      static_cast<int>(ldc));
        }
    });
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                           const double*, std::size_t, double, double*, std::size_t);

}  // namespace attngraph
