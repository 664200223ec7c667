// attngraph run GRAPH.json [--input NAME=FILE.npy]... [--trace DIR] [--format npy|text|json]
//                          [--only GLOB] [--threads N] [--dtype f32|f64] [--force] [--check-finite]
//                          [--full] [--patch NODE=FILE.npy]... [--tokens a,b,c]
// An output of more than 1000 values prints summarised as numpy prints it, unless --full.
#include <iostream>

#include "cli/common.hpp"
#include "cli/progress.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/npy.hpp"
#include "engine/patch.hpp"
#include "engine/trace.hpp"

namespace attngraph::cli {

namespace {
struct RunArgs {
    GraphArgs graph;
    std::string trace_dir;
    std::string format = "npy";
    std::vector<std::string> only;
    bool force = false;
    bool check_finite = false;
    bool full = false;
    std::vector<std::string> patches;  // NODE=FILE.npy
    std::string tokens;                // a,b,c
};
}  // namespace

void add_patches(const Graph& graph, RunOptions& options, const std::vector<std::string>& specs,
                 std::size_t max_elements) {
    for (const auto& spec : specs) {
        const auto eq = spec.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
            throw Error("--patch '" + spec + "': expected NODE=FILE.npy");
        const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
        patch_target(graph, name);  // an unknown node or a tensor before reading the file
        Tensor value;
        try {
            value = load_npy(file, max_elements);
        } catch (const IoError& e) {
            throw IoError("--patch " + spec + ": " + e.what());
        }
        add_patch(graph, options, name, value, file);
    }
}

std::vector<std::string> parse_tokens(const Graph& graph, const std::string& text) {
    if (text.empty()) return graph.tokens();
    std::vector<std::string> tokens = split_globs({text});
    check_tokens(graph, tokens, "--tokens");
    return tokens;
}

void add_run_command(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    CLI::App* cmd = app.add_subcommand("run", "Run a graph, print its outputs, optionally write its trace");
    add_graph_args(*cmd, args->graph);
    cmd->add_option("--trace", args->trace_dir, "Write the trace of every node to this directory")->check(NonEmpty);
    cmd->add_option("--format", args->format, "Trace format: npy (default), text or json")
        ->check(CLI::IsMember({"npy", "text", "json"}));
    cmd->add_option("--only", args->only, "Trace only names matching these globs (comma-separated or repeated)");
    cmd->add_flag("--force", args->force, "Replace an existing non-empty trace directory");
    cmd->add_flag(
        "--check-finite", args->check_finite,
        "Stop at the first node whose output holds NaN or Inf (the partial trace is kept, marked incomplete)");
    cmd->add_flag("--full", args->full,
                  "Print every value of every output (by default an output of more than 1000 values is summarised: "
                  "shape, min/max/mean and its edge items; trace files always hold every value)");
    cmd->add_option(
        "--patch", args->patches,
        "Replace a node's output with a .npy file's values and recompute downstream: NODE=FILE.npy (repeatable)")
        ->check(NameEqualsFile);
    cmd->add_option("--tokens", args->tokens,
                    "Label the sequence axes with these tokens: a,b,c (default: the graph file's)");
    cmd->callback([args] {
        const TraceFormat format = parse_trace_format(args->format);
        if (!args->trace_dir.empty()) check_output_dir(args->trace_dir, args->force);
        OnnxNames onnx_names;
        const Graph graph = load_with_inputs(args->graph, &onnx_names);
        if (!args->trace_dir.empty() && split_globs(args->only).empty())
            check_memory(graph, max_memory_bytes(args->graph), true);  // a full trace keeps every value
        RunOptions options;
        options.threads = args->graph.threads;
        options.trace = !args->trace_dir.empty();
        options.trace_only = split_globs(args->only);
        options.check_finite = args->check_finite;
        add_patches(graph, options, args->patches, max_memory_bytes(args->graph) / 4);
        const std::vector<std::string> tokens = parse_tokens(graph, args->tokens);
        Progress progress("run");
        options.progress = progress.callback("", "nodes");
        const RunResult result = run_graph(args->graph, graph, options);
        progress.finish();
        if (!args->trace_dir.empty()) {
            Trace trace = make_trace(graph, result, options.trace_only);
            trace.tokens = tokens;
            mark_patched(trace, patched_names(graph, options));
            std::map<std::string, std::string> to_onnx;  // attngraph name -> its (first) ONNX name
            for (const auto& [onnx, ours] : onnx_names) to_onnx.emplace(ours, onnx);
            for (auto& e : trace.entries)
                if (const auto it = to_onnx.find(e.name); it != to_onnx.end()) e.onnx_name = it->second;
            write_trace(trace, args->trace_dir, format, args->force);
        }
        if (!result.complete) {
            const Node* bad = nullptr;
            for (const auto& n : graph.nodes())
                if (n.name == result.stopped_at) bad = &n;
            throw Error(
                args->graph.graph + ": node '" + result.stopped_at + "' (" + (bad ? bad->op->name : "?") +
                ") output has " + result.stop_reason +
                (args->trace_dir.empty() ? "" : "; partial trace in " + args->trace_dir + " (marked incomplete)"));
        }
        Trace outputs;
        outputs.tokens = tokens;
        for (int id : graph.outputs()) {
            TraceEntry e;
            e.name = graph.value(id).name;
            e.kind = "output";
            e.shape = graph.value(id).shape;
            e.data = result.values[static_cast<std::size_t>(id)];
            std::cout << (args->full ? entry_text(outputs, e) : entry_summary_text(outputs, e));
        }
        if (!args->trace_dir.empty()) std::cout << "trace written to " << args->trace_dir << "\n";
    });
}

}  // namespace attngraph::cli
