#pragma once
// ONNX export: a loaded Graph becomes an ONNX model (opset 23) of primitive ONNX ops, written
// with the ONNX project's protobuf classes. docs/onnx.md lists the mapping.
#include <filesystem>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief Writes `graph` to `path` as an ONNX model: inputs become graph inputs, params
/// initializers, outputs graph outputs, every value keeps its name. Throws GraphError naming
/// the node for an op without an ONNX mapping, IoError when the file cannot be written.
void export_onnx(const Graph& graph, const std::filesystem::path& path);

}  // namespace attngraph
