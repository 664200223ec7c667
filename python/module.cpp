// The attngraph Python module's compiled part (attngraph._core): graphs, runs, traces,
// gradients, patching and reports over the C++ library. python/attngraph/__init__.py
// builds the public surface on it. Tensors leave as read-only numpy arrays that share the
// run's buffers (each array keeps its buffer alive); the GIL is released while a graph runs.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "engine/autodiff.hpp"
#include "engine/buffer_pool.hpp"
#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/op.hpp"
#include "engine/patch.hpp"
#include "engine/trace.hpp"
#include "graphs/variants.hpp"
#include "graphs/weights_from.hpp"
#include "inspect/report.hpp"
#include "inspect/trace_dir.hpp"
#include "onnx/import.hpp"

namespace py = pybind11;
namespace fs = std::filesystem;
using namespace attngraph;

namespace {

using GraphPtr = std::shared_ptr<Graph>;

// ---- numpy <-> Tensor -------------------------------------------------------------------

/// A read-only numpy view of a tensor; the array holds a reference to the tensor.
py::array to_numpy(std::shared_ptr<const Tensor> t) {
    auto* owner = new std::shared_ptr<const Tensor>(t);
    py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<const Tensor>*>(p); });
    const Shape shape = t->shape();
    py::array out = t->visit([&](const auto& a) -> py::array {
        using T = typename std::decay_t<decltype(a)>::value_type;
        std::vector<py::ssize_t> strides(shape.size());
        py::ssize_t stride = sizeof(T);
        for (std::size_t i = shape.size(); i-- > 0;) {
            strides[i] = stride;
            stride *= static_cast<py::ssize_t>(shape[i]);
        }
        return py::array(py::dtype::of<T>(), std::vector<py::ssize_t>(shape.begin(), shape.end()), strides, a.data(),
                         base);
    });
    out.attr("flags").attr("writeable") = false;
    return out;
}

/// A tensor from any numeric numpy array: f32 and f64 as they are, other dtypes (integers,
/// booleans, f16) converted to f64 the way --input converts them; then cast to `dtype`.
/// With `max_bytes`, an array over it in `dtype` is refused before anything is copied.
Tensor from_numpy(const py::handle& obj, DType dtype, const std::string& what, std::size_t max_bytes = 0) {
    py::array any = py::array::ensure(obj);
    const auto numeric = [](char k) { return k == 'f' || k == 'i' || k == 'u' || k == 'b'; };
    // not an array and nothing numpy reads as numbers (None, a str, a ragged list): the wrong type
    if (!py::isinstance<py::array>(obj) && (!any || !numeric(any.dtype().kind())))
        throw py::type_error(what + ": expected a numeric numpy array, got " +
                             std::string(py::str(obj.get_type().attr("__name__"))) +
                             (any ? "" : " (numpy cannot read it as an array)"));
    const char kind = any.dtype().kind();
    if (!numeric(kind))
        throw GraphError(what + ": numpy dtype " + std::string(py::str(any.dtype())) +
                         " is not a number (expected float32 or float64)");
    Shape shape(any.shape(), any.shape() + any.ndim());
    const std::size_t word = dtype == DType::f32 ? 4 : 8;
    const std::size_t count = element_count_capped(shape);
    const std::size_t bytes = count > SIZE_MAX / word ? SIZE_MAX : count * word;
    if (max_bytes && bytes > max_bytes)
        throw ShapeError(what + ": shape (" + shape_str(shape) + ") " + to_string(dtype) + " needs " +
                         (bytes == SIZE_MAX ? "more than " + std::to_string(SIZE_MAX) : std::to_string(bytes)) +
                         " bytes, over the memory limit of " + std::to_string(max_bytes) + " bytes");
    if (any.dtype().is(py::dtype::of<float>())) {
        auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(any);
        Array<float> arr = Array<float>::from_shape(shape);
        std::copy(a.data(), a.data() + a.size(), arr.data());
        return Tensor(std::move(arr)).cast(dtype);
    }
    if (kind == 'i' || kind == 'u') {  // as an .npy file's integers: only those the dtype holds exactly
        const std::uint64_t limit = std::uint64_t(1) << (dtype == DType::f32 ? 24 : 53);
        auto check = [&](auto typed) {
            for (py::ssize_t i = 0; i < typed.size(); ++i) {
                const auto v = typed.data()[i];
                const std::uint64_t magnitude = v < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(v)
                                                      : static_cast<std::uint64_t>(v);
                if (magnitude > limit)
                    throw GraphError(what + ": integer " + std::to_string(v) + " at flat index " + std::to_string(i) +
                                     " is beyond 2^" + (dtype == DType::f32 ? "24" : "53") +
                                     " and cannot be held exactly in " + to_string(dtype));
            }
        };
        if (kind == 'i')
            check(py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(any));
        else
            check(py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(any));
    }
    auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(any);
    Array<double> arr = Array<double>::from_shape(shape);
    std::copy(a.data(), a.data() + a.size(), arr.data());
    for (std::size_t i = 0; dtype == DType::f32 && i < arr.size(); ++i)  // as an .npy file's values
        if (std::isfinite(arr.data()[i]) && std::abs(arr.data()[i]) > std::numeric_limits<float>::max())
            throw GraphError(what + ": value " + (std::ostringstream() << arr.data()[i]).str() + " at flat index " +
                             std::to_string(i) + " is beyond f32's range (it would become infinite)");
    return Tensor(std::move(arr)).cast(dtype);
}

