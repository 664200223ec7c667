// libFuzzer target: bytes -> an .onnx file -> import_onnx -> parse_graph. Anything but a typed
// attngraph::Error is a finding. (The importer reads a path, as external data is resolved
// relative to the model's folder: each input is written to a file of this process first.)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/error.hpp"
#include "engine/graph_file.hpp"
#include "onnx/import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("attngraph-fuzz-onnx-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    const auto model = dir / "model.onnx";
    {
        std::ofstream out(model, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
        attngraph::ImportOptions options;
        options.max_bytes = std::size_t(1) << 24;
        const auto imported = attngraph::import_onnx(model, options);
        attngraph::LoadOptions load;
        load.max_bytes = std::size_t(1) << 24;
        attngraph::to_graph(imported, model, load);
    } catch (const attngraph::Error&) {
    }
    return 0;
}
