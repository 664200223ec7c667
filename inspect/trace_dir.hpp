#pragma once
// Reading a trace back: a directory written by `attngraph run --trace DIR` (manifest.json
// + one .npy per value, gradients under grad/ when the manifest lists them), or a plain
// folder of <name>.npy files such as one dumped from PyTorch.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.hpp"

namespace attngraph::inspect {

/// @brief One value of a trace directory, as its manifest records it.
struct TraceDirEntry {
    std::string name;
    std::string kind;  ///< "input", "param", "node" ("" without a manifest)
    std::string op;    ///< empty for tensors
    std::vector<std::string> inputs;
    std::string formula;
    Shape shape;
    std::optional<double> seconds;
    std::filesystem::path file;       ///< relative to the directory; empty: no data
    std::filesystem::path grad_file;  ///< relative; empty: no gradient
    nlohmann::json stats;             ///< null when the manifest has none
};

/// @brief A trace directory opened for reading; tensors are loaded on demand.
class TraceDir {
public:
    /// Opens DIR: reads DIR/manifest.json when present (only npy traces hold tensors),
    /// otherwise lists DIR/*.npy by name. Throws IoError naming the file on any defect.
    explicit TraceDir(const std::filesystem::path& dir);

    const std::filesystem::path& dir() const { return m_dir; }
    bool has_manifest() const { return m_has_manifest; }
    const std::string& graph() const { return m_graph; }
    const std::vector<std::string>& tokens() const { return m_tokens; }
    bool complete() const { return m_complete; }
    const std::string& note() const { return m_note; }
    /// Manifest order: tensors before the nodes that read them, nodes topologically.
    const std::vector<TraceDirEntry>& entries() const { return m_entries; }

    const TraceDirEntry* find(const std::string& name) const;
    /// Throws IoError "DIR: no traced value 'name' (traced: a, b, ...)".
    const TraceDirEntry& at(const std::string& name) const;
    /// The value's data; throws IoError when the file is missing, unreadable or its shape
    /// disagrees with the manifest.
    Tensor load(const TraceDirEntry& entry) const;
    /// The value's gradient, when the trace has one.
    std::optional<Tensor> load_grad(const TraceDirEntry& entry) const;

private:
    void read_manifest(const std::filesystem::path& path);

    std::filesystem::path m_dir;
    bool m_has_manifest = false;
    std::string m_graph;
    std::vector<std::string> m_tokens;
    bool m_complete = true;
    std::string m_note;
    std::vector<TraceDirEntry> m_entries;
};

/// @brief The rows x cols matrix shown for a tensor: its last two axes (a vector is one
/// row, a scalar 1x1), slice `slice` of the leading axes flattened; a tensor without
/// elements one empty matrix (0 rows).
struct MatrixView {
    std::size_t rows = 1, cols = 1, slices = 1;
    std::size_t slice = 0;
    std::vector<double> values;  ///< rows*cols, row-major
};
/// Throws Error when `slice` is out of range.
MatrixView matrix_view(const Tensor& tensor, std::size_t slice = 0);

}  // namespace attngraph::inspect
