#pragma once
// ONNX export: a loaded Graph becomes an ONNX model (opset 23) of primitive ONNX ops, written
// with the ONNX project's protobuf classes. docs/onnx.md lists the mapping.
#include <filesystem>
#include <string>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief Writes `graph` to `path` as an ONNX model: inputs become graph inputs, params
/// initializers, outputs graph outputs, every value keeps its name. Throws GraphError naming
/// the node (after `source`, the graph's file, or else the graph's name) for an op or a dtype
/// without an ONNX mapping, IoError when the file cannot be written. The file is written
/// atomically (write_file_atomically): `path` is complete or untouched.
void export_onnx(const Graph& graph, const std::filesystem::path& path, const std::string& source = "");

}  // namespace attngraph
