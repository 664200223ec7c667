#pragma once
// The executor runs task graphs on oneTBB with one ready-counter loop: a task starts as soon
// as the tasks it waits for have finished, so independent branches (the heads) run in
// parallel; ops parallelise inside with fixed chunks. A forward run of a Graph is one task
// graph (a task per plan step), a backward run another (engine/autodiff.hpp: a task per node
// backward and per gradient sum). Every value is computed by the same arithmetic whatever
// the thread count, so the results are bit-identical for any number of threads.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief What to keep and how to run.
struct RunOptions {
    int threads = 0;                      ///< 0: every core of the machine
    bool trace = false;                   ///< keep traced values (see trace_only) for a Trace
    std::vector<std::string> trace_only;  ///< name globs limiting the trace; empty: all
    bool keep_all = false;                ///< keep every value
    /// keep what backward() reads: every value but the attention weights it recomputes
    /// (engine/autodiff.hpp, backward_keep); traced values are kept whatever they are
    bool keep_for_backward = false;
    bool check_finite = false;            ///< stop at the first node whose output is not finite
    bool optimize = true;  ///< fold unseen values away (engine/optimize.hpp); off with check_finite or patches
    /// Activation patching, by value id of a node output: the value is replaced by the given
    /// tensor (the node does not run when every output it has is given) and everything
    /// downstream computes from it. Check with check_patches first (engine/patch.hpp).
    std::map<int, std::shared_ptr<const Tensor>> patches;
    /// Hooks, by value id of a node output: the node runs, then its output is replaced by
    /// hook(output). Hooks may run on any thread, never two at once.
    std::map<int, std::function<Tensor(const Tensor&)>> hooks;
    /// Called after each step of the run with (nodes done, nodes in the run), from any of
    /// the run's threads, possibly from two at once (a progress line reads it).
    std::function<void(std::size_t, std::size_t)> progress;
};

/// @brief The values of one run, by value id.
struct RunResult {
    /// value id -> tensor; null where the value was released or never computed. Each is the
    /// run's own (or the graph's tensor, or the patch given): no later run writes into it,
    /// so it may be kept, and viewed without a copy (the Python module does), for as long
    /// as one likes.
    std::vector<std::shared_ptr<const Tensor>> values;
    /// node index -> wall time of its forward, in seconds
    std::vector<double> seconds;
    /// false when the run stopped early (check_finite); `stopped_at` names the node
    bool complete = true;
    std::string stopped_at;
    std::string stop_reason;

    const Tensor& at(const Graph& g, const std::string& name) const;
};

/// @brief What an Executor runs: tasks 0 .. size-1 and which tasks wait for which.
struct TaskGraph {
    /// task -> the tasks waiting for it (a task listed k times waits for k completions).
    /// Every task comes before its successors: running the tasks in index order is valid,
    /// and is what a run on one thread does.
    std::vector<std::vector<std::size_t>> successors;
    /// elements the tasks write: a graph with less work than inline_work_limit
    /// (engine/parallel.hpp) runs in index order on the calling thread
    std::size_t work = 0;
};

class Gradients;

/// @brief A run's values that nobody sees (neither kept nor outputs) come from buffers kept
/// across runs in the graph's RunCache when they need at most this many bytes together
/// (`mha-batched` at n = 1024, d_model 768, fits, at n = 2048 not); a bigger run allocates each when its
/// step runs and frees it after its last reader, so it holds only the values alive at once
/// (long sequences stay linear in memory). Kept across runs, the buffers cost no page faults:
/// with glibc's default policy (a Python process) a value above its mmap threshold is mapped
/// and zeroed afresh each time it is allocated.
constexpr std::size_t run_arena_max_bytes = std::size_t{64} << 20;

/// @brief What a graph's RunCache holds (tests read it).
struct RunCacheStats {
    std::size_t plans_made = 0;   ///< plans made since the graph was built
    std::size_t arenas_made = 0;  ///< arenas made since the graph was built
    std::size_t plans = 0;        ///< plans cached now
    std::size_t idle_arenas = 0;  ///< arenas waiting for a run now
};
RunCacheStats run_cache_stats(const Graph& graph);

/// @brief Runs graphs forward and backward on its own oneTBB arena of `threads` threads
/// (0: every core). Several threads may use one Executor at once, on one graph or several.
/// A run's plan (engine/optimize.hpp) is made on a graph's first run with given kept values
/// (RunOptions keep_all, trace, trace_only, and whether it is optimized) and reused by the
/// later ones; it lives with the graph (Graph::run_cache), whichever executor runs it.
class Executor {
public:
    explicit Executor(int threads = 0);
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    int threads() const;
    /// @brief The forward run of `graph`; options.threads is ignored (this executor's count).
    RunResult run(const Graph& graph, const RunOptions& options = {});
    /// @brief The backward run of `graph` over `forward` (engine/autodiff.hpp, where it is
    /// defined, describes the arguments); `wrt` empty: every value.
    /// `progress`, `fuse`: as BackwardOptions::progress, ::fuse.
    Gradients backward(const Graph& graph, const RunResult& forward,
                       const std::map<std::string, Tensor>& output_grads = {}, const std::vector<std::string>& wrt = {},
                       const std::function<void(std::size_t, std::size_t)>& progress = {}, bool fuse = true);

    /// @brief Calls task(i) once for every task of `graph`, each after the tasks it waits
    /// for, on this executor's threads (ops' parallel_chunks inside a task use them too).
    /// A task returning false or throwing stops the run: no task starts after it; the first
    /// exception is rethrown here. Everything before this call happens before every task,
    /// and every task before this call returns.
    void execute(const TaskGraph& graph, const std::function<bool(std::size_t)>& task);
    /// @brief Whether execute() runs `graph`'s tasks one after another, in index order, on the
    /// calling thread (one thread, or too little work to share).
    bool runs_inline(const TaskGraph& graph) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

/// @brief The process's shared executor of `threads` threads (0: every core), made on first
/// use and kept while the same count is asked for (one arena for many runs).
std::shared_ptr<Executor> default_executor(int threads = 0);

/// @brief A run on default_executor(options.threads).
RunResult run(const Graph& graph, const RunOptions& options = {});

/// True when `name` matches one of the globs (fnmatch), or globs is empty.
bool matches_any(const std::string& name, const std::vector<std::string>& globs);

}  // namespace attngraph
