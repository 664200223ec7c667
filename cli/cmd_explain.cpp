// attngraph explain GRAPH.json [--input NAME=FILE.npy]... [-o walk.md]: a step-by-step
// walkthrough in Markdown with LaTeX matrices, in the seed document's form.
#include "cli/common.hpp"
#include "engine/executor.hpp"
#include "inspect/explain.hpp"

namespace attngraph::cli {

namespace {
struct ExplainArgs {
    GraphArgs graph;
    std::string output;
    inspect::ExplainOptions options;
};
}  // namespace

void add_explain_command(CLI::App& app) {
    auto args = std::make_shared<ExplainArgs>();
    CLI::App* cmd = app.add_subcommand("explain", "Run a graph and write a Markdown/LaTeX walkthrough of every step");
    add_graph_args(*cmd, args->graph);
    cmd->add_option("-o,--output", args->output, "Write to this file instead of stdout");
    cmd->add_option("--max-side", args->options.max_side, "Elide matrix axes longer than this (default 12)")
        ->check(CLI::Range(3, 100000));
    cmd->callback([args] {
        const Graph graph = load_with_inputs(args->graph);
        RunOptions o;
        o.threads = args->graph.threads;
        o.keep_all = true;
        const RunResult result = run_graph(args->graph, graph, o);
        write_output(args->output, inspect::explain_markdown(graph, result, args->options));
    });
}

}  // namespace attngraph::cli
