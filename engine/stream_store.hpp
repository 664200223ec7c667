#pragma once
// Streaming (non-temporal) stores, for large values written once and not read back soon: a
// traced S_raw, S or A of the fused attention step. An ordinary store first reads the line it
// writes into the cache (a read for ownership) and writes it back later; a streaming store
// sends whole lines to memory, which halves the traffic of a value that cannot stay in the
// cache anyway. The values are copied bit for bit.
//
// Streaming stores are weakly ordered: stream_fence() must run after them, before any other
// thread may read what they wrote (the writer's task returning). Without SSE2, and under
// AddressSanitizer or ThreadSanitizer (which do not see the intrinsics' stores: they check
// every ordinary one), these are the ordinary std::copy and std::fill.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/sanitizers.hpp"

#if defined(__SSE2__) && !defined(ATTNGRAPH_SANITIZED)
#define ATTNGRAPH_STREAM_STORES 1
#include <emmintrin.h>
#endif

namespace attngraph {

/// Whether a value of `bytes`, written once, is better written by streaming stores. From
/// 1 MiB it does not stay in a core's cache beside the work that produces it (and the other
/// values traced with it: at n = 512, 12 heads' S_raw, S and A are 36 MiB). Its memory comes
/// back from an earlier run with cold lines (engine/buffer_pool.hpp; up to 32 MiB, glibc's
/// largest mmap threshold, also from the heap of a process that keeps what it frees, as
/// `bench` does): streaming halves the traffic there. In memory fresh from mmap, where each
/// huge-page fault leaves 2 MiB of zeros in the cache for the stores to evict, it costs
/// up to 6% (a process's first traced run; `causal`, n = 2048, traced: 600 ms against 567).
constexpr bool streams(std::size_t bytes) {
    return bytes >= (std::size_t{1} << 20);
}

namespace stream_detail {

#ifdef ATTNGRAPH_STREAM_STORES
// v: the 16 bytes to store at `to` (16-byte aligned)
inline void store(float* to, __m128 v) {
    _mm_stream_ps(to, v);
}
inline void store(double* to, __m128d v) {
    _mm_stream_pd(to, v);
}
inline __m128 load(const float* from) {
    return _mm_loadu_ps(from);
}
inline __m128d load(const double* from) {
    return _mm_loadu_pd(from);
}
inline __m128 splat(float x) {
    return _mm_set1_ps(x);
}
inline __m128d splat(double x) {
    return _mm_set1_pd(x);
}

// elements before `to` reaches a 16-byte boundary (all of them if it never does: T misaligned)
template <class T>
std::size_t head(const T* to, std::size_t count) {
    const std::size_t off = reinterpret_cast<std::uintptr_t>(to) % 16;
    if (off % sizeof(T) != 0) return count;
    return std::min(count, off == 0 ? 0 : (16 - off) / sizeof(T));
}
#endif

}  // namespace stream_detail

/// to[0, count) = from[0, count), by streaming stores where `to` is 16-byte aligned.
template <class T>
void stream_copy(const T* from, std::size_t count, T* to) {
#ifdef ATTNGRAPH_STREAM_STORES
    constexpr std::size_t lanes = 16 / sizeof(T);
    const std::size_t h = stream_detail::head(to, count);
    std::copy(from, from + h, to);
    std::size_t i = h;
    for (; i + lanes <= count; i += lanes) stream_detail::store(to + i, stream_detail::load(from + i));
    std::copy(from + i, from + count, to + i);
#else
    std::copy(from, from + count, to);
#endif
}

/// to[0, count) = value, by streaming stores where `to` is 16-byte aligned.
template <class T>
void stream_fill(T* to, std::size_t count, T value) {
#ifdef ATTNGRAPH_STREAM_STORES
    constexpr std::size_t lanes = 16 / sizeof(T);
    const std::size_t h = stream_detail::head(to, count);
    std::fill(to, to + h, value);
    const auto v = stream_detail::splat(value);
    std::size_t i = h;
    for (; i + lanes <= count; i += lanes) stream_detail::store(to + i, v);
    std::fill(to + i, to + count, value);
#else
    std::fill(to, to + count, value);
#endif
}

/// Orders every streaming store before it ahead of the stores after it (sfence).
inline void stream_fence() {
#ifdef ATTNGRAPH_STREAM_STORES
    _mm_sfence();
#endif
}

}  // namespace attngraph