// ---- errors ---------------------------------------------------------------------------------

/// A Python exception raised in a patch hook, carried through the executor's threads.
struct HookFailed : std::exception {
    std::shared_ptr<py::error_already_set> error;
    const char* what() const noexcept override { return "patch hook raised"; }
};

// ---- Ctrl-C ---------------------------------------------------------------------------------
//
// Python's SIGINT handler only notes the signal; the interpreter raises KeyboardInterrupt when
// it runs bytecode again, which a run with the GIL released delays to its end. While a run of
// the main thread lasts (with Python's default handler in place), a C handler of ours comes
// before Python's: it calls it, and asks the run to stop after its current step (the progress
// callback of RunOptions and BackwardOptions throws Interrupted); KeyboardInterrupt follows.
namespace interrupt {

std::atomic<bool> requested{false};  // lock-free: set from the signal handler
struct sigaction python_handler;     // what was installed before ours
int depth = 0;                       // runs of the main thread under way (a hook may run another)
unsigned long main_thread = 0;       // PyThread_get_thread_ident() of the main thread

struct Interrupted {};  // not a std::exception: nothing on the way catches it as an error

extern "C" void on_sigint(int sig, siginfo_t* info, void* context) {
    requested.store(true);
    if (python_handler.sa_flags & SA_SIGINFO)
        python_handler.sa_sigaction(sig, info, context);
    else if (python_handler.sa_handler != SIG_DFL && python_handler.sa_handler != SIG_IGN)
        python_handler.sa_handler(sig);
}

/// Installs the handler for the scope of a run, where it applies (the GIL held).
class Scope {
public:
    Scope() {
        if (PyThread_get_thread_ident() != main_thread) return;
        if (depth > 0) {
            ++depth, m_active = true;
            return;
        }
        py::module_ signal = py::module_::import("signal");
        if (!signal.attr("getsignal")(signal.attr("SIGINT")).is(signal.attr("default_int_handler"))) return;
        struct sigaction ours {};
        if (sigaction(SIGINT, nullptr, &python_handler) != 0) return;
        ours.sa_sigaction = on_sigint;
        ours.sa_flags = SA_SIGINFO | (python_handler.sa_flags & SA_RESTART);
        sigemptyset(&ours.sa_mask);
        requested.store(false);
        if (sigaction(SIGINT, &ours, nullptr) != 0) return;
        ++depth, m_active = true;
    }
    ~Scope() {
        if (m_active && --depth == 0) sigaction(SIGINT, &python_handler, nullptr);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    /// `progress` with the stop request checked first (unchanged where the scope does not apply).
    std::function<void(std::size_t, std::size_t)> stoppable(
        std::function<void(std::size_t, std::size_t)> progress) const {
        if (!m_active) return progress;
        return [progress = std::move(progress)](std::size_t done, std::size_t total) {
            if (requested.load(std::memory_order_relaxed)) throw Interrupted{};
            if (progress) progress(done, total);
        };
    }

private:
    bool m_active = false;
};

/// After Interrupted (the GIL held): the KeyboardInterrupt Python's handler set up.
[[noreturn]] void raise() {
    if (PyErr_CheckSignals() == 0) PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
}

}  // namespace interrupt

// ---- runs -----------------------------------------------------------------------------------

struct PyResult {
    GraphPtr graph;
    RunResult result;
    std::vector<std::string> only;
    std::vector<std::string> tokens;
    std::set<std::string> patched;
    bool traced = false;

