#pragma once
// Deterministic intra-op parallelism on oneTBB. The work [0, n) is cut into chunks whose
// boundaries depend only on n and the grain, never on the number of threads, and every
// output element is written by exactly one chunk: results are bit-identical for any
// thread count.
#include <cstddef>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace attngraph {

/// @brief Calls body(begin, end) over fixed chunks of [0, n) of at most `grain` items.
template <class Body>
void parallel_chunks(std::size_t n, std::size_t grain, const Body& body) {
    if (grain == 0) grain = 1;
    if (n <= grain) {
        if (n) body(std::size_t{0}, n);
        return;
    }
    const std::size_t chunks = (n + grain - 1) / grain;
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, chunks, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
            for (std::size_t c = r.begin(); c != r.end(); ++c) {
                const std::size_t begin = c * grain;
                const std::size_t end = begin + grain < n ? begin + grain : n;
                body(begin, end);
            }
        },
        tbb::simple_partitioner());
}

/// A grain that gives each chunk about `work_per_chunk` units when one item costs `item_cost`.
inline std::size_t grain_for(std::size_t item_cost, std::size_t work_per_chunk = 32768) {
    if (item_cost == 0) item_cost = 1;
    const std::size_t g = work_per_chunk / item_cost;
    return g ? g : 1;
}

}  // namespace attngraph
