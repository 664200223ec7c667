// libFuzzer target: graph-file text -> parse_graph, and a run of what loads. Anything but a
// typed attngraph::Error (another exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace attngraph;
    const std::string text(reinterpret_cast<const char*>(data), size);
    LoadOptions options;
    options.max_bytes = std::size_t(1) << 16;  // every tensor and node output small, so runs stay fast
    try {
        const Graph graph = parse_graph(text, "/nonexistent/attngraph-fuzz", "fuzz.json", options);
        check_memory(graph, std::size_t(1) << 20, true);
        RunOptions run_options;
        run_options.threads = 1;
        run_options.check_finite = true;
        run(graph, run_options);
    } catch (const Error&) {
    }
    return 0;
}
