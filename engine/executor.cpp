#include "engine/executor.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include "engine/autodiff.hpp"
#include "engine/buffer_pool.hpp"
#include "engine/error.hpp"
#include "engine/optimize.hpp"
#include "engine/parallel.hpp"
#include "engine/stats.hpp"
#include "ops/mask.hpp"

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
        group.run(TbbBody([this, i, &group, sync] {
            tsan_acquire(sync);  // before touching any member
            if (!m_stop && run(i))
                for (std::size_t s : m_graph.successors[i])
                    if (--m_pending[s] == 0) spawn(s, group);
            tsan_release(&m_tasks_done);
        }));
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

}  // namespace

// ---- the run plans of a graph, made once ---------------------------------------------------
// What a run needs that depends only on the graph and on what the run keeps (the plan, its
// task graph, the kept set, the read counts) is made on the first run with those options
// and kept in the graph's RunCache (Graph::run_cache). That is correct because a Graph is
// immutable: its nodes, shapes and dtype never change after it is built, and a copy, which
// may change them (with_tensors, with_dtype), starts with a cache of its own (RunCacheSlot),
// unless with_tensors left every shape as it was. Nothing cached reads a tensor's data: the
// plan looks at ops, attributes and shapes only, and a run takes the graph's tensors from the
// graph it is given.
//
// The cache also keeps the buffers of the values a run computes and nobody sees (RunArena),
// so that the next run writes into them instead of allocating them again. An arena serves
// one run at a time: a run takes one from the cache (or makes one) and gives it back when it
// has finished, so concurrent runs of one graph, from any threads and executors, never
// share one. Values a run hands to its caller (outputs, traced values) are never arena
// memory: they are allocated by the run and moved into the RunResult.

namespace detail {

// The RunOptions that decide the plan, in a canonical form (keep_all makes the globs moot).
struct PlanKey {
    bool keep_all = false;
    bool trace = false;
    std::vector<std::string> trace_only;
    bool optimize = true;
    bool keep_for_backward = false;  // also what a backward reads (engine/autodiff.hpp)
    bool operator==(const PlanKey&) const = default;
};

bool patched(const RunOptions& o) {
    return !o.patches.empty() || !o.hooks.empty();
}

PlanKey plan_key(const RunOptions& o) {
    PlanKey k;
    k.keep_all = o.keep_all;
    k.trace = !o.keep_all && o.trace;
    if (k.trace) k.trace_only = o.trace_only;
    k.optimize = o.optimize && !o.check_finite && !patched(o);
    k.keep_for_backward = !o.keep_all && o.keep_for_backward;
    return k;
}

// A run's plan and everything derived from it.
struct RunPlan {
    std::vector<bool> keep;   // value id -> kept (seen by the caller)
    std::vector<int> kept;    // the kept value ids
    Plan plan;
    TaskGraph tasks;          // a task per step, waiting for the steps that write its inputs
    std::vector<int> uses;    // value id -> steps reading it
    std::vector<int> tensors; // the values that are graph tensors
    std::size_t nodes_total = 0;
    // The values an arena holds: written by a step and not kept. Empty when they would need
    // more than run_arena_max_bytes together: such a run allocates each value when its step
    // runs and frees it after its last reader, so it needs only the values alive at once.
    std::vector<int> arena_values;
    std::vector<bool> in_arena;  // value id -> one of arena_values
    std::size_t arena_bytes = 0;

