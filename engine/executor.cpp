#include "engine/executor.hpp"

#include <fnmatch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <thread>

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/optimize.hpp"
#include "engine/parallel.hpp"
#include "engine/stats.hpp"

namespace attngraph {

bool matches_any(const std::string& name, const std::vector<std::string>& globs) {
    if (globs.empty()) return true;
    for (const auto& g : globs)
        if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
    return false;
}

const Tensor& RunResult::at(const Graph& g, const std::string& name) const {
    const int id = g.at(name);
    const auto& v = values[static_cast<std::size_t>(id)];
    if (!v) throw GraphError("value '" + name + "' was not kept by this run");
    return *v;
}

namespace {

// ---- the one scheduler ----------------------------------------------------------------
// (tsan_release/acquire: the hand-offs through oneTBB, for ThreadSanitizer only)

class TaskRun {
public:
    TaskRun(const TaskGraph& graph, const std::function<bool(std::size_t)>& task) : m_graph(graph), m_task(task) {}

    // in index order on the calling thread
    void run_inline() {
        for (std::size_t i = 0; i < m_graph.successors.size() && !m_stop; ++i) run(i);
    }

    // a task starts when its count of unfinished predecessors reaches 0
    void run_parallel() {
        const auto& successors = m_graph.successors;
        m_pending = std::make_unique<std::atomic<int>[]>(successors.size());
        for (const auto& next : successors)
            for (std::size_t s : next) ++m_pending[s];
        // the ready set is taken before the first spawn: once tasks run, a count reaching 0
        // belongs to the task that brought it there (which spawns that task itself)
        std::vector<std::size_t> ready;
        for (std::size_t i = 0; i < successors.size(); ++i)
            if (m_pending[i] == 0) ready.push_back(i);
        tbb::task_group group;
        for (std::size_t i : ready) spawn(i, group);
        group.wait();
        tsan_acquire(&m_tasks_done);
    }

    void rethrow() const {
        if (m_error) std::rethrow_exception(m_error);
    }

private:
    void spawn(std::size_t i, tbb::task_group& group) {
        const void* sync = &m_pending[i];
        tsan_release(sync);
        group.run([this, i, &group, sync] {
            tsan_acquire(sync);  // before touching any member
            if (!m_stop && run(i))
                for (std::size_t s : m_graph.successors[i])
                    if (--m_pending[s] == 0) spawn(s, group);
            tsan_release(&m_tasks_done);
        });
    }

    bool run(std::size_t i) {
        try {
            if (m_task(i)) return true;
        } catch (...) {
            std::lock_guard<std::mutex> lock(m_error_mutex);
            if (!m_error) m_error = std::current_exception();
        }
        m_stop = true;
        return false;
    }

    const TaskGraph& m_graph;
    const std::function<bool(std::size_t)>& m_task;
    std::unique_ptr<std::atomic<int>[]> m_pending;  // task -> predecessors still running
    std::atomic<bool> m_stop{false};
    char m_tasks_done = 0;  // ThreadSanitizer's sync point: every task's work before wait() returns
    std::mutex m_error_mutex;
    std::exception_ptr m_error;
};

// ---- the forward run ---------------------------------------------------------------------

template <class T>
class Run {
public:
    Run(const Graph& g, const RunOptions& o) : m_graph(g), m_options(o) {
        const auto& values = g.values();
        const auto& nodes = g.nodes();
        m_owned.resize(values.size());
        m_ptr.resize(values.size(), nullptr);
        m_keep.resize(values.size(), false);
        m_uses = std::make_unique<std::atomic<int>[]>(values.size());
        m_result.values.resize(values.size());
        m_result.seconds.resize(nodes.size(), 0.0);

        for (std::size_t id = 0; id < values.size(); ++id) {
            const ValueInfo& v = values[id];
            m_keep[id] = o.keep_all || (o.trace && matches_any(v.name, o.trace_only));
            if (v.data) m_ptr[id] = &v.data->as<T>();
        }
        for (int id : g.outputs()) m_keep[static_cast<std::size_t>(id)] = true;
        const bool patched = !o.patches.empty() || !o.hooks.empty();
        const bool optimize = o.optimize && !o.check_finite && !patched;
        if (o.keep_for_backward)  // unfused, the backward reads every value
            m_keep = optimize ? backward_keep(g, m_keep) : std::vector<bool>(values.size(), true);
        m_plan = make_plan(g, m_keep, optimize);
        // a task per step, waiting for the steps that write its inputs
        const auto& steps = m_plan.steps;
        m_tasks.successors.resize(steps.size());
        std::vector<int> step_of(values.size(), -1);  // value id -> the step writing it
        for (std::size_t i = 0; i < steps.size(); ++i) {
            for (int id : steps[i].inputs) {
                ++m_uses[static_cast<std::size_t>(id)];
                const int producer = step_of[static_cast<std::size_t>(id)];
                if (producer >= 0) m_tasks.successors[static_cast<std::size_t>(producer)].push_back(i);
            }
            for (int id : steps[i].outputs) step_of[static_cast<std::size_t>(id)] = static_cast<int>(i);
        }
        for (const Node& node : nodes)
            for (int id : node.outputs) m_tasks.work += element_count(values[static_cast<std::size_t>(id)].shape);
        for (const Step& step : steps) m_nodes_total += nodes_in(step);
    }