    Trace trace() const {
        Trace t = make_trace(*graph, result, traced ? only : std::vector<std::string>{});
        t.tokens = tokens;
        mark_patched(t, patched);
        return t;
    }
};

GraphPtr with_inputs(const GraphPtr& graph, const py::dict& inputs, std::size_t max_bytes) {
    if (inputs.empty()) return graph;
    std::map<std::string, Tensor> replacements;
    for (auto [k, v] : inputs) {
        const std::string name = py::cast<std::string>(k);
        const int id = graph->find(name);
        if (id < 0)
            throw GraphError("input " + name + ": graph '" + graph->name() + "' has no tensor named '" + name + "'");
        if (graph->value(id).kind == ValueKind::node)
            throw GraphError("input " + name + ": '" + name +
                             "' is a node output, not a tensor (patch it with patch={'" + name + "': ...})");
        replacements[name] = from_numpy(v, graph->dtype(), "input " + name, max_bytes);
    }
    return std::make_shared<Graph>(graph->with_tensors(std::move(replacements)));
}

std::function<Tensor(const Tensor&)> make_hook(const py::function& fn, DType dtype, const std::string& name,
                                               const Shape& shape) {
    return [fn, dtype, name, shape](const Tensor& value) -> Tensor {
        py::gil_scoped_acquire gil;
        try {
            py::object out = fn(to_numpy(std::make_shared<const Tensor>(value)));
            // what the hook gave, checked as it is: a value of another shape is refused before
            // it is copied (a huge one would not fit), something not an array is the wrong type
            const py::array arr = py::array::ensure(out);
            const char kind = arr ? arr.dtype().kind() : 'O';
            if (!py::isinstance<py::array>(out) && kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
                throw py::type_error(
                    "patch hook of '" + name + "' returned " + std::string(py::str(out.get_type().attr("__name__"))) +
                    ", not a numeric array (a hook returns the node's replacement, " + shape_str(shape) + ")");
            if (Shape(arr.shape(), arr.shape() + arr.ndim()) != shape)
                throw ShapeError("patch hook of '" + name + "' returned " +
                                 shape_str(Shape(arr.shape(), arr.shape() + arr.ndim())) + ", the node's output is " +
                                 shape_str(shape));
            return from_numpy(arr, dtype, "patch hook of '" + name + "'");
        } catch (py::error_already_set& e) {
            HookFailed failed;
            failed.error = std::make_shared<py::error_already_set>(std::move(e));
            throw failed;
        }
    };
}

/// Fills options.patches / hooks from {name: array or callable}.
void set_patches(const Graph& graph, RunOptions& options, const py::dict& patch, std::size_t max_bytes) {
    for (auto [k, v] : patch) {
        const std::string name = py::cast<std::string>(k);
        if (py::isinstance<py::function>(v))
            add_hook(graph, options, name,
                     make_hook(py::reinterpret_borrow<py::function>(v), graph.dtype(), name,
                               graph.value(patch_target(graph, name)).shape));
        else
            add_patch(graph, options, name, from_numpy(v, graph.dtype(), "patch " + name, max_bytes));
    }
}

RunResult run_released(const Graph& graph, RunOptions& options) {
    const interrupt::Scope scope;
    options.progress = scope.stoppable(std::move(options.progress));
    try {
        py::gil_scoped_release release;
        return attngraph::run(graph, options);
    } catch (HookFailed& failed) {
        failed.error->restore();
        throw py::error_already_set();
    } catch (const interrupt::Interrupted&) {
        interrupt::raise();
    }
}

PyResult run_graph(const GraphPtr& graph0, const py::dict& inputs, const py::object& trace, int threads,
                   const py::dict& patch, const std::optional<std::vector<std::string>>& tokens, bool keep_all,
                   std::optional<std::size_t> max_memory) {
    const std::size_t max_bytes = max_memory.value_or(default_max_memory());
    PyResult r;
    r.graph = with_inputs(graph0, inputs, max_bytes);
    if (tokens) check_tokens(*r.graph, *tokens, "tokens");
    RunOptions options;
    options.threads = threads;
    options.keep_all = keep_all;
    if (py::isinstance<py::bool_>(trace)) {
        options.trace = trace.cast<bool>();
    } else if (py::isinstance<py::str>(trace)) {
        options.trace = true;
        options.trace_only = {trace.cast<std::string>()};
    } else if (!trace.is_none()) {
        options.trace_only = trace.cast<std::vector<std::string>>();
        options.trace = !options.trace_only.empty();  // no globs keep nothing but the outputs
    }
    // as the CLI refuses them (cli/common.cpp, cmd_run.cpp) before anything is allocated
    check_memory(*r.graph, max_bytes, options.trace && options.trace_only.empty());
    set_patches(*r.graph, options, patch, max_bytes);
    r.patched = patched_names(*r.graph, options);
    r.result = run_released(*r.graph, options);
    r.only = options.trace_only;
    r.traced = options.trace;
    r.tokens = tokens ? *tokens : r.graph->tokens();
    if (!r.result.complete) throw Error("node '" + r.result.stopped_at + "' output has " + r.result.stop_reason);
    return r;
}

/// A run's result again from what `result_state` gave (a Trace unpickled): the graph, its
/// values by name, and how the run kept them.
PyResult result_from(const GraphPtr& graph, const py::dict& values, const std::vector<double>& seconds, bool traced,
                     const std::vector<std::string>& only, const std::vector<std::string>& tokens,
                     const std::vector<std::string>& patched, const std::vector<std::string>& shared) {
    PyResult r;
    r.graph = graph;
    r.result.values.resize(graph->values().size());
    for (const std::string& name : shared) {  // the graph's own tensors, as the run kept them
        const int id = graph->at(name);
        if (!graph->value(id).data)
            throw GraphError("trace value " + name + ": graph '" + graph->name() + "' holds no tensor of that name");
        r.result.values[static_cast<std::size_t>(id)] = graph->value(id).data;
    }
    for (auto [k, v] : values) {
        const std::string name = py::cast<std::string>(k);
        const int id = graph->at(name);
        Tensor t = from_numpy(v, graph->dtype(), "trace value " + name);
        if (t.shape() != graph->value(id).shape)
            throw ShapeError("trace value " + name + " is " + shape_str(t.shape()) + ", the graph's is " +
                             shape_str(graph->value(id).shape));
        r.result.values[static_cast<std::size_t>(id)] = std::make_shared<const Tensor>(std::move(t));
    }
    r.result.seconds = seconds;
    r.result.seconds.resize(graph->nodes().size());
    r.traced = traced;
    r.only = only;
    r.tokens = tokens;
    r.patched = std::set<std::string>(patched.begin(), patched.end());
    return r;
}

/// What result_from needs to make `r` again: every value the run kept, by name (those that
/// are the graph's own tensors by name only: the pickled graph holds them), and the rest.
py::tuple result_state(const PyResult& r) {
    py::dict values;
    std::vector<std::string> shared;
    for (std::size_t id = 0; id < r.result.values.size(); ++id) {
        const auto& v = r.result.values[id];
        const ValueInfo& info = r.graph->values()[id];
        if (!v) continue;
        if (v == info.data)
            shared.push_back(info.name);
        else
            values[py::str(info.name)] = to_numpy(v);
    }
    return py::make_tuple(r.graph, values, r.result.seconds, r.traced, r.only, r.tokens,
                          std::vector<std::string>(r.patched.begin(), r.patched.end()), shared);
}

py::array result_get(const PyResult& r, const std::string& name) {
    const int id = r.graph->find(name);
    if (id < 0) throw py::key_error("graph '" + r.graph->name() + "' has no value named '" + name + "'");
    const auto& v = r.result.values[static_cast<std::size_t>(id)];
    if (!v)
        throw py::key_error("value '" + name + "' was not kept by this run (run with trace=True or trace=['" + name +
                            "'])");
    return to_numpy(v);
}

std::vector<std::string> result_names(const PyResult& r) {
    std::vector<std::string> names;
    if (r.traced)
        for (const auto& e : r.trace().entries) names.push_back(e.name);
    for (int id : r.graph->outputs())
        if (std::find(names.begin(), names.end(), r.graph->value(id).name) == names.end())
            names.push_back(r.graph->value(id).name);
    return names;
}

fs::path temp_dir(const std::string& what) {
    static int counter = 0;
    return fs::temp_directory_path() /
           ("attngraph-py-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
}

std::string result_report(const PyResult& r, std::size_t max_side) {
    const fs::path dir = temp_dir("report");
    struct Cleanup {
        fs::path p;
        ~Cleanup() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } cleanup{dir};
    write_trace(r.trace(), dir, TraceFormat::npy, false);
    inspect::ReportOptions options;
    options.max_side = max_side;
    return inspect::report_html(inspect::TraceDir(dir), options);
}

// ---- gradients ------------------------------------------------------------------------------

struct PyGrad {
    PyResult forward;
    std::shared_ptr<Gradients> grads;
};

PyGrad grad_graph(const GraphPtr& graph0, const py::dict& inputs, const std::vector<std::string>& wrt,
                  const py::dict& output_grads, const py::dict& patch, int threads,
                  const std::optional<std::vector<std::string>>& tokens, std::optional<std::size_t> max_memory) {
    const std::size_t max_bytes = max_memory.value_or(default_max_memory());
    PyGrad out;
    GraphPtr graph = with_inputs(graph0, inputs, max_bytes);
    if (tokens) check_tokens(*graph, *tokens, "tokens");
    check_memory(*graph, max_bytes);  // as `attngraph grad` does
    if (!patch.empty()) {
        // the patched values as the patched run computes them, then frozen as constants
        PyResult patched = run_graph(graph, {}, py::bool_(false), threads, patch, tokens, true, max_bytes);
        std::map<std::string, Tensor> frozen;
        for (const auto& name : patched.patched)
            frozen[name] = *patched.result.values[static_cast<std::size_t>(graph->at(name))];
        graph = std::make_shared<Graph>(freeze_values(*graph, frozen));
        out.forward.patched = patched.patched;
    }
    std::map<std::string, Tensor> gs;
    for (auto [k, v] : output_grads) {
        const std::string name = py::cast<std::string>(k);
        gs[name] = from_numpy(v, graph->dtype(), "output_grads " + name, max_bytes);
    }
    RunOptions options;
    options.threads = threads;
    options.keep_all = true;
    BackwardOptions bo;
    bo.wrt = wrt;
    bo.threads = threads;
    out.forward.graph = graph;
    out.forward.tokens = tokens ? *tokens : graph->tokens();
    out.forward.traced = true;
    const interrupt::Scope scope;
    options.progress = scope.stoppable(std::move(options.progress));
    bo.progress = scope.stoppable(std::move(bo.progress));
    try {
        py::gil_scoped_release release;
        out.forward.result = attngraph::run(*graph, options);
        out.grads = std::make_shared<Gradients>(backward(*graph, out.forward.result, gs, bo));
    } catch (const interrupt::Interrupted&) {
        interrupt::raise();
    }
    return out;
}

/// Gradients again from their forward run and (name, gradient) pairs (Gradients unpickled).
PyGrad grad_from(const PyResult& forward, const py::list& grads) {
    PyGrad g;
    g.forward = forward;
    g.grads = std::make_shared<Gradients>();
    for (const auto& item : grads) {
        const auto pair = item.cast<py::tuple>();
        const std::string name = pair[0].cast<std::string>();
        const int id = forward.graph->at(name);
        Tensor t = from_numpy(pair[1], forward.graph->dtype(), "gradient " + name);
        if (t.shape() != forward.graph->value(id).shape)
            throw ShapeError("gradient " + name + " is " + shape_str(t.shape()) + ", the value is " +
                             shape_str(forward.graph->value(id).shape));
        g.grads->add(name, std::make_shared<const Tensor>(std::move(t)));
    }
    return g;
}

// ---- graphs ----------------------------------------------------------------------------------

std::string check_table(const Graph& graph) {
    std::string out;
    char line[512];
    auto add = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
        std::snprintf(line, sizeof line, "%-20s %-10s %-12s %s", a.c_str(), b.c_str(), c.c_str(), d.c_str());
        std::string l = line;
        while (!l.empty() && l.back() == ' ') l.pop_back();
        out += l + "\n";
    };
    out += "graph '" + graph.name() + "': " + to_string(graph.dtype()) + ", " + std::to_string(graph.nodes().size()) +
           " nodes, ok\n";
    add("name", "kind/op", "shape", "inputs");
    for (const auto& v : graph.values())
        if (v.data) add(v.name, to_string(v.kind), shape_str(v.shape), "");
    for (const auto& n : graph.nodes()) {
        std::string inputs;
        for (int id : n.inputs) inputs += (inputs.empty() ? "" : ", ") + graph.value(id).name;
        for (int id : n.outputs) add(graph.value(id).name, n.op->name, shape_str(graph.value(id).shape), inputs);
    }
    std::string outs;
    for (int id : graph.outputs()) outs += (outs.empty() ? "" : ", ") + graph.value(id).name;
    out += "outputs: " + outs + "\n";
    return out;
}

/// One row per value: name, kind, op, shape, inputs.
py::list node_rows(const Graph& graph) {
    py::list rows;
    for (const auto& v : graph.values()) {
        py::dict row;
        row["name"] = v.name;
        row["kind"] = to_string(v.kind);
        row["op"] = v.producer >= 0 ? graph.nodes()[static_cast<std::size_t>(v.producer)].op->name : "";
        row["shape"] = py::tuple(py::cast(v.shape));
        std::vector<std::string> inputs;
        if (v.producer >= 0)
            for (int id : graph.nodes()[static_cast<std::size_t>(v.producer)].inputs)
                inputs.push_back(graph.value(id).name);
        row["inputs"] = inputs;
        rows.append(row);
    }
    return rows;
}

std::vector<std::string> output_names(const Graph& g) {
    std::vector<std::string> names;
    for (int id : g.outputs()) names.push_back(g.value(id).name);
    return names;
}

/// Output shapes of `op` with attributes `attrs` (JSON text) on inputs of `shapes`.
std::vector<Shape> infer(const std::string& op, const std::string& attrs, const std::vector<Shape>& shapes,
                         const std::string& name, const std::vector<std::string>& operands) {
    const OpDef& def = OpRegistry::instance().get(op);
    const std::string where = "node '" + name + "' (" + op + ")";
    const nlohmann::json j = nlohmann::json::parse(attrs);
    const NodeAttrs a = def.parse_attrs(j, where);
    return def.infer_shapes_at(a, shapes, where, [&] {
        std::string text;
        for (std::size_t i = 0; i < operands.size() && i < shapes.size(); ++i)
            text += (i ? ", " : "") + operands[i] + " (" + shape_str(shapes[i]) + ")";
        return text;
    });
}

GraphPtr build(const std::string& name, const std::string& dtype, const std::vector<std::string>& tokens,
               const py::list& tensors, const py::list& nodes, const std::vector<std::string>& outputs) {
    const DType dt = parse_dtype(dtype);
    GraphBuilder b(name, dt);
    b.set_tokens(tokens);
    for (const auto& t : tensors) {
        const auto tup = t.cast<py::tuple>();
        const std::string tname = tup[0].cast<std::string>(), kind = tup[1].cast<std::string>();
        b.add_tensor(tname, kind == "input" ? ValueKind::input : ValueKind::param,
                     from_numpy(tup[2], dt, "tensor " + tname));
    }
    for (const auto& n : nodes) {
        const auto tup = n.cast<py::tuple>();
        const std::string nname = tup[0].cast<std::string>(), op = tup[1].cast<std::string>();
        const OpDef& def = OpRegistry::instance().get(op);
        const nlohmann::json j = nlohmann::json::parse(tup[3].cast<std::string>());
        b.add_node(nname, op, tup[2].cast<std::vector<std::string>>(),
                   def.parse_attrs(j, "node '" + nname + "' (" + op + ")"));
    }
    for (const auto& o : outputs) b.add_output(o);
    return std::make_shared<Graph>(b.build());
}

GraphPtr new_variant(const std::string& variant, std::size_t seq, std::size_t d_model, std::size_t heads,
                     std::size_t groups, std::size_t batch, std::size_t kv_seq, std::size_t window, bool causal,
                     const std::vector<int>& lengths, std::size_t past, std::optional<double> softcap,
                     std::size_t prefix_length, const std::vector<int>& documents, const std::string& dtype,
                     std::uint64_t seed, const std::string& name, const std::string& weights_from,
                     const std::string& prefix, std::optional<std::size_t> max_memory) {
    graphs::VariantConfig c;
    c.max_bytes = max_memory.value_or(default_max_memory());
    c.variant = variant;
    c.seq = seq;
    c.d_model = d_model;
    c.heads = heads;
    c.groups = groups;
    c.batch = batch;
    c.kv_seq = kv_seq;
    c.window = window;
    c.causal = causal;
    c.lengths = lengths;
    c.past = past;
    c.softcap = softcap;
    c.prefix_length = prefix_length;
    c.documents = documents;
    c.dtype = parse_dtype(dtype);
    c.seed = seed;
    c.name = name;
    Graph g = graphs::build_variant(c);
    if (!weights_from.empty()) g = graphs::with_weights_from(g, weights_from, prefix);
    return std::make_shared<Graph>(std::move(g));
}

/// An ONNX model imported in memory, as the CLI's commands read a GRAPH.onnx: the graph,
/// its (ONNX name, attngraph name) pairs and the importer's notes.
py::tuple load_onnx(const fs::path& path, std::optional<std::string> dtype, const py::dict& input_shapes,
                    bool allow_outside_paths, std::optional<std::size_t> max_memory) {
    LoadOptions options;
    if (dtype) options.dtype = parse_dtype(*dtype);
    options.allow_outside_paths = allow_outside_paths;
    options.max_bytes = max_memory.value_or(default_max_memory());
    ImportOptions io;
    io.dtype = options.dtype.value_or(DType::f32);
    io.max_bytes = options.max_bytes;
    for (auto [k, v] : input_shapes) io.input_shapes[py::cast<std::string>(k)] = py::cast<Shape>(v);
    ImportedModel model;
    {
        py::gil_scoped_release release;
        model = import_onnx(path, io);
    }
    auto graph = std::make_shared<Graph>(to_graph(model, path, options));
    return py::make_tuple(graph, model.names, model.notes);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "attngraph's compiled core; use the attngraph package";
    interrupt::main_thread =
        py::cast<unsigned long>(py::module_::import("threading").attr("main_thread")().attr("ident"));

    static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
    static py::exception<GraphError> graph_error(m, "GraphError", error.ptr());
    static py::exception<ShapeError> shape_error(m, "ShapeError", error.ptr());
    static py::exception<IoError> io_error(m, "IoError", error.ptr());
    // A message may quote a file's bytes (a binary file read as a graph): bytes that are not
    // UTF-8 are written as \xNN, where PyErr_SetString would raise the error without a message.
    static const auto raise = [](const py::object& type, const char* what) {
        py::object text =
            py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(what, std::strlen(what), "backslashreplace"));
        PyErr_SetObject(type.ptr(), text.ptr());
    };
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ShapeError& e) {
            raise(shape_error, e.what());
        } catch (const GraphError& e) {
            raise(graph_error, e.what());
        } catch (const IoError& e) {
            raise(io_error, e.what());
        } catch (const Error& e) {
            raise(error, e.what());
        }
    });

    py::class_<Graph, GraphPtr>(m, "Graph")
        .def_property_readonly("name", &Graph::name)
        .def_property_readonly("dtype", [](const Graph& g) { return to_string(g.dtype()); })
        .def_property_readonly("tokens", &Graph::tokens)
        .def_property_readonly("outputs", &output_names)
        .def_property_readonly("names",
                               [](const Graph& g) {
                                   std::vector<std::string> names;
                                   for (const auto& v : g.values()) names.push_back(v.name);
                                   return names;
                               })
        .def("shape",
             [](const Graph& g, const std::string& name) { return py::tuple(py::cast(g.value(g.at(name)).shape)); })
        .def("kind", [](const Graph& g, const std::string& name) { return to_string(g.value(g.at(name)).kind); })
        .def("tensor",
             [](const Graph& g, const std::string& name) {
                 const ValueInfo& v = g.value(g.at(name));
                 if (!v.data)
                     throw GraphError("'" + name + "' is a node output, not a tensor: run the graph to see it");
                 return to_numpy(v.data);
             })
        .def("check_table", &check_table)
        .def("rows", &node_rows)
        .def("to_json", [](const Graph& g) { return graph_to_json(g).dump(2); })
        // pickling: the graph file's text without values, and its tensors as arrays
        .def("state",
             [](const GraphPtr& g) {
                 py::dict tensors;
                 for (const ValueInfo& v : g->values())
                     if (v.data) tensors[py::str(v.name)] = to_numpy(v.data);
                 return py::make_tuple(graph_structure_json(*g).dump(), tensors);
             })
        .def("save",
             [](const Graph& g, const fs::path& path) {
                 const std::string text = graph_to_json(g).dump(2);
                 py::gil_scoped_release release;
                 write_file_atomically(path, text);
             })
        .def("with_dtype", [](const Graph& g, const std::string& d) {
            return std::make_shared<Graph>(g.with_dtype(parse_dtype(d)));
        });

    py::class_<PyResult>(m, "Result")
        .def("get", &result_get)
        .def_property_readonly("graph", [](const PyResult& r) { return r.graph; })
        .def_property_readonly("names", &result_names)
        .def_property_readonly("tokens", [](const PyResult& r) { return r.tokens; })
        .def_property_readonly(
            "patched", [](const PyResult& r) { return std::vector<std::string>(r.patched.begin(), r.patched.end()); })
        .def("seconds",
             [](const PyResult& r) {
                 py::dict d;
                 for (std::size_t i = 0; i < r.graph->nodes().size(); ++i)
                     d[py::str(r.graph->nodes()[i].name)] = r.result.seconds[i];
                 return d;
             })
        .def("save", [](const PyResult& r, const fs::path& dir, const std::string& format,
                        bool force) { write_trace(r.trace(), dir, parse_trace_format(format), force); })
        .def("state", &result_state)
        .def("text", [](const PyResult& r) { return trace_text(r.trace()); })
        .def("report", &result_report);

    py::class_<PyGrad>(m, "GradResult")
        .def_property_readonly("forward", [](const PyGrad& g) { return g.forward; })
        .def_property_readonly("names", [](const PyGrad& g) { return g.grads->names(); })
        .def(
            "get",
            [](const PyGrad& g, const std::string& name) {
                if (!g.grads->contains(name))
                    throw py::key_error("no gradient of '" + name + "' (not requested with wrt=, or not in the graph)");
                return to_numpy(std::make_shared<const Tensor>(g.grads->at(name)));
            })
        .def("state",
             [](const PyGrad& g) {
                 py::list grads;
                 for (const auto& name : g.grads->names())
                     grads.append(py::make_tuple(name, to_numpy(std::make_shared<const Tensor>(g.grads->at(name)))));
                 return grads;
             })
        .def("save", [](const PyGrad& g, const fs::path& dir, bool force) {
            write_grad_trace(g.forward.trace(), *g.grads, "L = sum(G * outputs)", dir, force);
        });

    m.def(
        "load",
        [](const fs::path& path, std::optional<std::string> dtype, bool allow_outside_paths,
           std::optional<std::size_t> max_memory) {
            LoadOptions o;
            if (dtype) o.dtype = parse_dtype(*dtype);
            o.allow_outside_paths = allow_outside_paths;
            o.max_bytes = max_memory.value_or(default_max_memory());  // as the CLI's --max-memory
            return std::make_shared<Graph>(load_graph(path, o));
        },
        py::arg("path"), py::arg("dtype") = std::nullopt, py::arg("allow_outside_paths") = false,
        py::arg("max_memory") = std::nullopt);
    m.def("load_onnx", &load_onnx, py::arg("path"), py::arg("dtype") = std::nullopt,
          py::arg("input_shapes") = py::dict(), py::arg("allow_outside_paths") = false,
          py::arg("max_memory") = std::nullopt);
    m.def(
        "parse",
        [](const std::string& text, const fs::path& base_dir) {
            return std::make_shared<Graph>(parse_graph(text, base_dir, "graph"));
        },
        py::arg("text"), py::arg("base_dir") = fs::path("."));
    m.def("run", &run_graph, py::arg("graph"), py::arg("inputs"), py::arg("trace"), py::arg("threads"),
          py::arg("patch"), py::arg("tokens"), py::arg("keep_all") = false, py::arg("max_memory") = std::nullopt);
    m.def("grad", &grad_graph, py::arg("graph"), py::arg("inputs"), py::arg("wrt"), py::arg("output_grads"),
          py::arg("patch"), py::arg("threads"), py::arg("tokens"), py::arg("max_memory") = std::nullopt);
    m.def("graph_from_state", [](const std::string& text, const py::dict& tensors) {
        const nlohmann::json doc = nlohmann::json::parse(text);
        const DType dtype = parse_dtype(doc.at("dtype").get<std::string>());
        std::map<std::string, Tensor> supplied;
        for (auto [k, v] : tensors) {
            const std::string name = py::cast<std::string>(k);
            supplied[name] = from_numpy(v, dtype, "tensor " + name);
        }
        return std::make_shared<Graph>(graph_from_document(doc, ".", "pickled graph", {}, supplied));
    });
    m.def("result_from", &result_from);
    m.def("grad_from", &grad_from);
    m.def("default_max_memory", &default_max_memory);
    m.def("release_memory", [] {
        const std::size_t bytes = buffer_pool_stats().bytes;
        release_buffer_pool();
        return bytes;
    });
    m.def("infer", &infer);
    m.def("build", &build);
    m.def("new_variant", &new_variant);
    m.def("variants", [] {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& v : graphs::variant_list()) out.emplace_back(v.name, v.description);
        return out;
    });
}