    RunPlan(const Graph& g, const PlanKey& key) {
        const auto& values = g.values();
        const auto& nodes = g.nodes();
        keep.resize(values.size(), false);
        for (std::size_t id = 0; id < values.size(); ++id) {
            keep[id] = key.keep_all || (key.trace && matches_any(values[id].name, key.trace_only));
            if (values[id].data) tensors.push_back(static_cast<int>(id));
        }
        for (int id : g.outputs()) keep[static_cast<std::size_t>(id)] = true;
        if (key.keep_for_backward)  // unfused, the backward reads every value
            keep = key.optimize ? backward_keep(g, keep) : std::vector<bool>(values.size(), true);
        for (std::size_t id = 0; id < values.size(); ++id)
            if (keep[id]) kept.push_back(static_cast<int>(id));
        plan = make_plan(g, keep, key.optimize);
        const auto& steps = plan.steps;
        tasks.successors.resize(steps.size());
        uses.resize(values.size(), 0);
        std::vector<int> step_of(values.size(), -1);  // value id -> the step writing it
        for (std::size_t i = 0; i < steps.size(); ++i) {
            for (int id : steps[i].inputs) {
                ++uses[static_cast<std::size_t>(id)];
                const int producer = step_of[static_cast<std::size_t>(id)];
                if (producer >= 0) tasks.successors[static_cast<std::size_t>(producer)].push_back(i);
            }
            for (int id : steps[i].outputs) step_of[static_cast<std::size_t>(id)] = static_cast<int>(i);
        }
        for (const Node& node : nodes)
            for (int id : node.outputs) tasks.work += element_count(values[static_cast<std::size_t>(id)].shape);
        const std::size_t word = g.dtype() == DType::f32 ? sizeof(float) : sizeof(double);
        for (const Step& step : steps) {
            nodes_total += 1 + step.folded.size();
            for (int id : step.outputs) {
                const auto u = static_cast<std::size_t>(id);
                if (keep[u]) continue;
                arena_values.push_back(id);
                arena_bytes += element_count(values[u].shape) * word;
            }
        }
        if (arena_bytes > run_arena_max_bytes) {
            arena_values.clear();
            arena_bytes = 0;
        }
        in_arena.resize(values.size(), false);
        for (int id : arena_values) in_arena[static_cast<std::size_t>(id)] = true;
    }
};

// Buffers that live across runs of one plan: by value id, the arena values already shaped
// (the others empty), and the table of value pointers a run fills.
struct RunArena {
    virtual ~RunArena() = default;
};

template <class T>
struct TypedArena : RunArena {
    std::vector<Array<T>> owned;
    std::vector<const Array<T>*> ptr;

    // `values` already shaped (a plan's arena_values), the others empty
    TypedArena(const Graph& g, const std::vector<int>& values)
        : owned(g.values().size()), ptr(g.values().size(), nullptr) {
        for (int id : values) {
            const auto u = static_cast<std::size_t>(id);
            owned[u] = uninitialized<T>(g.values()[u].shape);
            ptr[u] = &owned[u];
        }
    }
};

}  // namespace detail

using detail::PlanKey, detail::RunPlan, detail::RunArena, detail::TypedArena;

class RunCache {
public:
    // Bounds: the plans of at most max_plans kept sets (the least recently used goes), and
    // at most max_idle_arenas arenas waiting for a run, over all the plans, holding at most
    // run_arena_max_bytes together (a graph keeps no more buffers than that between runs).
    static constexpr std::size_t max_plans = 8;
    static constexpr std::size_t max_idle_arenas = 4;

