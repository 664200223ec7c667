// attngraph report DIR -o report.html: one self-contained HTML page of a trace.
#include "cli/common.hpp"
#include "cli/progress.hpp"
#include "inspect/report.hpp"

namespace attngraph::cli {

namespace {
struct ReportArgs {
    std::string trace_dir;
    std::string output;
    inspect::ReportOptions options;
};
}  // namespace

void add_report_command(CLI::App& app) {
    auto args = std::make_shared<ReportArgs>();
    CLI::App* cmd = app.add_subcommand(
        "report", "Write one self-contained HTML page of a trace: graph, heatmaps, stats, gradients, attention heads");
    cmd->add_option("trace", args->trace_dir, "Trace directory (written by run --trace)")->required();
    cmd->add_option("-o,--output", args->output, "HTML file to write")->required();
    cmd->add_option("--max-side", args->options.max_side,
                    "Embed matrices larger than this a side max-|x| pooled (default 256)")
        ->check(CLI::Range(8, 4096));
    cmd->callback([args] {
        const inspect::TraceDir trace(args->trace_dir);
        Progress progress("report");
        inspect::ReportOptions options = args->options;
        options.progress = progress.callback("", "values");
        const std::string page = inspect::report_html(trace, options);
        progress.finish();
        write_output(args->output, page);
    });
}

}  // namespace attngraph::cli
