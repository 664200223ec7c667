// attngraph import MODEL.onnx -o GRAPH.json [--weights-dir DIR] [--force] [--input NAME=FILE.npy]...
// writes the graph file an ONNX model imports to (onnx/import.hpp; docs/onnx.md).
#include <cstdio>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "engine/trace.hpp"
#include "onnx/import.hpp"

namespace attngraph::cli {

namespace fs = std::filesystem;

namespace {

struct ImportArgs {
    GraphArgs graph;
    std::string output;
    std::string weights_dir;
    bool force = false;
};

void run_import(const ImportArgs& a) {
    if (!is_onnx_path(a.graph.graph)) throw Error("import: " + a.graph.graph + " is not an .onnx file");
    const fs::path out = a.output;
    check_graph_output(out, a.weights_dir, a.force);
    OnnxNames names;
    const Graph graph = load_with_inputs(a.graph, &names);
    nlohmann::json doc = graph_document(graph, out, a.weights_dir, a.force);
    doc["description"] = "imported from " + fs::path(a.graph.graph).filename().string();
    write_output(out.string(), doc.dump(1) + "\n");
    std::printf("wrote %s: %zu nodes, %zu ONNX names mapped\n", out.string().c_str(), graph.nodes().size(),
                names.size());
    note_weights_outside(out, a.weights_dir);
}

}  // namespace

void add_import_command(CLI::App& app) {
    auto args = std::make_shared<ImportArgs>();
    CLI::App* cmd = app.add_subcommand("import", "Import an ONNX model (.onnx) as a graph file (docs/onnx.md)");
    add_graph_args(*cmd, args->graph, false);
    cmd->add_option("-o,--output", args->output, "Graph file to write")->required();
    cmd->add_option("--weights-dir", args->weights_dir, "Write the weights as .npy files here (default: inline)");
    cmd->add_flag("--force", args->force, "Replace an existing output file / non-empty weights directory");
    cmd->callback([args] { run_import(*args); });
}

}  // namespace attngraph::cli
