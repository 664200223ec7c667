#include "cli/common.hpp"

#include <climits>
#include <cmath>

#include "engine/error.hpp"
#include "engine/npy.hpp"
#include "onnx/import.hpp"

namespace attngraph::cli {

void add_graph_args(CLI::App& cmd, GraphArgs& args, bool with_threads) {
    cmd.add_option("graph", args.graph, "Graph file (JSON) or ONNX model (.onnx)")->required();
    cmd.add_option("--input", args.inputs, "Replace a tensor's data: NAME=FILE.npy (repeatable)")->check(NameEqualsFile);
    cmd.add_option("--dtype", args.dtype, "Compute in f32 or f64 (default: the graph file's dtype)")
        ->check(CLI::IsMember({"f32", "f64"}));
    cmd.add_flag("--allow-outside-paths", args.allow_outside_paths,
                 "Let \"npy\" and \"safetensors\" paths in the graph file leave the graph file's folder");
    cmd.add_option("--max-memory", args.max_memory,
                   "Refuse tensors larger than this (e.g. 4G; default: half of the machine's memory)");
    if (with_threads)
        cmd.add_option("--threads", args.threads, "Worker threads (default 0: all cores)")->check(CLI::Range(0, 4096));
}

std::size_t parse_bytes(const std::string& text) {
    std::size_t pos = 0;
    unsigned long long v = 0;
    try {
        v = std::stoull(text, &pos);
    } catch (const std::exception&) {
        throw Error("--max-memory: '" + text + "' is not a size (e.g. 4G, 512M)");
    }
    const std::string unit = text.substr(pos);
    unsigned long long mult = 1;
    if (unit == "" || unit == "B")
        mult = 1;
    else if (unit == "K" || unit == "KB")
        mult = 1ull << 10;
    else if (unit == "M" || unit == "MB")
        mult = 1ull << 20;
    else if (unit == "G" || unit == "GB")
        mult = 1ull << 30;
    else if (unit == "T" || unit == "TB")
        mult = 1ull << 40;
    else
        throw Error("--max-memory: unknown unit '" + unit + "' (use K, M, G or T)");
    if (text.find('-') != std::string::npos || v == 0 || v > ULLONG_MAX / mult)
        throw Error("--max-memory: '" + text + "' is not a size (e.g. 4G, 512M)");
    return static_cast<std::size_t>(v * mult);
}

std::size_t max_memory_bytes(const GraphArgs& args) {
    return args.max_memory.empty() ? default_max_memory() : parse_bytes(args.max_memory);
}

// Splits NAME=FILE.npy.
static std::pair<std::string, std::string> input_spec(const std::string& spec) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        throw Error("--input '" + spec + "': expected NAME=FILE.npy");
    return {spec.substr(0, eq), spec.substr(eq + 1)};
}

Graph load_with_inputs(const GraphArgs& args, OnnxNames* onnx_names) {
    LoadOptions options;
    if (!args.dtype.empty()) options.dtype = parse_dtype(args.dtype);
    options.allow_outside_paths = args.allow_outside_paths;
    const std::size_t max_bytes = max_memory_bytes(args);
    options.max_bytes = max_bytes;
    Graph graph;
    std::map<std::string, std::string> from_onnx;  // ONNX name -> attngraph name
    if (is_onnx_path(args.graph)) {
        // an ONNX model is imported in memory, its input shapes taken from the --input files
        ImportOptions io;
        io.dtype = options.dtype.value_or(DType::f32);
        io.max_bytes = max_bytes;
        for (const auto& spec : args.inputs) {
            const auto [name, file] = input_spec(spec);
            try {
                io.input_shapes[name] = load_npy(file, max_bytes / (io.dtype == DType::f32 ? 4 : 8), io.dtype).shape();
            } catch (const IoError& e) {
                throw IoError("--input " + spec + ": " + e.what());
            }
        }
        const ImportedModel model = import_onnx(args.graph, io);
        for (const auto& note : model.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
        graph = to_graph(model, args.graph, options);
        for (const auto& [o, a] : model.names) from_onnx.emplace(o, a);
        if (onnx_names) *onnx_names = model.names;
    } else {
        graph = load_graph(args.graph, options);
    }
    const std::size_t max_elements = max_bytes / (graph.dtype() == DType::f32 ? 4 : 8);
    std::map<std::string, Tensor> replacements;
    for (const auto& spec : args.inputs) {
        auto [name, file] = input_spec(spec);
        if (graph.find(name) < 0 && from_onnx.count(name)) name = from_onnx[name];
        if (graph.find(name) < 0)
            throw GraphError("--input " + name + ": graph '" + graph.name() + "' (" + args.graph +
                             ") has no tensor named '" + name + "'");
        try {
            replacements[name] = load_npy(file, max_elements, graph.dtype());
        } catch (const IoError& e) {
            throw IoError("--input " + spec + ": " + e.what());
        }
    }
    if (!replacements.empty()) {
        try {
            graph = graph.with_tensors(std::move(replacements));
            check_memory(graph, max_bytes);
        } catch (const ShapeError& e) {
            throw ShapeError(args.graph + " with --input: " + e.what());
        } catch (const GraphError& e) {
            throw GraphError(args.graph + " with --input: " + e.what());
        }
    }
    return graph;
}

RunResult run_graph(const GraphArgs& args, const Graph& graph, const RunOptions& options) {
    try {
        return run(graph, options);
    } catch (const ValueError& e) {
        throw ValueError(args.graph + ": " + e.what());
    }
}

const CLI::Validator NonEmpty(
    [](std::string& value) { return value.empty() ? std::string("an empty value names nothing") : std::string(); },
    "NONEMPTY");

const CLI::Validator FiniteNonNegative(
    [](std::string& value) {
        double v = 0;
        std::size_t used = 0;
        try {
            v = std::stod(value, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != value.size() || !std::isfinite(v) || v < 0) return "must be a finite number >= 0, not " + value;
        return std::string();
    },
    "FINITE>=0");

const CLI::Validator NameEqualsFile(
    [](std::string& value) {
        const auto eq = value.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == value.size())
            return "'" + value + "': expected NAME=FILE.npy";
        return std::string();
    },
    "NAME=FILE");

std::vector<std::string> split_globs(const std::vector<std::string>& values) {
    std::vector<std::string> out;
    for (const auto& v : values) {
        std::size_t start = 0;
        while (start <= v.size()) {
            const auto comma = v.find(',', start);
            const std::string part = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (!part.empty()) out.push_back(part);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    return out;
}

}  // namespace attngraph::cli
