#pragma once
// The buffer pool: large values a run hands to its caller come back here when their last
// reference goes, and a later run's step writes into one instead of fresh memory.
//
// A value of 4 MiB or more lives in memory from mmap: glibc maps every allocation above its
// mmap threshold (at most 32 MiB) fresh and unmaps it on free. A run that keeps such values
// (a traced run keeps them all) therefore takes a page fault per page and has the kernel zero
// every byte of them, run after run: at n = 1024, 12 heads batched, a traced run took 1.7-2.0x
// an untraced one. The pool keeps the buffers of the values a RunResult held (share_pooled),
// once nobody references them (a trace dropped, a numpy array collected), and uninitialized()
// (engine/tensor.hpp) takes one of the same dtype and element count before it allocates.
// Buffers freed inside a run (values after their last reader) are not pooled, so a run's
// peak memory stays what it was; the pool holds at most buffer_pool_max_bytes(), and a
// buffer nobody took within buffer_pool_max_age is freed at the pool's next use.
#include <chrono>
#include <cstddef>
#include <memory>

#include "engine/tensor.hpp"

namespace attngraph {

/// Values of at least this many bytes are pooled.
constexpr std::size_t buffer_pool_min_bytes = huge_page_min_bytes;
/// A pooled buffer waits at most this long for a run to take it.
constexpr std::chrono::seconds buffer_pool_max_age{5};
/// The most the pool holds: an eighth of the machine's memory.
std::size_t buffer_pool_max_bytes();

/// A tensor shared with the caller whose buffer, when the last reference goes, returns to the
/// pool (when it has buffer_pool_min_bytes or more; smaller ones are freed as usual).
std::shared_ptr<const Tensor> share_pooled(Tensor&& t);

/// Moves a pooled buffer of `shape`'s element count into `a` (reshaped to `shape`, its
/// contents whatever they were); false when none waits.
template <class T>
bool take_pooled(Array<T>& a, const Shape& shape);
extern template bool take_pooled<float>(Array<float>&, const Shape&);
extern template bool take_pooled<double>(Array<double>&, const Shape&);

/// @brief What the pool holds and has done (tests read it).
struct BufferPoolStats {
    std::size_t buffers = 0;   ///< waiting now
    std::size_t bytes = 0;     ///< their bytes
    std::size_t returned = 0;  ///< buffers given back since the process started
    std::size_t taken = 0;     ///< buffers taken since the process started
};
BufferPoolStats buffer_pool_stats();
/// Frees every buffer the pool holds.
void release_buffer_pool();

}  // namespace attngraph