    RunResult finish(Executor& executor) {
        executor.execute(m_tasks, [this](std::size_t i) { return execute(i); });
        for (std::size_t id = 0; id < m_ptr.size(); ++id) {
            const ValueInfo& v = m_graph.values()[id];
            if (!m_keep[id]) continue;
            if (v.data)
                m_result.values[id] = v.data;
            else if (auto p = m_options.patches.find(static_cast<int>(id)); p != m_options.patches.end())
                m_result.values[id] = p->second;
            else if (m_ptr[id])
                m_result.values[id] = std::make_shared<const Tensor>(std::move(m_owned[id]));
        }
        return std::move(m_result);
    }

private:
    // Runs step i; false when check_finite found a non-finite output (the run stops).
    bool execute(std::size_t i) {
        const Step& step = m_plan.steps[i];
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<const Array<T>*> in;
        in.reserve(step.inputs.size());
        for (int id : step.inputs) in.push_back(m_ptr[static_cast<std::size_t>(id)]);
        std::vector<Array<T>*> out;
        for (int id : step.outputs) {
            const Shape& s = m_graph.values()[static_cast<std::size_t>(id)].shape;
            Array<T>& a = m_owned[static_cast<std::size_t>(id)];
            a = Array<T>::from_shape(s);
            out.push_back(&a);
        }
        try {
            if (!all_patched(step)) run_step<T>(m_graph, step, In<T>(in), Out<T>(out));
        } catch (const ValueError& e) {  // a value the op cannot use: name the node
            const Node& node = m_graph.nodes()[static_cast<std::size_t>(step.node)];
            throw ValueError("node '" + node.name + "' (" + node.op->name + "): " + e.what());
        }
        for (std::size_t k = 0; k < out.size(); ++k) m_ptr[static_cast<std::size_t>(step.outputs[k])] = out[k];
        apply_patches(step);
        m_result.seconds[static_cast<std::size_t>(step.node)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (m_options.progress) m_options.progress(m_nodes_done += nodes_in(step), m_nodes_total);
        if (m_options.check_finite && !check_finite(static_cast<std::size_t>(step.node), in, out)) return false;
        // release inputs whose last consumer this was (unless kept)
        for (int id : step.inputs) {
            const auto u = static_cast<std::size_t>(id);
            if (--m_uses[u] == 0 && !m_keep[u] && !m_graph.values()[u].data) {
                m_owned[u] = Array<T>();
                m_ptr[u] = nullptr;
            }
        }
        return true;
    }

    // The graph's nodes a step computes: its own and the ones folded into it (a linear
    // group's other members among them).
    static std::size_t nodes_in(const Step& step) { return 1 + step.folded.size(); }

    // Activation patching (RunOptions::patches/hooks): a step whose every output is given
    // does not run; given outputs point at the patch, hooked ones are replaced by hook(value).
    bool all_patched(const Step& step) const {
        for (int id : step.outputs)
            if (!m_options.patches.count(id)) return false;
        return true;
    }
    void apply_patches(const Step& step) {
        if (m_options.patches.empty() && m_options.hooks.empty()) return;
        for (int id : step.outputs) {
            const auto u = static_cast<std::size_t>(id);
            if (auto p = m_options.patches.find(id); p != m_options.patches.end()) {
                m_owned[u] = Array<T>();
                m_ptr[u] = &p->second->template as<T>();
            } else if (auto h = m_options.hooks.find(id); h != m_options.hooks.end()) {
                const ValueInfo& v = m_graph.values()[u];
                Tensor replaced;
                {
                    std::lock_guard<std::mutex> lock(m_hook_mutex);
                    replaced = h->second(Tensor(std::move(m_owned[u])));
                }
                if (replaced.shape() != v.shape)
                    throw ShapeError("patch hook of '" + v.name + "' returned " + shape_str(replaced.shape()) +
                                     ", the node's output is " + shape_str(v.shape));
                m_owned[u] = std::move(replaced.cast(m_graph.dtype()).template as<T>());
                m_ptr[u] = &m_owned[u];
            }
        }
    }

    // Records the earliest node (in graph order) found non-finite, with its inputs' ranges;
    // false when node i's outputs are not all finite.
    // check_finite runs the plain plan (no fused steps), so a step is exactly its node.
    bool check_finite(std::size_t i, const std::vector<const Array<T>*>& in, const std::vector<Array<T>*>& out) {
        const Node& node = m_graph.nodes()[i];
        bool finite = true;
        for (const Array<T>* a : out) {
            std::size_t bad = 0;
            for (T x : *a) bad += !std::isfinite(x);
            if (!bad) continue;
            std::lock_guard<std::mutex> lock(m_stop_mutex);
            if (m_result.complete || i < m_stop_index) {
                m_result.complete = false;
                m_stop_index = i;
                m_result.stopped_at = node.name;
                m_result.stop_reason = std::to_string(bad) + " non-finite values";
                for (std::size_t k = 0; k < in.size(); ++k) {
                    const ValueInfo& v = m_graph.value(node.inputs[k]);
                    m_result.stop_reason += "; input " + v.name + " (" + shape_str(v.shape) + ") " +
                                            stats_text(tensor_stats(Tensor(Array<T>(*in[k]))));
                }
            }
            finite = false;
        }
        return finite;
    }

    const Graph& m_graph;
    const RunOptions& m_options;
    std::vector<Array<T>> m_owned;
    std::vector<const Array<T>*> m_ptr;
    std::vector<bool> m_keep;
    std::unique_ptr<std::atomic<int>[]> m_uses;  // value id -> steps still to read it
    Plan m_plan;
    TaskGraph m_tasks;
    RunResult m_result;
    std::size_t m_stop_index = 0;
    std::mutex m_stop_mutex;
    std::mutex m_hook_mutex;
    std::size_t m_nodes_total = 0;
    std::atomic<std::size_t> m_nodes_done{0};
};

}  // namespace

struct Executor::Impl {
    int threads;
    // oneTBB caps its workers at the core count (and warns on stderr when an arena asks for
    // more): --threads 8 on two cores must still get eight threads, quietly
    std::optional<tbb::global_control> above_cores;
    tbb::task_arena arena;
    explicit Impl(int t) : threads(t), above_cores(make_control(t)), arena(t) {}
    static std::optional<tbb::global_control> make_control(int t) {
        if (t <= tbb::info::default_concurrency()) return std::nullopt;
        return std::optional<tbb::global_control>(std::in_place, tbb::global_control::max_allowed_parallelism,
                                                  static_cast<std::size_t>(t));
    }
};

static int resolve_threads(int threads) {
    if (threads < 0) throw Error("thread count must be positive, got " + std::to_string(threads));
    if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return threads;
}

Executor::Executor(int threads) : m_impl(std::make_unique<Impl>(resolve_threads(threads))) {}
Executor::~Executor() = default;
int Executor::threads() const {
    return m_impl->threads;
}

RunResult Executor::run(const Graph& graph, const RunOptions& options) {
    if (graph.dtype() == DType::f32) return Run<float>(graph, options).finish(*this);
    return Run<double>(graph, options).finish(*this);
}

void Executor::execute(const TaskGraph& graph, const std::function<bool(std::size_t)>& task) {
    TaskRun run(graph, task);
    const bool parallel = m_impl->threads > 1 && graph.work > inline_work_limit;
    tsan_release(&run);  // the arena may run the functor on one of its own threads
    m_impl->arena.execute([&] {
        tsan_acquire(&run);
        if (parallel)
            run.run_parallel();
        else
            run.run_inline();
        tsan_release(&run);
    });
    tsan_acquire(&run);
    run.rethrow();
}

std::shared_ptr<Executor> default_executor(int threads) {
    threads = resolve_threads(threads);
    static std::mutex mutex;
    // never destroyed: oneTBB may be torn down before static destructors run
    static auto* shared = new std::shared_ptr<Executor>();
    std::lock_guard<std::mutex> lock(mutex);
    if (!*shared || (*shared)->threads() != threads) *shared = std::make_shared<Executor>(threads);
    return *shared;
}

RunResult run(const Graph& graph, const RunOptions& options) {
    return default_executor(options.threads)->run(graph, options);
}

}  // namespace attngraph
