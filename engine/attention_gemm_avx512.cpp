// The attention products for AVX-512 (this file is compiled with -mavx512f -mavx512cd
// -mavx512dq -mavx512bw).
#include "engine/attention_gemm_impl.hpp"

#if defined(__x86_64__)
namespace attngraph::attention_gemm::detail {
extern const Kernels avx512_kernels;
const Kernels avx512_kernels = kernels_for<xsimd::avx512bw>("avx512");
}  // namespace attngraph::attention_gemm::detail
#endif
