// attngraph heatmap DIR --node NAME [--slice K] [--grad] -o FILE.svg: one traced matrix as an SVG heatmap.
#include "cli/common.hpp"
#include "engine/error.hpp"
#include "inspect/heatmap.hpp"

namespace attngraph::cli {

namespace {
struct HeatmapArgs {
    std::string trace_dir;
    std::string node;
    std::string output;
    std::size_t slice = 0;
    std::size_t max_side = 256;
    bool grad = false;
};
}  // namespace

void add_heatmap_command(CLI::App& app) {
    auto args = std::make_shared<HeatmapArgs>();
    CLI::App* cmd =
        app.add_subcommand("heatmap", "Draw one traced matrix as an SVG heatmap (token labels, values on hover)");
    cmd->add_option("trace", args->trace_dir, "Trace directory (written by run --trace)")->required();
    cmd->add_option("--node", args->node, "Name of the traced value")->required();
    cmd->add_option("-o,--output", args->output, "SVG file to write ('-' for stdout)")->required();
    cmd->add_option("--slice", args->slice, "For rank > 2: which 2-D slice of the flattened leading axes (default 0)");
    cmd->add_option("--max-side", args->max_side, "Max-pool larger matrices to this many blocks a side (default 256)")
        ->check(CLI::Range(1, 4096));
    cmd->add_flag("--grad", args->grad, "Draw the value's gradient instead (when the trace has one)");
    cmd->callback([args] {
        const inspect::TraceDir trace(args->trace_dir);
        const auto& entry = trace.at(args->node);
        Tensor t;
        if (args->grad) {
            auto g = trace.load_grad(entry);
            if (!g) throw IoError(args->trace_dir + ": the trace has no gradient of '" + args->node + "'");
            t = std::move(*g);
        } else {
            t = trace.load(entry);
        }
        inspect::MatrixView m;
        try {
            m = inspect::matrix_view(t, args->slice);
        } catch (const Error& e) {
            throw Error(args->trace_dir + ": '" + args->node + "': " + e.what());
        }
        inspect::HeatmapOptions o;
        o.title = (args->grad ? "d " : "") + args->node + (entry.op.empty() ? "" : " = " + entry.formula);
        o.row_labels = o.col_labels = trace.tokens();
        o.max_side = args->max_side;
        write_output(args->output, inspect::heatmap_svg(m, o));
    });
}

}  // namespace attngraph::cli
