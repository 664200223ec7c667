// attngraph new VARIANT [--batch B] --seq N [--kv-seq M] --d-model D --heads H [--groups G]
//                       [--window W] [--causal] [--kv-lengths L,..] [--softcap C] [--prefix-length P | --prefix P]
//                       [--documents L,..] [--seed S] [--dtype f32|f64] -o FILE.json [--weights-dir DIR] [--force]
//                       [--max-memory SIZE]
// attngraph new --list
// VARIANT is one of graphs::variant_list() or a FlexAttention example of graphs::flex_list() (flex/...).
#include <charconv>
#include <iostream>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "engine/trace.hpp"
#include "graphs/flex.hpp"
#include "graphs/variants.hpp"
#include "graphs/weights_from.hpp"

namespace attngraph::cli {

namespace fs = std::filesystem;

namespace {

struct NewArgs {
    std::string variant;
    bool list = false;
    graphs::VariantConfig config;
    std::vector<int> lengths;
    double softcap = 0;  // --softcap's value, when softcap_given
    bool softcap_given = false;
    std::string dtype = "f32";
    std::string output;
    std::string weights_dir;
    std::string weights_from, prefix;
    bool force = false;
    std::string max_memory;  // --max-memory (empty: default_max_memory())
};

// The command line that makes this graph again, stored as the file's "description".
std::string command_line(const NewArgs& a) {
    const auto& c = a.config;
    std::string s = "attngraph new " + a.variant;
    if (c.batch) s += " --batch " + std::to_string(c.batch);
    s += " --seq " + std::to_string(c.seq);
    if (c.kv_seq) s += " --kv-seq " + std::to_string(c.kv_seq);
    s += " --d-model " + std::to_string(c.d_model) + " --heads " + std::to_string(c.heads);
    if (c.groups) s += " --groups " + std::to_string(c.groups);
    if (c.window) s += " --window " + std::to_string(c.window);
    if (c.past) s += " --past " + std::to_string(c.past);
    if (c.causal) s += " --causal";
    auto list = [](const std::vector<int>& v) {
        std::string t;
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) t += ',';
            t += std::to_string(v[i]);
        }
        return t;
    };
    if (!c.lengths.empty()) s += " --kv-lengths " + list(c.lengths);
    if (c.softcap) {
        char buf[32];  // the shortest text that reads back as the same double
        const auto res = std::to_chars(buf, buf + sizeof buf, *c.softcap);
        s += " --softcap " + std::string(buf, res.ptr);
    }
    if (c.prefix_length) s += " --prefix-length " + std::to_string(c.prefix_length);
    if (!c.documents.empty()) s += " --documents " + list(c.documents);
    s += " --seed " + std::to_string(c.seed);
    if (a.dtype != "f32") s += " --dtype " + a.dtype;
    if (!a.weights_from.empty())
        s += " --weights-from " + a.weights_from + (a.prefix.empty() ? "" : " --prefix " + a.prefix);
    return s;
}

// f32 data written with the fewest digits that read back as the same float.
void shorten_f32(nlohmann::json& j) {
    if (j.is_array()) {
        for (auto& item : j) shorten_f32(item);
    } else if (j.is_number_float()) {
        char buf[32];
        const auto res = std::to_chars(buf, buf + sizeof buf, static_cast<float>(j.get<double>()));
        j = nlohmann::json::parse(std::string(buf, res.ptr));
    }
}

// The graph file as people read and edit it: description, name, dtype first; one line per
// tensor (in the order the builder made them) and per node, keys in the README's order.
std::string graph_file_text(const Graph& graph, const nlohmann::json& doc) {
    using ordered = nlohmann::ordered_json;
    auto pick = [](const nlohmann::json& obj, std::initializer_list<const char*> keys) {
        ordered o = ordered::object();
        for (const char* k : keys)
            if (obj.contains(k)) o[k] = ordered::parse(obj[k].dump());
        return o.dump();
    };
    std::string text = "{\n";
    for (const char* k : {"description", "name", "dtype", "tokens"})
        if (doc.contains(k)) text += "  \"" + std::string(k) + "\": " + doc[k].dump() + ",\n";
    text += "  \"tensors\": {\n";
    std::size_t i = 0;
    for (const auto& v : graph.values())
        if (v.data)
            text += "    " + nlohmann::json(v.name).dump() + ": " +
                    pick(doc["tensors"][v.name], {"kind", "shape", "npy", "data"}) +
                    (++i < doc["tensors"].size() ? ",\n" : "\n");
    text += "  },\n  \"nodes\": [\n";
    i = 0;
    for (const auto& n : doc["nodes"])
        text += "    " + pick(n, {"name", "op", "inputs", "attrs"}) + (++i < doc["nodes"].size() ? ",\n" : "\n");
    text += "  ],\n  \"outputs\": " + doc["outputs"].dump() + "\n}\n";
    return text;
}

