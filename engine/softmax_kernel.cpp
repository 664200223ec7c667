#include "engine/softmax_kernel.hpp"

#include <xsimd/xsimd.hpp>

namespace attngraph {

template <class T>
void softmax_rows(const T* x, T* y, std::size_t rows, std::size_t len, T scale, bool scaled) {
    using Archs = xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>;
    static auto kernel = xsimd::dispatch<Archs>(softmax_detail::Kernel{});
    kernel(x, y, rows, len, scale, scaled);
}

template void softmax_rows<float>(const float*, float*, std::size_t, std::size_t, float, bool);
template void softmax_rows<double>(const double*, double*, std::size_t, std::size_t, double, bool);

}  // namespace attngraph
