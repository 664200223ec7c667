#pragma once
// The executor runs a Graph on oneTBB: a node starts as soon as its inputs are computed,
// so independent branches (the heads) run in parallel; ops parallelise inside with fixed
// chunks. Every value is computed by the same arithmetic whatever the thread count, so the
// results are bit-identical for any number of threads.
#include <memory>
#include <string>
#include <vector>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief What to keep and how to run.
struct RunOptions {
    int threads = 0;                 ///< 0: every core of the machine
    bool trace = false;              ///< keep traced values (see trace_only) for a Trace
    std::vector<std::string> trace_only;  ///< name globs limiting the trace; empty: all
    bool keep_all = false;           ///< keep every value (backward needs them)
    bool check_finite = false;       ///< stop at the first node whose output is not finite
    bool optimize = true;            ///< fold unseen values away (engine/optimize.hpp); off with check_finite
};

/// @brief The values of one run, by value id.
struct RunResult {
    /// value id -> tensor; null where the value was released or never computed
    std::vector<std::shared_ptr<const Tensor>> values;
    /// node index -> wall time of its forward, in seconds
    std::vector<double> seconds;
    /// false when the run stopped early (check_finite); `stopped_at` names the node
    bool complete = true;
    std::string stopped_at;
    std::string stop_reason;

    const Tensor& at(const Graph& g, const std::string& name) const;
};

/// @brief Runs graphs on its own oneTBB arena of `threads` threads (0: every core).
class Executor {
public:
    explicit Executor(int threads = 0);
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    int threads() const;
    RunResult run(const Graph& graph, const RunOptions& options = {});

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

/// @brief One-shot run on an executor of options.threads threads.
RunResult run(const Graph& graph, const RunOptions& options = {});

/// True when `name` matches one of the globs (fnmatch), or globs is empty.
bool matches_any(const std::string& name, const std::vector<std::string>& globs);

}  // namespace attngraph
