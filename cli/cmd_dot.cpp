// attngraph dot GRAPH.json [--trace DIR] [--hide-params] [-o FILE]: the graph as Graphviz DOT.
#include <optional>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "inspect/dot.hpp"

namespace attngraph::cli {

namespace {
struct DotArgs {
    GraphArgs graph;
    std::string trace_dir;
    std::string output;
    bool hide_params = false;
};
}  // namespace

void add_dot_command(CLI::App& app) {
    auto args = std::make_shared<DotArgs>();
    CLI::App* cmd =
        app.add_subcommand("dot", "Write the graph as Graphviz DOT (clusters per head, wall times from a trace)");
    add_graph_args(*cmd, args->graph, false);
    cmd->add_option("--trace", args->trace_dir, "A trace directory of this graph: label nodes with their wall time")
        ->check(NonEmpty);
    cmd->add_flag("--hide-params", args->hide_params, "Leave the param tensors (weights, biases) out");
    cmd->add_option("-o,--output", args->output, "Write to this file instead of stdout");
    cmd->callback([args] {
        const Graph graph = load_with_inputs(args->graph);
        std::optional<inspect::TraceDir> trace;
        if (!args->trace_dir.empty()) trace.emplace(args->trace_dir);
        if (trace && trace->has_manifest() && trace->graph() != graph.name())  // its times would label other nodes
            throw Error(args->trace_dir + ": a trace of graph '" + trace->graph() + "', not of " + args->graph.graph +
                        " ('" + graph.name() + "')");
        inspect::DotOptions o;
        o.trace = trace ? &*trace : nullptr;
        o.hide_params = args->hide_params;
        write_output(args->output, inspect::graph_dot(graph, o));
    });
}

}  // namespace attngraph::cli
