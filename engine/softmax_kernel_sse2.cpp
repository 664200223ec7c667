// softmax_rows for SSE2, the x86-64 baseline.
#include "engine/softmax_kernel_impl.hpp"

#if defined(__x86_64__)
namespace attngraph::softmax_detail {
ATTNGRAPH_SOFTMAX_INSTANTIATE(xsimd::sse2)
}  // namespace attngraph::softmax_detail
#endif
