#pragma once
// What the attngraph subcommands share: graph loading with the common flags, --input
// parsing, and output printing.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/executor.hpp"
#include "engine/graph.hpp"
#include "engine/graph_file.hpp"

namespace attngraph::cli {

/// Flags every command that loads a graph takes.
struct GraphArgs {
    std::string graph;
    std::vector<std::string> inputs;  // NAME=FILE.npy
    std::string dtype;                // "", f32, f64
    bool allow_outside_paths = false;
    std::string max_memory;  // "", "4G", "512M", bytes
    int threads = 0;
};

/// Adds GRAPH, --input, --dtype, --allow-outside-paths, --max-memory (and --threads if asked).
void add_graph_args(CLI::App& cmd, GraphArgs& args, bool with_threads = true);

/// (ONNX name, attngraph name) pairs of an imported model.
using OnnxNames = std::vector<std::pair<std::string, std::string>>;

/// Loads the graph (a graph file, or an ONNX model imported in memory, its input shapes from
/// the --input files) and applies --dtype and --input replacements (shapes re-inferred).
/// `onnx_names` receives an imported model's name map.
Graph load_with_inputs(const GraphArgs& args, OnnxNames* onnx_names = nullptr);

/// run(graph, options), a ValueError from an op (an index out of range) prefixed with the
/// graph file, so that the one error line names file, node and op.
RunResult run_graph(const GraphArgs& args, const Graph& graph, const RunOptions& options);

/// --max-memory in bytes (default: half of the machine's memory).
std::size_t max_memory_bytes(const GraphArgs& args);

/// Parses "4G", "512M", "1000000" into bytes; throws attngraph::Error.
std::size_t parse_bytes(const std::string& text);

/// Refuses an empty value (`--trace ""` would write nothing and say nothing).
extern const CLI::Validator NonEmpty;
/// A finite number >= 0 (CLI::NonNegativeNumber lets NaN through).
extern const CLI::Validator FiniteNonNegative;

/// NAME=FILE with both sides non-empty (--input, --patch): a bad one is a bad command line.
extern const CLI::Validator NameEqualsFile;

/// --only values may each hold comma-separated globs.
std::vector<std::string> split_globs(const std::vector<std::string>& values);

/// --patch NODE=FILE.npy values into options.patches (engine/patch.hpp checks them).
void add_patches(const Graph& graph, RunOptions& options, const std::vector<std::string>& specs,
                 std::size_t max_elements);
/// --tokens a,b,c, or the graph's own tokens when empty.
std::vector<std::string> parse_tokens(const Graph& graph, const std::string& text);

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

void add_bench_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_export_command(CLI::App& app);

/// Writes `text` to `path` through a temporary sibling renamed into place (nothing is left at
/// `path` on failure), or to stdout when path is empty or "-"; throws IoError.
void write_output(const std::string& path, const std::string& text);

/// Before any work of `new` or `import`: refuses a graph file `out` that exists (unless
/// force) or is a directory, and a non-empty `weights_dir` (unless force); throws IoError.
void check_graph_output(const std::filesystem::path& out, const std::string& weights_dir, bool force);

/// The graph file document of `graph` for writing at `out`: tensors inline, or as .npy files
/// in `weights_dir` (written atomically; paths relative to out's folder); throws IoError.
nlohmann::json graph_document(const Graph& graph, const std::filesystem::path& out, const std::string& weights_dir,
                              bool force);

/// After writing `out` with its weights in `weights_dir`: a note on stderr when they are
/// outside out's folder (the graph then loads only with --allow-outside-paths).
void note_weights_outside(const std::filesystem::path& out, const std::string& weights_dir);

}  // namespace attngraph::cli