void run_new(NewArgs& a) {
    if (a.list) {
        for (const auto& v : graphs::variant_list()) std::printf("%-22s %s\n", v.name.c_str(), v.description.c_str());
        std::printf("\nFlexAttention's examples (Q, K, V inputs (B, heads, seq, d_model / heads)):\n");
        for (const auto& v : graphs::flex_list()) std::printf("%-22s %s\n", v.name.c_str(), v.description.c_str());
        return;
    }
    if (a.variant.empty()) throw Error("new: name a VARIANT (attngraph new --list shows them)");
    if (a.output.empty()) throw Error("new: -o FILE.json is required");
    if (a.config.seq == 0) throw Error("new: --seq N (N >= 1) is required");
    if (a.config.d_model == 0) throw Error("new: --d-model D (D >= 1) is required");
    if (a.config.heads == 0) throw Error("new: --heads H (H >= 1) is required");
    a.config.variant = a.variant;
    a.config.lengths = a.lengths;
    if (!a.prefix.empty() && a.weights_from.empty()) {
        // without --weights-from, --prefix P is prefix-lm's prefix length (issue 12's spelling)
        std::size_t p = 0;
        const char* end = a.prefix.data() + a.prefix.size();
        const auto res = std::from_chars(a.prefix.data(), end, p);
        if (res.ec != std::errc() || res.ptr != end)
            throw Error("new: --prefix '" + a.prefix +
                        "': without --weights-from it is prefix-lm's prefix length P, a whole number");
        if (a.config.prefix_length != 0 && a.config.prefix_length != p)
            throw Error("new: --prefix " + a.prefix + " and --prefix-length " + std::to_string(a.config.prefix_length) +
                        " disagree");
        a.config.prefix_length = p;
    }
    if (a.softcap_given) a.config.softcap = a.softcap;
    a.config.dtype = parse_dtype(a.dtype);
    if (!a.max_memory.empty()) a.config.max_bytes = parse_bytes(a.max_memory);

    const fs::path out = a.output;
    check_graph_output(out, a.weights_dir, a.force);
    Graph graph = graphs::build_variant(a.config);
    if (!a.weights_from.empty()) graph = graphs::with_weights_from(graph, a.weights_from, a.prefix);
    nlohmann::json doc = graph_document(graph, out, a.weights_dir, a.force);
    doc["description"] = command_line(a);
    if (graph.dtype() == DType::f32)
        for (auto& [name, t] : doc["tensors"].items())
            if (t.contains("data")) shorten_f32(t["data"]);
    write_output(out.string(), graph_file_text(graph, doc));
    std::printf("wrote %s: variant %s, %zu nodes\n", out.string().c_str(), a.variant.c_str(), graph.nodes().size());
    note_weights_outside(out, a.weights_dir);
}

}  // namespace

void add_new_command(CLI::App& app) {
    auto args = std::make_shared<NewArgs>();
    auto& c = args->config;
    CLI::App* cmd = app.add_subcommand("new", "Write a graph file of an attention variant (attngraph new --list)");
    cmd->add_option("variant", args->variant,
                    "Variant: mha, mha-batched, causal, cross, mqa, gqa, sliding-window, alibi, decode, llama, "
                    "softcap, sinks, diff, prefix-lm, document, or a FlexAttention example flex/... (--list)");
    cmd->add_flag("--list", args->list, "List the variants");
    cmd->add_option("--batch", c.batch, "Batch size B (default 0: X is (n, d_model) without a batch axis)");
    cmd->add_option("--seq", c.seq, "Sequence length n (queries)");
    cmd->add_option("--kv-seq", c.kv_seq, "Length m of the keys/values input C (cross)");
    cmd->add_option("--d-model", c.d_model, "Model width d_model");
    cmd->add_option("--heads", c.heads, "Query heads h (d_model must be a multiple)");
    cmd->add_option("--groups", c.groups, "K/V heads g of gqa, llama and decode (heads must be a multiple)");
    cmd->add_option("--window", c.window,
                    "Window width w of sliding-window; softcap and sinks: also 0 <= i - j < w; flex/sliding-window: "
                    "i - j <= w");
    cmd->add_option("--past", c.past, "decode: cached keys/values before the new tokens (--seq of them)");
    cmd->add_flag("--causal", c.causal,
                  "sliding-window: keys 0 <= i - j < w only; document, flex/document: also keys j <= i");
    cmd->add_option("--softcap", args->softcap, "softcap: the cap c of c tanh(S / c) (default 50, Gemma 2's)")
        ->each([args](const std::string&) { args->softcap_given = true; });
    cmd->add_option("--prefix-length", c.prefix_length, "prefix-lm: the P first keys, seen by every query")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--documents", c.documents,
                    "document: the lengths of the documents packed into the sequence (comma-separated, sum = --seq)")
        ->delimiter(',');
    cmd->add_option("--kv-lengths", args->lengths,
                    "Key padding: valid keys per sequence (comma-separated, needs --batch)")
        ->delimiter(',');
    cmd->add_option("--seed", c.seed, "Seed of the random weights and inputs (default 1)");
    cmd->add_option("--dtype", args->dtype, "f32 (default) or f64")->check(CLI::IsMember({"f32", "f64"}));
    cmd->add_option("-o,--output", args->output, "Graph file to write");
    cmd->add_option("--weights-dir", args->weights_dir, "Write the tensors as .npy files into this directory");
    cmd->add_flag("--force", args->force, "Replace an existing output file / non-empty weights directory");
    cmd->add_option("--max-memory", args->max_memory,
                    "Refuse sizes whose random tensors need more than a quarter of this (e.g. 4G; default: half "
                    "of the machine's memory)");
    cmd->add_option(
        "--weights-from", args->weights_from,
        "Take the projections from a safetensors file (Hugging Face names: PREFIX{q,k,v,o}_proj.weight/.bias)");
    cmd->add_option("--prefix", args->prefix,
                    "Key prefix in --weights-from, e.g. layers.0.self_attn.; without --weights-from, prefix-lm's "
                    "--prefix-length P");
    c.seq = 0;
    c.d_model = 0;
    c.heads = 0;
    cmd->callback([args] { run_new(*args); });
}

}  // namespace attngraph::cli
