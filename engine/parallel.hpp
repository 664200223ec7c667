#pragma once
// Deterministic intra-op parallelism on oneTBB. The work [0, n) is cut into chunks whose
// boundaries depend only on n and the grain, never on the number of threads, and every
// output element is written by exactly one chunk: results are bit-identical for any
// thread count.
#include <cstddef>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

// ---- ThreadSanitizer --------------------------------------------------------------------
// The Debian oneTBB library is not instrumented, so ThreadSanitizer cannot see its hand-offs
// of work between threads; the code that gives work to TBB and takes it back announces them
// (no-ops in every other build). See .ci/tsan.supp for the rest.
#if defined(__SANITIZE_THREAD__)
#define ATTNGRAPH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNGRAPH_TSAN 1
#endif
#endif
#ifdef ATTNGRAPH_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace attngraph {

/// Everything this thread did so far happens before a later tsan_acquire(sync) (TSan only).
inline void tsan_release([[maybe_unused]] const void* sync) {
#ifdef ATTNGRAPH_TSAN
    __tsan_release(const_cast<void*>(sync));
#endif
}
/// Everything done before a tsan_release(sync) happens before what this thread does next.
inline void tsan_acquire([[maybe_unused]] const void* sync) {
#ifdef ATTNGRAPH_TSAN
    __tsan_acquire(const_cast<void*>(sync));
#endif
}

/// Runs (forward or backward) with less work than this run inline on the calling thread:
/// scheduling would cost more than it saves (the seed graph is ~100 flops a node).
constexpr std::size_t inline_work_limit = 1 << 16;

/// @brief Calls body(begin, end) over fixed chunks of [0, n) of at most `grain` items.
template <class Body>
void parallel_chunks(std::size_t n, std::size_t grain, const Body& body) {
    if (grain == 0) grain = 1;
    if (n <= grain) {
        if (n) body(std::size_t{0}, n);
        return;
    }
    const std::size_t chunks = (n + grain - 1) / grain;
    const char sync[2] = {};  // [0]: the caller's work before, [1]: the chunks' work after
    tsan_release(&sync[0]);
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, chunks, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
            tsan_acquire(&sync[0]);
            for (std::size_t c = r.begin(); c != r.end(); ++c) {
                const std::size_t begin = c * grain;
                const std::size_t end = begin + grain < n ? begin + grain : n;
                body(begin, end);
            }
            tsan_release(&sync[1]);
        },
        tbb::simple_partitioner());
    tsan_acquire(&sync[1]);
}

/// A grain that gives each chunk about `work_per_chunk` units when one item costs `item_cost`.
inline std::size_t grain_for(std::size_t item_cost, std::size_t work_per_chunk = 32768) {
    if (item_cost == 0) item_cost = 1;
    const std::size_t g = work_per_chunk / item_cost;
    return g ? g : 1;
}

}  // namespace attngraph
