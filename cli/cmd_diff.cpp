// attngraph diff A B [--rtol R] [--atol A] [-q]: two traces (or a trace and a folder of .npy
// files) value by value in topological order; names the first value that diverges.
#include <cstdio>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "inspect/diff.hpp"

namespace attngraph::cli {

namespace {
struct DiffArgs {
    std::string a, b;
    inspect::DiffOptions options;
    bool quiet = false;  // acted on by main.cpp, as on every command
};

std::string err_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}
}  // namespace

void add_diff_command(CLI::App& app) {
    auto args = std::make_shared<DiffArgs>();
    CLI::App* cmd = app.add_subcommand("diff", "Compare two traces value by value; name the first that diverges");
    cmd->add_option("a", args->a, "Trace directory (or folder of NAME.npy files)")->required();
    cmd->add_option("b", args->b, "Trace directory (or folder of NAME.npy files) to compare against")->required();
    cmd->add_option("--rtol", args->options.rtol, "Relative tolerance (default 1e-5)")->check(FiniteNonNegative);
    cmd->add_option("--atol", args->options.atol, "Absolute tolerance (default 1e-6)")->check(FiniteNonNegative);
    // main.cpp acts on --quiet before parsing (standard output to /dev/null, as for every
    // command); declared here so that diff --help shows it
    cmd->add_flag("-q,--quiet", args->quiet,
                  "Print nothing but errors: the exit status, and the error line naming the first divergence");
    cmd->callback([args] {
        const inspect::TraceDir a(args->a), b(args->b);
        const inspect::DiffResult r = inspect::diff_traces(a, b, args->options);
        std::printf("%-24s %-13s %-12s %-12s %s\n", "name", "status", "max abs", "max rel", "shape");
        for (const auto& row : r.rows) {
            const bool compared = row.status == "ok" || row.status == "DIFFERS" || row.status == "SHAPE";
            std::string shape = shape_str(row.shape_a);
            if (row.status == "SHAPE") shape += " vs " + shape_str(row.shape_b);
            std::string status = row.status;
            if (row.status == "DIFFERS") status += " " + std::to_string(row.bad) + "/" + std::to_string(row.count);
            std::printf("%-24s %-13s %-12s %-12s %s\n", row.name.c_str(), status.c_str(),
                        compared ? err_text(row.max_abs).c_str() : "-", compared ? err_text(row.max_rel).c_str() : "-",
                        compared ? shape.c_str() : "");
        }
        if (r.compared == 0) throw Error("diff: " + args->a + " and " + args->b + " have no value name in common");
        if (r.first_divergent)
            throw Error("diff: " + std::to_string(r.divergent) + " of " + std::to_string(r.compared) +
                        " values differ beyond rtol " + err_text(args->options.rtol) + ", atol " +
                        err_text(args->options.atol) + "; first divergence at '" + *r.first_divergent + "'");
        std::printf("all %zu common values agree within rtol %s, atol %s\n", r.compared,
                    err_text(args->options.rtol).c_str(), err_text(args->options.atol).c_str());
        for (const auto* t : {&a, &b})  // a run that stopped early (--check-finite): what it lacks was not compared
            if (!t->complete())
                std::printf("note: %s is an incomplete trace: the values after its run stopped are not compared\n",
                            (t == &a ? args->a : args->b).c_str());
    });
}

}  // namespace attngraph::cli
