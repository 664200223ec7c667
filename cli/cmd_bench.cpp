// attngraph bench [--variant NAME] [--batch B] --seq N --d-model D --heads H [--threads T]
//                 [--groups G] [--window W] [--causal] [--past P] [--kv-seq M] [--kv-lengths L,..]
//                 [--reps R] [--trace none|memory] [--backward]
// attngraph bench --graph FILE.json|FILE.onnx [--input NAME=FILE.npy]... [--dtype f32|f64] [...]
// attngraph bench --gemm N [--threads T] [--reps R]
//   either form: [--blas CORE | --as-unknown-cpu]
// Builds an attention variant at the given sizes with seeded random weights, runs one
// warm-up and R timed runs, and prints one JSON line of timings.
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>

#include <tbb/task_arena.h>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "cli/progress.hpp"
#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/gemm.hpp"
#include "graphs/flex.hpp"
#include "graphs/mha.hpp"
#include "graphs/variants.hpp"

namespace attngraph::cli {

namespace {

struct BenchArgs {
    std::string variant = "mha";
    GraphArgs graph;  // --graph FILE (JSON or ONNX) instead of a variant
    // the sizes as `attngraph new` takes them; 0: not given
    graphs::VariantConfig sizes = [] {
        graphs::VariantConfig c;
        c.seq = c.d_model = c.heads = 0;
        return c;
    }();
    double softcap = 0;  // --softcap's value, when softcap_given
    bool softcap_given = false;
    std::size_t gemm = 0;
    int threads = 0;
    int reps = 5;
    std::string trace = "none";
    bool backward = false;
    bool plain = false;
    bool default_malloc = false;
    std::string blas;
    bool as_unknown_cpu = false;
};

/// The sizes a variant is built at (its `variant` field is set by the builder).
using BenchSizes = graphs::VariantConfig;

/// A benchmarkable graph: name -> builder. Add a variant with one line here.
struct BenchVariant {
    const char* name;
    const char* description;
    bool needs_sizes;
    std::function<Graph(const BenchSizes&)> build;
};

// Every variant of `attngraph new` (graphs/variants.hpp, graphs/flex.hpp), each refusing the
// options it takes no as `new` does, plus the seed graph.
const std::vector<BenchVariant>& bench_variants() {
    static const std::vector<BenchVariant> variants = [] {
        std::vector<BenchVariant> v = {
            {"mha", "per-head multi-head attention (graphs/mha.hpp)", true,
             [](BenchSizes c) {  // (`new`'s mha: graphs/mha.hpp's, and the options it takes no)
                 c.variant = "mha";
                 return graphs::build_variant(c);
             }},
            {"seed", "the seed document's graph (n=3, d_model=4, 2 heads; takes no sizes)", false,
             [](const BenchSizes& c) {
                 if (c.seq || c.d_model || c.heads || c.batch || c.kv_seq || c.groups || c.window || c.past ||
                     c.causal || !c.lengths.empty())
                     throw Error("bench: variant 'seed' takes no sizes (it is n=3, d_model=4, 2 heads)");
                 return graphs::build_mha(graphs::seed_mha_config(), graphs::seed_mha_weights());
             }},
        };
        for (const auto* list : {&graphs::variant_list(), &graphs::flex_list()})
            for (const auto& info : *list) {
                if (info.name == "mha") continue;
                v.push_back({info.name.c_str(), info.description.c_str(), true, [name = info.name](BenchSizes c) {
                                 c.variant = name;
                                 return graphs::build_variant(c);
                             }});
            }
        return v;
    }();
    return variants;
}

const BenchVariant& find_variant(const std::string& name) {
    std::string known;
    for (const auto& v : bench_variants()) {
        if (name == v.name) return v;
        known += (known.empty() ? "" : ", ") + std::string(v.name);
    }
    throw Error("bench: unknown variant '" + name + "' (known: " + known + ")");
}

/// The FLOPs of one forward run: each op's own count (2·m·n·k for the GEMMs of Linear and
/// MatMul nodes; the others count none).
double graph_flops(const Graph& g) {
    double flops = 0;
    std::vector<Shape> in, out;
    for (const Node& node : g.nodes()) {
        in.clear();
        out.clear();
        for (int id : node.inputs) in.push_back(g.value(id).shape);
        for (int id : node.outputs) out.push_back(g.value(id).shape);
        flops += node.op->flops(node.attrs, in, out);
    }
    return flops;
}

double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

struct Timings {
    double median_ms, min_ms;
};

Timings summarize(std::vector<double> seconds) {
    std::sort(seconds.begin(), seconds.end());
    const std::size_t n = seconds.size();
    const double median = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
    return {median * 1e3, seconds.front() * 1e3};
}

double rounded(double v, int digits) {
    const double p = std::pow(10.0, digits);
    return std::round(v * p) / p;
}

// v to `significant` digits: a slow run's GFLOP/s stays non-zero (0.0031, not 0.00)
double significant(double v, int digits) {
    if (v == 0 || !std::isfinite(v)) return v;
    return rounded(v, digits - static_cast<int>(std::ceil(std::log10(std::fabs(v)))));
}

// The BLAS kernel to time: --blas forces one, for every GEMM block (none on the engine's SIMD
// kernels), --as-unknown-cpu starts from Prescott (what OpenBLAS 0.3.21 runs on a CPU model
// it does not know) and lets the engine select.
void choose_blas_kernel(const BenchArgs& a) {
    if (!a.blas.empty() && !blas_use_kernel(a.blas))
        throw Error("bench: OpenBLAS cannot switch to kernel '" + a.blas + "' (running " + blas_kernel().name + ")");
    if (!a.blas.empty()) gemm_blocks_on_blas(true);
    if (a.as_unknown_cpu) {
        if (std::getenv("OPENBLAS_CORETYPE"))
            throw Error(
                "bench: --as-unknown-cpu selects the kernel as start-up does with OPENBLAS_CORETYPE unset; "
                "unset it for this command");
        if (!blas_use_kernel("Prescott"))
            throw Error("bench: OpenBLAS cannot switch kernels (not a DYNAMIC_ARCH build)");
        blas_select_kernel();
    }
}

// e.g. "SkylakeX (OpenBLAS), f32 op(A)·B on avx512 kernels"
std::string blas_text() {
    const BlasKernel k = blas_kernel();
    const std::string kernels = gemm_block_kernels();
    return k.name + " (" + k.chosen_by + ")" + (kernels.empty() ? "" : ", f32 op(A)·B on " + kernels + " kernels");
}

void bench_gemm(const BenchArgs& a) {
    const std::size_t n = a.gemm;
    const Tensor ta = graphs::random_tensor({n, n}, DType::f32, 11), tb = graphs::random_tensor({n, n}, DType::f32, 12);
    Array<float> c = Array<float>::from_shape({n, n});
    const float* pa = ta.as<float>().data();
    const float* pb = tb.as<float>().data();
    Executor executor(a.threads);  // resolves 0 to the core count
    tbb::task_arena arena(executor.threads());
    std::vector<double> seconds;
    Progress progress("bench");
    const auto runs = static_cast<std::size_t>(a.reps) + 1;
    arena.execute([&] {
        for (int r = 0; r <= a.reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            gemm<float>(false, false, n, n, n, 1.0f, pa, n, pb, n, 0.0f, c.data(), n);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0) seconds.push_back(s);  // run 0 is the warm-up
            progress.update("", static_cast<std::size_t>(r) + 1, runs, "runs");
        }
    });
    progress.finish();
    const Timings t = summarize(seconds);
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    nlohmann::ordered_json j;
    j["gemm"] = n;
    j["threads"] = executor.threads();
    j["blas"] = blas_text();
    j["median_ms"] = rounded(t.median_ms, 4);
    j["gflops"] = significant(flops / (t.median_ms * 1e-3) / 1e9, 4);
    std::cout << j.dump() << std::endl;
}

// Repeated runs in one process, as a server tracing every request makes them: glibc keeps
// the memory a run frees (up to 32 MB an array) for the next run, instead of returning it
// and page-faulting fresh zeroed pages in again.
void keep_freed_memory() {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

void bench_graph(const BenchArgs& a) {
    const bool from_file = !a.graph.graph.empty();
    const BenchVariant* variant = from_file ? nullptr : &find_variant(a.variant);
    if (variant && variant->needs_sizes && (a.sizes.seq == 0 || a.sizes.d_model == 0 || a.sizes.heads == 0))
        throw Error("bench: variant '" + a.variant + "' needs --seq, --d-model and --heads (each > 0)");
    if (!a.default_malloc) keep_freed_memory();
    BenchSizes sizes = a.sizes;
    if (a.softcap_given) sizes.softcap = a.softcap;
    const Graph graph = from_file ? load_with_inputs(a.graph) : variant->build(sizes);
    Executor executor(a.threads);
    RunOptions options;
    options.threads = executor.threads();
    options.trace = a.trace == "memory";
    options.optimize = !a.plain;
    options.keep_for_backward = a.backward;  // what backward reads: not the attention weights
    std::vector<std::string> wrt;   // the gradients a training step needs: X and the weights
    for (const ValueInfo& v : graph.values())
        if (v.kind != ValueKind::node) wrt.push_back(v.name);
    std::vector<double> seconds;
    Progress progress("bench");  // runs done: a per-node count would be called inside the timed runs
    const auto runs = static_cast<std::size_t>(a.reps) + 1;
    for (int r = 0; r <= a.reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        RunResult result = executor.run(graph, options);
        if (a.backward) executor.backward(graph, result, {}, wrt);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) seconds.push_back(s);
        progress.update("", static_cast<std::size_t>(r) + 1, runs, "runs");
    }
    progress.finish();
    const Timings t = summarize(seconds);
    nlohmann::ordered_json j;
    if (from_file) {
        j["graph"] = a.graph.graph;
        j["nodes"] = graph.nodes().size();
    } else {
        j["variant"] = a.variant;
        j["batch"] = a.sizes.batch;
        // the sizes the graph was built at (the seed ignores them); FlexAttention's examples
        // have Q (B, H, n, D) instead of X (.., n, d_model)
        const bool has_x = graph.find("X") >= 0;
        const Shape& x = graph.value(graph.at(has_x ? "X" : "Q")).shape;
        j["seq"] = x.end()[-2];
        j["d_model"] = has_x ? x.back() : x.end()[-3] * x.back();
        j["heads"] = variant->needs_sizes ? a.sizes.heads : 2;
    }
    j["threads"] = executor.threads();
    j["blas"] = blas_text();
    j["trace"] = a.trace;
    if (a.plain) j["plan"] = "plain";
    if (a.default_malloc) j["malloc"] = "default";
    if (a.backward) j["backward"] = true;
    j["median_ms"] = rounded(t.median_ms, 4);
    j["min_ms"] = rounded(t.min_ms, 4);
    // a GEMM's backward is two GEMMs of its size (dA and dB)
    j["gflops"] = significant((a.backward ? 3 : 1) * graph_flops(graph) / (t.median_ms * 1e-3) / 1e9, 4);
    j["peak_rss_mb"] = rounded(peak_rss_mb(), 1);
    std::cout << j.dump() << std::endl;
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto args = std::make_shared<BenchArgs>();
    CLI::App* cmd =
        app.add_subcommand("bench", "Time an attention variant (or the engine's GEMM) and print one JSON line");
    std::string variants;
    for (const auto& v : bench_variants())
        variants += std::string(variants.empty() ? "" : "; ") + v.name + ": " + v.description;
    auto* variant = cmd->add_option("--variant", args->variant, "Graph to time (" + variants + ")");
    auto* graph = cmd->add_option("--graph", args->graph.graph,
                                  "Instead: time this graph file or ONNX model (its input shapes from --input)");
    graph->excludes(variant);
    cmd->add_option("--input", args->graph.inputs, "With --graph: replace a tensor's data: NAME=FILE.npy (repeatable)")
        ->needs(graph)
        ->check(NameEqualsFile);
    cmd->add_option("--dtype", args->graph.dtype, "With --graph: compute in f32 or f64")
        ->check(CLI::IsMember({"f32", "f64"}))
        ->needs(graph);
    cmd->add_option("--groups", args->sizes.groups, "K/V heads of gqa, llama and decode (as attngraph new)");
    cmd->add_option("--window", args->sizes.window,
                    "Window width of sliding-window, softcap, sinks and flex/sliding-window (as attngraph new)");
    cmd->add_option("--past", args->sizes.past, "decode: cached keys/values before the new tokens (as attngraph new)");
    cmd->add_option("--kv-seq", args->sizes.kv_seq, "cross: length of the keys/values input C (as attngraph new)");
    cmd->add_flag("--causal", args->sizes.causal, "sliding-window, document, flex/document: causal (as attngraph new)");
    cmd->add_option("--softcap", args->softcap, "softcap: the cap c (as attngraph new; default 50)")
        ->each([args](const std::string&) { args->softcap_given = true; });
    cmd->add_option("--prefix-length", args->sizes.prefix_length, "prefix-lm: the prefix P (as attngraph new)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--documents", args->sizes.documents, "document: the document lengths L1,L2,.. (as attngraph new)")
        ->delimiter(',');
    cmd->add_option("--kv-lengths", args->sizes.lengths,
                    "Key padding: valid keys per sequence, comma-separated, needs --batch (as attngraph new)")
        ->delimiter(',');
    cmd->add_option("--batch", args->sizes.batch, "Sequences per batch (0: X is (n, d_model))");
    cmd->add_option("--seq", args->sizes.seq, "Sequence length n");
    cmd->add_option("--d-model", args->sizes.d_model, "Model width");
    cmd->add_option("--heads", args->sizes.heads, "Number of heads");
    cmd->add_option("--gemm", args->gemm, "Instead: time an N x N x N float32 GEMM through the engine's GEMM path")
        ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16));
    cmd->add_option("--threads", args->threads, "Worker threads (default 0: all cores)")->check(CLI::Range(0, 4096));
    cmd->add_option("--reps", args->reps, "Timed runs after one warm-up (default 5)")->check(CLI::Range(1, 10000000));
    cmd->add_option("--trace", args->trace, "none, or memory: keep every node's output as a traced run does")
        ->check(CLI::IsMember({"none", "memory"}));
    cmd->add_flag("--backward", args->backward,
                  "Time forward + backward (gradients of X and every weight; gflops counts 3x the forward GEMMs)");
    cmd->add_flag("--default-malloc", args->default_malloc,
                  "Leave glibc's malloc policy as is (by default bench keeps freed memory for the next run)");
    cmd->add_flag("--plain", args->plain, "Run one step per node, without the graph rewrites of engine/optimize.hpp");
    cmd->add_option("--blas", args->blas,
                    "Run this OpenBLAS kernel (an OPENBLAS_CORETYPE name, e.g. Prescott, Haswell, SkylakeX) for "
                    "every GEMM, the f32 op(A)·B products too");
    cmd->add_flag("--as-unknown-cpu", args->as_unknown_cpu,
                  "Start from Prescott, the kernel OpenBLAS 0.3.21 runs on a CPU it does not know, and let the "
                  "engine select the kernel as it does at start-up")
        ->excludes(cmd->get_option("--blas"));
    cmd->callback([args] {
        choose_blas_kernel(*args);
        if (args->gemm)
            bench_gemm(*args);
        else
            bench_graph(*args);
    });
}

}  // namespace attngraph::cli
