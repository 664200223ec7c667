// attngraph run GRAPH.json [--input NAME=FILE.npy]... [--trace DIR] [--format npy|text|json]
//                          [--only GLOB] [--threads N] [--dtype f32|f64] [--force] [--check-finite]
#include <iostream>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
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
};
}  // namespace

void add_run_command(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    CLI::App* cmd = app.add_subcommand("run", "Run a graph, print its outputs, optionally write its trace");
    add_graph_args(*cmd, args->graph);
    cmd->add_option("--trace", args->trace_dir, "Write the trace of every node to this directory");
    cmd->add_option("--format", args->format, "Trace format: npy (default), text or json")
        ->check(CLI::IsMember({"npy", "text", "json"}));
    cmd->add_option("--only", args->only, "Trace only names matching these globs (comma-separated or repeated)");
    cmd->add_flag("--force", args->force, "Replace an existing non-empty trace directory");
    cmd->add_flag("--check-finite", args->check_finite,
                  "Stop at the first node whose output holds NaN or Inf (the partial trace is kept, marked incomplete)");
    cmd->callback([args] {
        const TraceFormat format = parse_trace_format(args->format);
        if (!args->trace_dir.empty()) check_output_dir(args->trace_dir, args->force);
        const Graph graph = load_with_inputs(args->graph);
        if (!args->trace_dir.empty() && split_globs(args->only).empty())
            check_memory(graph, max_memory_bytes(args->graph), true);  // a full trace keeps every value
        RunOptions options;
        options.threads = args->graph.threads;
        options.trace = !args->trace_dir.empty();
        options.trace_only = split_globs(args->only);
        options.check_finite = args->check_finite;
        const RunResult result = run(graph, options);
        if (!args->trace_dir.empty()) write_trace(make_trace(graph, result, options.trace_only), args->trace_dir, format, args->force);
        if (!result.complete) {
            const Node* bad = nullptr;
            for (const auto& n : graph.nodes())
                if (n.name == result.stopped_at) bad = &n;
            throw Error(args->graph.graph + ": node '" + result.stopped_at + "' (" + (bad ? bad->op->name : "?") +
                        ") output has " + result.stop_reason +
                        (args->trace_dir.empty() ? ""
                                                 : "; partial trace in " + args->trace_dir + " (marked incomplete)"));
        }
        Trace outputs;
        outputs.tokens = graph.tokens();
        for (int id : graph.outputs()) {
            TraceEntry e;
            e.name = graph.value(id).name;
            e.kind = "output";
            e.shape = graph.value(id).shape;
            e.data = result.values[static_cast<std::size_t>(id)];
            std::cout << entry_text(outputs, e);
        }
        if (!args->trace_dir.empty()) std::cout << "trace written to " << args->trace_dir << "\n";
    });
}

}  // namespace attngraph::cli