    // The plan for `key`, made now when the cache has none.
    std::shared_ptr<const RunPlan> plan(const Graph& g, const PlanKey& key) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            for (auto it = m_entries.begin(); it != m_entries.end(); ++it)
                if (it->key == key) {
                    m_entries.splice(m_entries.begin(), m_entries, it);
                    return it->plan;
                }
        }
        // made outside the lock (two threads may both make it; the second finds the first's)
        auto made = std::make_shared<const RunPlan>(g, key);
        std::lock_guard<std::mutex> lock(m_mutex);
        for (auto it = m_entries.begin(); it != m_entries.end(); ++it)
            if (it->key == key) return it->plan;
        ++m_stats.plans_made;
        m_entries.push_front(Entry{key, made, {}});
        if (m_entries.size() > max_plans) {
            m_idle -= m_entries.back().idle.size();
            m_idle_bytes -= m_entries.back().idle.size() * m_entries.back().plan->arena_bytes;
            m_entries.pop_back();
        }
        return made;
    }

    // An arena of `plan` for one run: a waiting one, or a new one.
    template <class T>
    std::unique_ptr<TypedArena<T>> take_arena(const Graph& g, const std::shared_ptr<const RunPlan>& plan) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (Entry* e = find(plan); e && !e->idle.empty()) {
                std::unique_ptr<RunArena> a = std::move(e->idle.back());
                e->idle.pop_back();
                --m_idle;
                m_idle_bytes -= plan->arena_bytes;
                return std::unique_ptr<TypedArena<T>>(static_cast<TypedArena<T>*>(a.release()));
            }
            ++m_stats.arenas_made;
        }
        return std::make_unique<TypedArena<T>>(g, plan->arena_values);
    }

    // Gives an arena back after its run (freed when its plan left the cache or enough wait).
    void give_back(const std::shared_ptr<const RunPlan>& plan, std::unique_ptr<RunArena> arena) {
        std::lock_guard<std::mutex> lock(m_mutex);
        Entry* e = find(plan);
        if (!e || m_idle >= max_idle_arenas || m_idle_bytes + plan->arena_bytes > run_arena_max_bytes) return;
        e->idle.push_back(std::move(arena));
        ++m_idle;
        m_idle_bytes += plan->arena_bytes;
    }

    RunCacheStats stats() {
        std::lock_guard<std::mutex> lock(m_mutex);
        RunCacheStats s = m_stats;
        s.plans = m_entries.size();
        s.idle_arenas = m_idle;
        return s;
    }

private:
    struct Entry {
        PlanKey key;
        std::shared_ptr<const RunPlan> plan;
        std::vector<std::unique_ptr<RunArena>> idle;
    };
    Entry* find(const std::shared_ptr<const RunPlan>& plan) {
        for (Entry& e : m_entries)
            if (e.plan == plan) return &e;
        return nullptr;
    }

    std::mutex m_mutex;
    std::list<Entry> m_entries;  // most recently used first
    std::size_t m_idle = 0;
    std::size_t m_idle_bytes = 0;  // their buffers' bytes
    RunCacheStats m_stats;
};

RunCacheSlot::RunCacheSlot() : m_cache(std::make_shared<RunCache>()) {}
RunCacheSlot::RunCacheSlot(const RunCacheSlot&) : RunCacheSlot() {}
RunCacheSlot& RunCacheSlot::operator=(const RunCacheSlot& other) {
    if (this != &other) m_cache = std::make_shared<RunCache>();
    return *this;
}
RunCacheSlot::~RunCacheSlot() = default;

RunCacheStats run_cache_stats(const Graph& graph) {
    return graph.run_cache().stats();
}

