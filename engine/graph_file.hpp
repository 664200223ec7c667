#pragma once
// Graph files: the JSON format of README.md ("Graph file format"), read into a Graph through
// GraphBuilder (so a file and C++ code give the same IR) and written back out.
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/graph.hpp"

namespace attngraph {

struct LoadOptions {
    std::optional<DType> dtype;            ///< overrides the file's "dtype"
    bool allow_outside_paths = false;      ///< let "npy" paths leave the graph file's folder
    std::size_t max_elements = std::size_t(1) << 31;  ///< largest tensor accepted (elements)
    /// when non-zero, the largest tensor accepted in bytes of the graph's dtype (replaces
    /// max_elements); every inferred node output is held to it too
    std::size_t max_bytes = 0;
};

/// @brief Reads and validates a graph file. Every error is a GraphError/ShapeError/IoError
/// whose message starts with the file's path.
Graph load_graph(const std::filesystem::path& path, const LoadOptions& options = {});

/// @brief Parses a graph from JSON text; `base_dir` resolves "npy" paths, `origin` names
/// the source in errors.
Graph parse_graph(const std::string& text, const std::filesystem::path& base_dir, const std::string& origin,
                  const LoadOptions& options = {});

/// @brief Builds a graph from a parsed graph document. A tensor entry without "data", "npy"
/// or "safetensors" takes its values from `supplied` (by name): an importer hands over its
/// weights this way instead of writing them out as JSON numbers.
Graph graph_from_document(const nlohmann::json& doc, const std::filesystem::path& base_dir, const std::string& origin,
                          const LoadOptions& options = {}, const std::map<std::string, Tensor>& supplied = {});

/// @brief The graph as a graph file: tensors inline as "data" (or, with weights_dir, written
/// there as .npy and referenced relative to graph_dir).
nlohmann::json graph_to_json(const Graph& graph, const std::filesystem::path& weights_dir = {},
                             const std::filesystem::path& graph_dir = {});
/// @brief graph_to_json without the tensors' values (each a "kind" and "shape"), for
/// graph_from_document to take them from `supplied` (the Python module pickles graphs so).
nlohmann::json graph_structure_json(const Graph& graph);

/// @brief Nested lists of numbers for a tensor (row-major), as in a graph file's "data".
nlohmann::json tensor_to_json(const Tensor& tensor);

}  // namespace attngraph
