// Writing a command's result: a file or stdout, and the graph files of `new` and `import`.
#include <cstdio>
#include <iostream>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "engine/trace.hpp"

namespace attngraph::cli {

namespace fs = std::filesystem;

void write_output(const std::string& path, const std::string& text) {
    if (path.empty() || path == "-") {
        std::cout << text;
        return;
    }
    write_file_atomically(path, text);
}

void check_graph_output(const fs::path& out, const std::string& weights_dir, bool force) {
    std::error_code ec;
    if (fs::exists(out, ec) && !force) throw IoError(out.string() + ": exists (use --force to replace it)");
    if (fs::is_directory(out, ec)) throw IoError(out.string() + ": is a directory");
    if (!weights_dir.empty()) check_output_dir(weights_dir, force);
}

nlohmann::json graph_document(const Graph& graph, const fs::path& out, const std::string& weights_dir, bool force) {
    const fs::path graph_dir = fs::absolute(out).parent_path();
    std::error_code ec;
    if (!fs::is_directory(graph_dir, ec)) throw IoError(graph_dir.string() + ": no such directory");
    if (weights_dir.empty()) return graph_to_json(graph);
    nlohmann::json doc;
    const fs::path weights = fs::absolute(weights_dir).lexically_normal();
    write_directory_atomically(weights, force, [&](const fs::path& tmp) {
        doc = graph_to_json(graph, tmp, graph_dir);
        for (auto& [name, t] : doc["tensors"].items())
            if (t.contains("npy")) t["npy"] = fs::relative(weights / (name + ".npy"), graph_dir).generic_string();
    });
    return doc;
}

void note_weights_outside(const fs::path& out, const std::string& weights_dir) {
    if (weights_dir.empty()) return;
    const fs::path rel = fs::relative(fs::absolute(weights_dir), fs::absolute(out).parent_path());
    if (rel.empty() || *rel.begin() == "..")
        std::fprintf(stderr, "note: the weights are outside the graph file's folder: load it with --allow-outside-paths\n");
}

}  // namespace attngraph::cli
