#include "engine/executor.hpp"

#include <fnmatch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/stats.hpp"
#include "engine/optimize.hpp"

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
        m_plan = make_plan(g, m_keep, o.optimize && !o.check_finite);
        const auto& steps = m_plan.steps;
        m_pending = std::make_unique<std::atomic<int>[]>(steps.size());
        m_consumers.resize(steps.size());
        std::vector<int> step_of(values.size(), -1);  // value id -> the step writing it
        for (std::size_t i = 0; i < steps.size(); ++i) {
            int pending = 0;
            for (int id : steps[i].inputs) {
                ++m_uses[static_cast<std::size_t>(id)];
                const int producer = step_of[static_cast<std::size_t>(id)];
                if (producer >= 0) {
                    ++pending;
                    m_consumers[static_cast<std::size_t>(producer)].push_back(i);
                }
            }
            m_pending[i] = pending;
            for (int id : steps[i].outputs) step_of[static_cast<std::size_t>(id)] = static_cast<int>(i);
        }
        for (const Node& node : nodes)
            for (int id : node.outputs) m_work += element_count(values[static_cast<std::size_t>(id)].shape);
    }

    RunResult finish(bool parallel) {
        if (parallel && m_work > inline_work_limit) run_parallel();
        else run_inline();
        if (m_error) std::rethrow_exception(m_error);
        for (std::size_t id = 0; id < m_ptr.size(); ++id) {
            const ValueInfo& v = m_graph.values()[id];
            if (!m_keep[id]) continue;
            if (v.data) m_result.values[id] = v.data;
            else if (m_ptr[id]) m_result.values[id] = std::make_shared<const Tensor>(std::move(m_owned[id]));
        }
        return std::move(m_result);
    }

private:
    void run_inline() {
        for (std::size_t i = 0; i < m_plan.steps.size() && !m_stop; ++i) execute(i);
    }

    // (tsan_release/acquire: the hand-offs through oneTBB, for ThreadSanitizer only)
    void run_parallel() {
        // the ready set is taken before the first spawn: once steps run, a count reaching 0
        // belongs to the task that brought it there (which spawns that step itself)
        std::vector<std::size_t> ready;
        for (std::size_t i = 0; i < m_plan.steps.size(); ++i)
            if (m_pending[i] == 0) ready.push_back(i);
        tbb::task_group group;
        for (std::size_t i : ready) spawn(i, group);
        group.wait();
        tsan_acquire(&m_tasks_done);
    }

    void spawn(std::size_t i, tbb::task_group& group) {
        const void* sync = &m_pending[i];
        tsan_release(sync);
        group.run([this, i, &group, sync] {
            tsan_acquire(sync);  // before touching any member
            execute_and_release(i, group);
            tsan_release(&m_tasks_done);
        });
    }

    void execute_and_release(std::size_t i, tbb::task_group& group) {
        if (m_stop) return;
        execute(i);
        if (m_stop) return;
        for (std::size_t c : m_consumers[i])
            if (--m_pending[c] == 0) spawn(c, group);
    }

    void execute(std::size_t i) {
        try {
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
            run_step<T>(m_graph, step, In<T>(in), Out<T>(out));
            for (std::size_t k = 0; k < out.size(); ++k) m_ptr[static_cast<std::size_t>(step.outputs[k])] = out[k];
            m_result.seconds[static_cast<std::size_t>(step.node)] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (m_options.check_finite) check_finite(static_cast<std::size_t>(step.node), in, out);
            // release inputs whose last consumer this was (unless kept)
            for (int id : step.inputs) {
                const auto u = static_cast<std::size_t>(id);
                if (--m_uses[u] == 0 && !m_keep[u] && !m_graph.values()[u].data) {
                    m_owned[u] = Array<T>();
                    m_ptr[u] = nullptr;
                }
            }
        } catch (...) {
            std::lock_guard<std::mutex> lock(m_error_mutex);
            if (!m_error) m_error = std::current_exception();
            m_stop = true;
        }
    }

    // Records the earliest node (in graph order) found non-finite, with its inputs' ranges.
    // check_finite runs the plain plan (no fused steps), so a step is exactly its node.
    void check_finite(std::size_t i, const std::vector<const Array<T>*>& in, const std::vector<Array<T>*>& out) {
        const Node& node = m_graph.nodes()[i];
        for (const Array<T>* a : out) {
            std::size_t bad = 0;
            for (T x : *a) bad += !std::isfinite(x);
            if (!bad) continue;
            std::lock_guard<std::mutex> lock(m_error_mutex);
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
            m_stop = true;
        }
    }

    const Graph& m_graph;
    const RunOptions& m_options;
    std::vector<Array<T>> m_owned;
    std::vector<const Array<T>*> m_ptr;
    std::vector<bool> m_keep;
    std::unique_ptr<std::atomic<int>[]> m_uses;
    std::unique_ptr<std::atomic<int>[]> m_pending;
    std::vector<std::vector<std::size_t>> m_consumers;  // step -> steps reading its outputs
    Plan m_plan;
    std::size_t m_work = 0;
    RunResult m_result;
    std::atomic<bool> m_stop{false};
    char m_tasks_done = 0;  // ThreadSanitizer's sync point: every task's work before wait() returns
    std::size_t m_stop_index = 0;
    std::mutex m_error_mutex;
    std::exception_ptr m_error;
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
int Executor::threads() const { return m_impl->threads; }

RunResult Executor::run(const Graph& graph, const RunOptions& options) {
    RunResult result;
    tsan_release(&result);  // the arena may run the functor on one of its own threads
    m_impl->arena.execute([&] {
        tsan_acquire(&result);
        if (graph.dtype() == DType::f32) result = Run<float>(graph, options).finish(m_impl->threads > 1);
        else result = Run<double>(graph, options).finish(m_impl->threads > 1);
        tsan_release(&result);
    });
    tsan_acquire(&result);
    return result;
}

RunResult run(const Graph& graph, const RunOptions& options) {
    Executor executor(options.threads);
    return executor.run(graph, options);
}

}  // namespace attngraph
