// softmax_rows for AVX2 + FMA (this file is compiled with -mavx2 -mfma).
#include "engine/softmax_kernel_impl.hpp"

#if defined(__x86_64__)
namespace attngraph::softmax_detail {
ATTNGRAPH_SOFTMAX_INSTANTIATE(xsimd::fma3<xsimd::avx2>)
}  // namespace attngraph::softmax_detail
#endif
