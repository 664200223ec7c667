// softmax_rows for AVX-512 (this file is compiled with -mavx512f -mavx512cd -mavx512dq -mavx512bw).
#include "engine/softmax_kernel_impl.hpp"

#if defined(__x86_64__)
namespace attngraph::softmax_detail {
ATTNGRAPH_SOFTMAX_INSTANTIATE(xsimd::avx512bw)
}  // namespace attngraph::softmax_detail
#endif
