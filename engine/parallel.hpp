#pragma once
// Deterministic intra-op parallelism on oneTBB. The work [0, n) is cut into chunks whose
// boundaries depend only on n and the grain, never on the number of threads, and every
// output element is written by exactly one chunk: results are bit-identical for any
// thread count.
#include <cstddef>
#include <type_traits>
#include <utility>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include "engine/sanitizers.hpp"

// ---- ThreadSanitizer --------------------------------------------------------------------
// The Debian oneTBB library is not instrumented, so ThreadSanitizer cannot see its hand-offs
// of work between threads; the code that gives work to TBB and takes it back announces them
// (no-ops in every other build). See .ci/tsan.supp for the rest.
#ifdef ATTNGRAPH_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
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
/// This thread's reads and writes until tsan_ignore_end() are not recorded (TSan only).
inline void tsan_ignore_begin() {
#ifdef ATTNGRAPH_TSAN
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}
inline void tsan_ignore_end() {
#ifdef ATTNGRAPH_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

/// @brief A functor as TBB stores it in its task objects, its bytes there hidden from TSan.
///
/// TBB copies a body into a task object on one thread (a split range's half, a task_group's
/// task) and runs it on another; the hand-off, and the reuse of the object's memory across
/// threads by the library's own pool, go through libtbb's atomics, which TSan cannot see. So
/// the copies into and out of a task object are not shown to TSan: the call copies the functor
/// onto its own stack first. What the functor points to is still checked; the code that hands
/// it over announces that hand-off (tsan_release / tsan_acquire). In builds without
/// ThreadSanitizer this is the functor itself.
template <class F>
class TbbBody {
    static_assert(std::is_nothrow_copy_constructible_v<F>);

public:
    explicit TbbBody(F f) noexcept : m_f(std::move(f)) {}
    TbbBody(const TbbBody& from) noexcept : m_f((tsan_ignore_begin(), from.m_f)) { tsan_ignore_end(); }
    TbbBody& operator=(const TbbBody&) = delete;

    template <class... Args>
    void operator()(Args&&... args) const {
#ifdef ATTNGRAPH_TSAN
        tsan_ignore_begin();
        const F f = m_f;
        tsan_ignore_end();
        f(std::forward<Args>(args)...);
#else
        m_f(std::forward<Args>(args)...);
#endif
    }

private:
    F m_f;
};

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
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1),
                      TbbBody([&](const tbb::blocked_range<std::size_t>& r) {
                          tsan_acquire(&sync[0]);
                          for (std::size_t c = r.begin(); c != r.end(); ++c) {
                              const std::size_t begin = c * grain;
                              const std::size_t end = begin + grain < n ? begin + grain : n;
                              body(begin, end);
                          }
                          tsan_release(&sync[1]);
                      }),
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
