#include "engine/attention_gemm.hpp"

#include <algorithm>

#if defined(__x86_64__)
#include <xmmintrin.h>

#include <xsimd/xsimd.hpp>
#endif

namespace attngraph::attention_gemm {

#if defined(__x86_64__)
namespace detail {
extern const Kernels avx512_kernels;  // attention_gemm_avx512.cpp
extern const Kernels avx2_kernels;    // attention_gemm_avx2.cpp
}  // namespace detail

std::vector<const Kernels*> runnable() {
    // the softmax kernel's choice (xsimd's: the instruction sets and the OS's saving of them)
    const unsigned best = xsimd::available_architectures().best;
    std::vector<const Kernels*> all;
    if (best >= xsimd::avx512bw::version()) all.push_back(&detail::avx512_kernels);
    if (best >= xsimd::fma3<xsimd::avx2>::version()) all.push_back(&detail::avx2_kernels);
    return all;
}
#else
std::vector<const Kernels*> runnable() {
    return {};
}
#endif

const Kernels* kernels() {
    static const Kernels* const chosen = [] {
        const std::vector<const Kernels*> all = runnable();
        return all.empty() ? nullptr : all.front();
    }();
    return chosen;
}

void pack_keys(const float* k, std::size_t m, std::size_t dk, float* out) {
    for (std::size_t p0 = 0; p0 < m; p0 += panel) {
        float* pk = out + p0 * dk;  // panel p0 / panel: dk × panel
        const std::size_t keys = std::min(panel, m - p0);
        // elements [0, dk4) of keys [0, keys4) by 4 × 4 transposes in SSE registers (baseline
        // x86-64), the rest by the element loop, which reads K down its columns a value a cycle
        std::size_t dk4 = 0, keys4 = 0;
#if defined(__x86_64__)
        dk4 = dk / 4 * 4, keys4 = keys / 4 * 4;
        for (std::size_t d0 = 0; d0 < dk4; d0 += 4)
            for (std::size_t j = 0; j < keys4; j += 4) {
                const float* kj = k + (p0 + j) * dk + d0;
                __m128 r0 = _mm_loadu_ps(kj), r1 = _mm_loadu_ps(kj + dk), r2 = _mm_loadu_ps(kj + 2 * dk),
                       r3 = _mm_loadu_ps(kj + 3 * dk);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                float* o = pk + d0 * panel + j;
                _mm_storeu_ps(o, r0);
                _mm_storeu_ps(o + panel, r1);
                _mm_storeu_ps(o + 2 * panel, r2);
                _mm_storeu_ps(o + 3 * panel, r3);
            }
#endif
        for (std::size_t d = 0; d < dk; ++d) {
            float* row = pk + d * panel;
            for (std::size_t j = d < dk4 ? keys4 : 0; j < keys; ++j) row[j] = k[(p0 + j) * dk + d];
            std::fill(row + keys, row + panel, 0.0f);
        }
    }
}

}  // namespace attngraph::attention_gemm
