#pragma once
// What the attngraph subcommands share: graph loading with the common flags, --input
// parsing, and output printing.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/graph.hpp"
#include "engine/graph_file.hpp"

namespace attngraph::cli {

/// Flags every command that loads a graph takes.
struct GraphArgs {
    std::string graph;
    std::vector<std::string> inputs;   // NAME=FILE.npy
    std::string dtype;                 // "", f32, f64
    bool allow_outside_paths = false;
    std::string max_memory;            // "", "4G", "512M", bytes
    int threads = 0;
};

/// Adds GRAPH, --input, --dtype, --allow-outside-paths, --max-memory (and --threads if asked).
void add_graph_args(CLI::App& cmd, GraphArgs& args, bool with_threads = true);

/// Loads the graph and applies --dtype and --input replacements (shapes re-inferred).
Graph load_with_inputs(const GraphArgs& args);

/// --max-memory in bytes (default: half of the machine's memory).
std::size_t max_memory_bytes(const GraphArgs& args);

/// Parses "4G", "512M", "1000000" into bytes; throws attngraph::Error.
std::size_t parse_bytes(const std::string& text);

/// --only values may each hold comma-separated globs.
std::vector<std::string> split_globs(const std::vector<std::string>& values);

// One registration function per subcommand (cli/cmd_<name>.cpp).
void add_run_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_new_command(CLI::App& app);
void add_grad_command(CLI::App& app);
void add_dot_command(CLI::App& app);
void add_heatmap_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_diff_command(CLI::App& app);
void add_explain_command(CLI::App& app);

/// Writes `text` to `path` (through a temporary file renamed into place), or to stdout
/// when path is empty or "-"; throws IoError.
void write_output(const std::string& path, const std::string& text);
void add_bench_command(CLI::App& app);

}  // namespace attngraph::cli
