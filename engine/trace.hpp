#pragma once
// Traces: every traced value of a run with its op, inputs, formula, shape, dtype and wall
// time, and the three dumps: a directory of .npy files with manifest.json, readable text in
// the seed document's style, and JSON.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/executor.hpp"
#include "engine/graph.hpp"

namespace attngraph {

/// @brief One traced value.
struct TraceEntry {
    std::string name;
    std::string kind;                 ///< "input", "param" or "node"
    std::string op;                   ///< empty for input/param tensors
    std::vector<std::string> inputs;  ///< operand names (nodes only)
    std::string formula;              ///< "head1.Q (3x2) · head1.KT (2x3)" (nodes only)
    Shape shape;
    DType dtype = DType::f32;
    double seconds = 0;  ///< forward wall time (nodes only)
    std::shared_ptr<const Tensor> data;
    /// Softmax nodes: the rows (index without the softmax axis) whose every input was -inf
    /// (fully masked), which the softmax gives as all zeros.
    std::vector<Shape> fully_masked_rows;
    /// the value's name in the model it was imported from (ONNX), when it came from one
    std::string onnx_name;
    /// The value was replaced by activation patching (RunOptions::patches/hooks).
    bool patched = false;
};

/// @brief The traced values of one run, leaf tensors first-use ordered before the nodes
/// that read them, nodes in topological order.
struct Trace {
    std::string graph;
    DType dtype = DType::f32;
    std::vector<std::string> tokens;
    std::vector<TraceEntry> entries;
    bool complete = true;  ///< false when the run stopped early
    std::string note;      ///< why it stopped, when it did

    const TraceEntry* find(const std::string& name) const;
};

/// @brief Refuses token labels that label nothing: `tokens` (given as `what`, e.g. "--tokens")
/// must have as many entries as some input's or node output's row or column axis (the axes
/// traces label), else ShapeError naming the count and the graph's inputs. Empty passes.
void check_tokens(const Graph& graph, const std::vector<std::string>& tokens, const std::string& what);

/// @brief The trace of a run: every value the run kept that matches `only` (empty: all).
Trace make_trace(const Graph& graph, const RunResult& result, const std::vector<std::string>& only = {});

enum class TraceFormat { npy, text, json };
TraceFormat parse_trace_format(const std::string& text);  // throws Error

/// "head1.S_raw = head1.Q (3x2) · head1.KT (2x3)" header plus the matrix to 6 decimals,
/// rows and columns labelled with the tokens where an axis is the sequence.
std::string trace_text(const Trace& trace);
std::string entry_text(const Trace& trace, const TraceEntry& entry);
/// Values above which entry_summary_text summarises (numpy's print threshold).
constexpr std::size_t summary_threshold = 1000;
/// @brief entry_text when the entry holds at most `threshold` values; else, as numpy prints
/// a large array, the header, shape, min/max/mean and the `edge` first and last items of
/// every axis with "..." between them.
std::string entry_summary_text(const Trace& trace, const TraceEntry& entry, std::size_t threshold = summary_threshold,
                               std::size_t edge = 3);
/// The whole trace as JSON, values as nested lists.
nlohmann::json trace_json(const Trace& trace);
/// manifest.json: one record per entry with its file name, no values.
nlohmann::json trace_manifest(const Trace& trace, TraceFormat format);

/// @brief Writes the trace into `dir` atomically: everything goes to a temporary sibling
/// directory renamed into place when complete. An existing non-empty `dir` is refused
/// (IoError) unless `force`. Format npy: manifest.json + <name>.npy per entry; text:
/// manifest.json + trace.txt; json: manifest.json + trace.json.
void write_trace(const Trace& trace, const std::filesystem::path& dir, TraceFormat format, bool force);

/// @brief Creates `dir` atomically from `fill(tmp)`, which writes into a temporary sibling
/// directory; refuses a non-empty existing `dir` unless `force`. Used by every command
/// that writes a directory of results.
void write_directory_atomically(const std::filesystem::path& dir, bool force,
                                const std::function<void(const std::filesystem::path&)>& fill);

/// @brief Writes `bytes` to the file `path` atomically: into a hidden sibling
/// `.NAME.tmp-PID-N` (created exclusively, never through a symlink) renamed onto `path` when
/// complete, removed on any failure. A temporary left by a killed process is removed by the
/// next write of `path`. Throws IoError naming `path`.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

/// Refuses (IoError) a non-empty existing `dir` unless `force`: call before running.
void check_output_dir(const std::filesystem::path& dir, bool force);

}  // namespace attngraph
