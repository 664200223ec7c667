// The attention products for AVX2 + FMA (this file is compiled with -mavx2 -mfma).
#include "engine/attention_gemm_impl.hpp"

#if defined(__x86_64__)
namespace attngraph::attention_gemm::detail {
extern const Kernels avx2_kernels;
const Kernels avx2_kernels = kernels_for<xsimd::fma3<xsimd::avx2>>("avx2");
}  // namespace attngraph::attention_gemm::detail
#endif
