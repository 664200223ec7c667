#pragma once
// ONNX import: a model (onnx::ModelProto, read with the ONNX project's protobuf classes) becomes
// an attngraph graph file. Graph inputs become inputs, initializers params, graph outputs
// outputs; everything computable from constants and shapes alone is folded at import time
// (the graph's shapes are then fixed), the rest maps onto attngraph ops. docs/onnx.md lists
// the supported ops, the folding rules and the name mapping.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/graph_file.hpp"
#include "engine/tensor.hpp"

namespace attngraph {

/// @brief A tensor in ONNX terms: its element type (onnx::TensorProto::DataType), shape and
/// values (as double: every supported type but 64-bit integers beyond 2^53 fits exactly).
struct OnnxTensor {
    int elem_type = 1;
    std::vector<std::int64_t> shape;
    std::vector<double> values;
};

struct ImportOptions {
    /// graph input shapes by ONNX name, replacing (or completing) the model's
    std::map<std::string, Shape> input_shapes;
    /// graph inputs bound to constants (folded like initializers)
    std::map<std::string, OnnxTensor> constant_inputs;
    DType dtype = DType::f32;
    /// when non-zero, the largest tensor accepted, in bytes of `dtype` (checked before allocating)
    std::size_t max_bytes = 0;
};

/// @brief The imported graph and its ONNX -> attngraph name map.
struct ImportedModel {
    /// the graph file, except that its tensor entries carry no data: their values are in
    /// `tensors` (writing 100 MB of weights as JSON numbers and parsing them back is what made
    /// importing slow); to_graph() puts the two together
    nlohmann::json graph;
    /// every tensor entry's values (inputs as zeros), by attngraph name, in the import's dtype
    std::map<std::string, Tensor> tensors;
    /// (ONNX name, attngraph name) for every graph input, initializer kept as a param and node
    /// output computed by the graph, in the model's order; folded values are not listed
    std::vector<std::pair<std::string, std::string>> names;
    /// one-line remarks for the user ("float16 model runs in f32")
    std::vector<std::string> notes;
    /// graph inputs given another shape than the model declares ("the model declares input
    /// 'x' as (2x6x16), given (2x5x16)"), empty when none: every error of the import and of
    /// to_graph ends with it, since a torch export folds its shapes for the declared ones
    std::string reshaped_inputs;
};

/// @brief Imports a model; every error is an attngraph::Error whose message starts with the
/// model's path and names the node, op or value concerned.
ImportedModel import_onnx(const std::filesystem::path& model, const ImportOptions& options = {});

/// @brief The Graph of an imported model (`model` names it in errors); `options` as for a graph file.
Graph to_graph(const ImportedModel& imported, const std::filesystem::path& model, const LoadOptions& options = {});

/// @brief Reads a serialized onnx.TensorProto (a backend test's input_K.pb / output_K.pb).
OnnxTensor read_onnx_tensor(const std::filesystem::path& pb, std::string* name = nullptr);

/// @brief The ONNX name of every graph input and output of a model, in order.
std::pair<std::vector<std::string>, std::vector<std::string>> onnx_io_names(const std::filesystem::path& model);

/// @brief True for a path whose extension is ".onnx".
bool is_onnx_path(const std::filesystem::path& path);

/// @brief The attngraph name for an ONNX name: itself when valid, else '/' -> '.', other
/// characters -> '_', leading separators dropped ("/attn/MatMul_output_0" -> "attn.MatMul_output_0").
std::string sanitize_onnx_name(const std::string& onnx_name);

}  // namespace attngraph