namespace {

// Up to N pointers on the stack (a step's operands), more on the heap.
template <class P, std::size_t N = 8>
class PointerList {
public:
    explicit PointerList(std::size_t n) : m_size(n) {
        if (n > N) m_heap.resize(n);
    }
    P* data() { return m_size > N ? m_heap.data() : m_local; }
    P& operator[](std::size_t i) { return data()[i]; }
    std::size_t size() const { return m_size; }

private:
    P m_local[N] = {};
    std::vector<P> m_heap;
    std::size_t m_size;
};

// ---- the forward run ---------------------------------------------------------------------

// The chained step clock's tick (see Run::finish): the time stamp counter where there is one.
// A read costs a few nanoseconds; a steady_clock read costs 20-40 ns in a virtual machine,
// several times a tiny graph's step would take.
inline std::uint64_t step_tick() {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

template <class T>
class Run {
public:
    // `storage` holds the values' buffers; with `pooled`, the plan's arena values are already
    // in it, shaped (a RunCache arena), else it starts empty and values are freed after their
    // last reader.
    Run(const Graph& g, const RunOptions& o, const RunPlan& plan, TypedArena<T>& storage, bool pooled)
        : m_graph(g), m_options(o), m_plan(plan), m_owned(storage.owned), m_ptr(storage.ptr), m_pooled(pooled) {
        m_result.values.resize(g.values().size());
        m_result.seconds.resize(g.nodes().size(), 0.0);
        for (int id : plan.tensors) m_ptr[static_cast<std::size_t>(id)] = &g.value(id).data->template as<T>();
        for (int id : plan.kept)  // not computed yet (a stopped run leaves them out)
            if (!g.value(id).data) m_ptr[static_cast<std::size_t>(id)] = nullptr;
        if (!m_pooled) {
            m_uses = std::make_unique<std::atomic<int>[]>(plan.uses.size());
            for (std::size_t id = 0; id < plan.uses.size(); ++id) m_uses[id] = plan.uses[id];
        }
    }

    RunResult finish(Executor& executor) {
        // steps one after another on this thread: a step's start is the previous one's end, read
        // as a tick (step_tick) at each boundary, and the ticks turned into seconds by two clock
        // reads around the steps (a tiny graph's run is a microsecond or two). Not with
        // check_finite or buffers freed between the steps, which would count in the next
        // step's time.
        m_chained_clock = m_pooled && !m_options.check_finite && executor.runs_inline(m_plan.tasks);
        std::chrono::steady_clock::time_point start;
        std::uint64_t first_tick = 0;
        if (m_chained_clock) {
            start = std::chrono::steady_clock::now();
            m_tick = first_tick = step_tick();
        }
        executor.execute(m_plan.tasks, [this](std::size_t i) { return execute(i); });
        if (m_chained_clock) {  // the steps' seconds hold their ticks: scale them
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const double per_tick = m_tick > first_tick ? seconds / static_cast<double>(m_tick - first_tick) : 0.0;
            for (double& s : m_result.seconds) s *= per_tick;
        }
        for (int kept : m_plan.kept) {
            const auto id = static_cast<std::size_t>(kept);
            const ValueInfo& v = m_graph.values()[id];
            if (v.data)
                m_result.values[id] = v.data;
            else if (auto p = m_options.patches.find(kept); p != m_options.patches.end())
                m_result.values[id] = p->second;
            else if (m_ptr[id])  // the run's own buffer, never an arena's: back to the pool when let go
                m_result.values[id] = share_pooled(Tensor(std::move(m_owned[id])));
        }
        return std::move(m_result);
    }

private:
    // Runs step i; false when check_finite found a non-finite output (the run stops).
    bool execute(std::size_t i) {
        const Step& step = m_plan.plan.steps[i];
        const auto t0 = m_chained_clock ? std::chrono::steady_clock::time_point() : std::chrono::steady_clock::now();
        PointerList<const Array<T>*> in(step.inputs.size());
        for (std::size_t k = 0; k < in.size(); ++k) in[k] = m_ptr[static_cast<std::size_t>(step.inputs[k])];
        PointerList<Array<T>*> out(step.outputs.size());
        for (std::size_t k = 0; k < out.size(); ++k) {
            const auto u = static_cast<std::size_t>(step.outputs[k]);
            Array<T>& a = m_owned[u];
            if (!m_pooled || !m_plan.in_arena[u]) a = uninitialized<T>(m_graph.values()[u].shape);
            out[k] = &a;
        }
        const In<T> ins(in.data(), in.size());
        const Out<T> outs(out.data(), out.size());
        try {
            if (!patching() || !all_patched(step)) run_step<T>(m_graph, step, ins, outs);
        } catch (const ValueError& e) {  // a value the op cannot use: name the node
            const Node& node = m_graph.nodes()[static_cast<std::size_t>(step.node)];
            throw ValueError("node '" + node.name + "' (" + node.op->name + "): " + e.what());
        }
        for (std::size_t k = 0; k < out.size(); ++k) m_ptr[static_cast<std::size_t>(step.outputs[k])] = out[k];
        if (patching()) apply_patches(step);
        double& seconds = m_result.seconds[static_cast<std::size_t>(step.node)];
        if (m_chained_clock) {  // ticks, made seconds by finish()
            const std::uint64_t tick = step_tick();
            seconds = static_cast<double>(tick - m_tick);
            m_tick = tick;
        } else {
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        if (m_options.progress) m_options.progress(m_nodes_done += nodes_in(step), m_plan.nodes_total);
        if (m_options.check_finite && !check_finite(static_cast<std::size_t>(step.node), ins, outs)) return false;
        // release inputs whose last consumer this was (unless kept); a pooled run's values
        // stay in the arena for the next run
        if (!m_pooled)
            for (int id : step.inputs) {
                const auto u = static_cast<std::size_t>(id);
                if (--m_uses[u] == 0 && !m_plan.keep[u] && !m_graph.values()[u].data) {
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
    bool patching() const { return !m_options.patches.empty() || !m_options.hooks.empty(); }
    void apply_patches(const Step& step) {
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
    // -inf is a masked score, not a fault, where a Mask makes it or an input holds -inf already
    // (an additive mask tensor, scores masked before this node): there only NaN and +inf count.
    bool check_finite(std::size_t i, In<T> in, Out<T> out) {
        const Node& node = m_graph.nodes()[i];
        const T neg_inf = -std::numeric_limits<T>::infinity();
        bool masking = node.is<ops::Mask>();
        for (const Array<T>* a : in)
            masking = masking || std::find(a->begin(), a->end(), neg_inf) != a->end();
        bool finite = true;
        for (const Array<T>* a : out) {
            std::size_t bad = 0;
            for (T x : *a) bad += !std::isfinite(x) && !(masking && x == neg_inf);
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
    const RunPlan& m_plan;
    std::vector<Array<T>>& m_owned;       // value id -> its buffer, while it lives
    std::vector<const Array<T>*>& m_ptr;  // value id -> where its data is (buffer, tensor, patch)
    const bool m_pooled;
    std::unique_ptr<std::atomic<int>[]> m_uses;  // value id -> steps still to read it (not pooled)
    RunResult m_result;
    std::size_t m_stop_index = 0;
    std::mutex m_stop_mutex;
    std::mutex m_hook_mutex;
    std::atomic<std::size_t> m_nodes_done{0};
    bool m_chained_clock = false;  // steps in sequence: see finish()
    std::uint64_t m_tick = 0;      // with it, the last step's end (step_tick)
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

template <class T>
static RunResult run_typed(Executor& executor, const Graph& graph, const RunOptions& options) {
    RunCache& cache = graph.run_cache();
    const std::shared_ptr<const RunPlan> plan = cache.plan(graph, detail::plan_key(options));
    // patches and hooks replace buffers: such a run allocates its own
    if (detail::patched(options) || plan->arena_values.empty()) {
        TypedArena<T> own(graph, {});
        return Run<T>(graph, options, *plan, own, false).finish(executor);
    }
    std::unique_ptr<TypedArena<T>> arena = cache.take_arena<T>(graph, plan);
    RunResult result = Run<T>(graph, options, *plan, *arena, true).finish(executor);
    cache.give_back(plan, std::move(arena));  // not after an exception: that arena is dropped
    return result;
}

RunResult Executor::run(const Graph& graph, const RunOptions& options) {
    if (graph.dtype() == DType::f32) return run_typed<float>(*this, graph, options);
    return run_typed<double>(*this, graph, options);
}

void Executor::execute(const TaskGraph& graph, const std::function<bool(std::size_t)>& task) {
    // The arena may run the job on one of its own threads. The job is a named functor, not a
    // lambda: its operator() announces the hand-off on its own address (`this`, which needs no
    // read of the caller's memory) before it reads what the caller wrote.
    struct Job {
        TaskRun* run;
        bool parallel;
        void operator()() const {
            tsan_acquire(this);
            if (parallel)
                run->run_parallel();
            else
                run->run_inline();
            tsan_release(this);
        }
    };
    TaskRun run(graph, task);
    const Job job{&run, !runs_inline(graph)};
    tsan_release(&job);
    m_impl->arena.execute(job);
    tsan_acquire(&job);
    run.rethrow();
}

bool Executor::runs_inline(const TaskGraph& graph) const {
    return m_impl->threads == 1 || graph.work <= inline_work_limit;
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
