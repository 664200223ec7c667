#include "engine/softmax_kernel.hpp"

#if defined(__x86_64__)
#include <xsimd/xsimd.hpp>
#else
#include "engine/softmax_kernel_impl.hpp"
#endif

namespace attngraph {

template <class T>
void softmax_rows(const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled) {
#if defined(__x86_64__)
    using Archs = xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>;
#else
    using Archs = xsimd::arch_list<xsimd::default_arch>;  // built for the compiler's target only
#endif
    static auto kernel = xsimd::dispatch<Archs>(softmax_detail::Kernel{});
    kernel(x, y, rows, len, scale, scaled);
}

template <class T>
void softmax_spans(const T* x, std::size_t ldx, T* y, std::size_t ldy, std::size_t col0, std::size_t rows,
                   const std::size_t* lo, const std::size_t* hi, std::size_t len, T scale, bool scaled, T* last) {
#if defined(__x86_64__)
    using Archs = xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>;
#else
    using Archs = xsimd::arch_list<xsimd::default_arch>;
#endif
    static auto kernel = xsimd::dispatch<Archs>(softmax_detail::SpanKernel{});
    kernel(x, ldx, y, ldy, col0, rows, lo, hi, len, scale, scaled, last);
}

#if !defined(__x86_64__)
namespace softmax_detail {
ATTNGRAPH_SOFTMAX_INSTANTIATE(xsimd::default_arch)
}  // namespace softmax_detail
#endif

template void softmax_rows<float>(const float*, float*, std::size_t, std::size_t, float, bool);
template void softmax_rows<double>(const double*, double*, std::size_t, std::size_t, double, bool);
template void softmax_spans<float>(const float*, std::size_t, float*, std::size_t, std::size_t, std::size_t,
                                   const std::size_t*, const std::size_t*, std::size_t, float, bool, float*);
template void softmax_spans<double>(const double*, std::size_t, double*, std::size_t, std::size_t, std::size_t,
                                    const std::size_t*, const std::size_t*, std::size_t, double, bool, double*);

}  // namespace attngraph
