// attngraph: run, check and inspect attention graphs. Every subcommand lives in
// cli/cmd_<name>.cpp; errors become one line "error: ..." on stderr and a non-zero exit.
#include <cstdio>
#include <iostream>
#include <new>
#include <string>

#include "cli/common.hpp"
#include "cli/progress.hpp"
#include "engine/error.hpp"

// An error is one line whatever it quotes (a node name or path with a newline in it).
static std::string one_line(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
            out += '?';
        else
            out += c;
    }
    return out;
}

int main(int argc, char** argv) {
    CLI::App app{"attngraph: attention as a compute graph, every intermediate matrix traced"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Help for every subcommand");
    // --quiet, before or after the subcommand: standard output goes to /dev/null, errors
    // still go to standard error. CLI11 may run a subcommand's callback before it reaches
    // a --quiet that falls through to this level (diff A B --quiet), so the words of the
    // command line are looked at before parsing; the flag is declared for --help and so
    // that CLI11 accepts it anywhere.
    app.fallthrough();
    bool quiet_flag = false;  // acted on by the scan below
    app.add_flag("-q,--quiet", quiet_flag, "Print nothing but errors (on every command)");
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "--") break;
        if (word == "-q" || word == "--quiet") {
            attngraph::cli::disable_progress();
            if (!std::freopen("/dev/null", "w", stdout)) std::cout.setstate(std::ios::badbit);
            break;
        }
    }
    attngraph::cli::add_run_command(app);
    attngraph::cli::add_check_command(app);
    attngraph::cli::add_new_command(app);
    attngraph::cli::add_grad_command(app);
    attngraph::cli::add_dot_command(app);
    attngraph::cli::add_heatmap_command(app);
    attngraph::cli::add_report_command(app);
    attngraph::cli::add_diff_command(app);
    attngraph::cli::add_explain_command(app);
    attngraph::cli::add_bench_command(app);
    attngraph::cli::add_import_command(app);
    attngraph::cli::add_export_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "error: " << one_line(e.what()) << " (see attngraph --help)\n";
        return 2;
    } catch (const attngraph::Error& e) {
        std::cerr << "error: " << one_line(e.what()) << "\n";
        return 1;
    } catch (const std::bad_alloc&) {
        std::cerr << "error: out of memory\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "error: internal: " << one_line(e.what()) << "\n";
        return 3;
    }
    return 0;
}
