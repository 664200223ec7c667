#include "engine/graph_file.hpp"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/npy.hpp"
#include "engine/safetensors.hpp"

namespace attngraph {

namespace fs = std::filesystem;
namespace {
using nlohmann::json;  // not in attngraph itself: -Wshadow would flag TraceFormat::json in a unity build
}  // namespace

namespace {

void check_keys(const json& obj, std::initializer_list<const char*> known, const std::string& where) {
    for (const auto& [key, value] : obj.items()) {
        bool ok = false;
        for (const char* k : known) ok = ok || key == k;
        if (!ok) {
            std::string list;
            for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
            throw GraphError(where + ": unknown key '" + key + "' (known: " + list + ")");
        }
    }
}

double number_of(const json& v, const std::string& where) {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
        if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
        if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    throw GraphError(where + ": \"data\" holds " + json_brief(v) + " where a number belongs");
}

// Shape of nested lists (descending the first element) and the flattened values.
Shape shape_of_data(const json& data) {
    Shape s;
    const json* cur = &data;
    while (cur->is_array()) {
        s.push_back(cur->size());
        if (cur->empty() || s.size() > 32) break;
        cur = &(*cur)[0];
    }
    return s;
}

// Values the graph's dtype cannot hold are refused, as in an .npy file: an integer beyond
// 2^24 (f32) or 2^53 (f64), a finite number beyond f32's range in f32 (it would become inf).
void flatten(const json& data, const Shape& shape, std::size_t axis, std::vector<double>& out,
             const std::string& where, DType dtype) {
    if (axis == shape.size()) {
        const double v = number_of(data, where);
        const int exact_bits = dtype == DType::f32 ? 24 : 53;
        const auto at = [&] { return " at flat index " + std::to_string(out.size()); };
        if (data.is_number_integer() && std::abs(v) > std::ldexp(1.0, exact_bits))
            throw GraphError(where + ": \"data\" integer " + data.dump() + at() + " is beyond 2^" +
                             std::to_string(exact_bits) + " and cannot be held exactly in " + to_string(dtype));
        if (dtype == DType::f32 && std::isfinite(v) && std::abs(v) > std::numeric_limits<float>::max())
            throw GraphError(where + ": \"data\" value " + (std::ostringstream() << v).str() + at() +
                             " is beyond f32's range (it would become infinite)");
        out.push_back(v);
        return;
    }
    if (!data.is_array() || data.size() != shape[axis])
        throw GraphError(where + ": \"data\" does not agree with shape (" + shape_str(shape) + ") on axis " +
                         std::to_string(axis));
    for (const auto& item : data) flatten(item, shape, axis + 1, out, where, dtype);
}

void check_elements(const Shape& s, const std::string& where, std::size_t max_elements) {
    const std::size_t count = element_count_capped(s);
    if (count > max_elements)
        throw ShapeError(where + ": shape (" + shape_str(s) + ") has " +
                         (count == SIZE_MAX ? "too many" : std::to_string(count)) + " elements, over the limit of " +
                         std::to_string(max_elements) + " (--max-memory)");
}

Shape parse_shape(const json& j, const std::string& where, std::size_t max_elements) {
    if (!j.is_array()) throw GraphError(where + ": \"shape\" must be a list of sizes, got " + json_brief(j));
    if (j.size() > 32) throw GraphError(where + ": \"shape\" has more than 32 axes");
    Shape s;
    for (const auto& d : j) {
        if (!d.is_number_unsigned())
            throw GraphError(where + ": \"shape\" entries must be non-negative integers, got " + json_brief(d));
        s.push_back(static_cast<std::size_t>(d.get<unsigned long long>()));
    }
    check_elements(s, where, max_elements);
    return s;
}

Tensor make_tensor(const Shape& shape, const std::vector<double>& flat, DType dtype) {
    Tensor t = zeros(dtype, shape);
    t.visit([&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        std::transform(flat.begin(), flat.end(), a.data(), [](double v) { return static_cast<T>(v); });
    });
    return t;
}

fs::path resolve_npy(const std::string& rel, const fs::path& base_dir, bool allow_outside, const std::string& where,
                     const char* field = "npy") {
    if (rel.empty()) throw GraphError(where + ": empty " + field + " path");
    if (rel.find('\0') != std::string::npos) throw GraphError(where + ": " + field + " path holds a NUL character");
    const fs::path p = fs::path(rel).is_absolute() ? fs::path(rel) : base_dir / rel;
    if (!allow_outside) {
        // absolute first: weakly_canonical leaves a relative path with no existing prefix
        // ("missing.npy") relative, and it would then seem to leave the folder
        const fs::path base = fs::weakly_canonical(fs::absolute(base_dir.empty() ? fs::path(".") : base_dir));
        const fs::path target = fs::weakly_canonical(fs::absolute(p));
        auto [b, t] = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
        if (b != base.end())
            throw GraphError(where + ": \"" + field + "\" path '" + rel +
                             "' leaves the graph file's folder (use --allow-outside-paths)");
    }
    // a FIFO or a device would block or never end: only regular files (symlinks to them) are read
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (!ec && fs::exists(st) && !fs::is_regular_file(st))
        throw IoError(where + ": \"" + field + "\" path '" + rel + "' is not a regular file");
    return p;
}

// Builds the document as json::parse does, and refuses an object that names a key twice
// (nlohmann::json would keep the last: a tensor defined twice must be an error instead).
// A SAX handler rather than json::parse's callback: nlohmann 3.11.2's callback parser scans
// the enclosing container each time an object closes, quadratic in the number of nodes.
class StrictDomParser : public nlohmann::detail::json_sax_dom_parser<json> {
public:
    explicit StrictDomParser(json& result) : json_sax_dom_parser(result, /*allow_exceptions=*/true) {}

    bool start_object(std::size_t n) {
        open(true);
        return json_sax_dom_parser::start_object(n);
    }
    bool end_object() {
        levels_.pop_back();
        return json_sax_dom_parser::end_object();
    }
    bool start_array(std::size_t n) {
        open(false);
        return json_sax_dom_parser::start_array(n);
    }
    bool end_array() {
        levels_.pop_back();
        return json_sax_dom_parser::end_array();
    }
    bool key(std::string& k) {
        Level& top = levels_.back();
        if (!top.keys.insert(k).second) throw GraphError("duplicate key '" + k + "' in " + top.name);
        top.key = k;
        return json_sax_dom_parser::key(k);
    }

private:
    struct Level {
        bool object;
        std::string name, key;  // name: how an error names this container; key: its last key
        std::set<std::string> keys;
    };
    void open(bool object) {
        std::string name = "the graph";
        if (!levels_.empty()) name = levels_.back().object ? "\"" + levels_.back().key + "\"" : levels_.back().name;
        levels_.push_back({object, std::move(name), "", {}});
    }
    std::vector<Level> levels_;
};

}  // namespace

Graph parse_graph(const std::string& text, const fs::path& base_dir, const std::string& origin,
                  const LoadOptions& options) {
    json doc;
    try {
        StrictDomParser handler(doc);
        json::sax_parse(text, &handler);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
        std::string msg = e.what();
        if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
        throw GraphError(origin + ": malformed JSON: " + msg);
    } catch (const Error& e) {  // the handler's own checks (duplicate keys, nesting depth)
        throw GraphError(origin + ": " + e.what());
    }
    return graph_from_document(doc, base_dir, origin, options);
}

Graph graph_from_document(const json& doc, const fs::path& base_dir, const std::string& origin,
                          const LoadOptions& options, const std::map<std::string, Tensor>& supplied) {
    try {
        if (!doc.is_object()) throw GraphError("a graph file must be a JSON object");
        check_keys(doc, {"name", "dtype", "tokens", "tensors", "nodes", "outputs", "description"}, "graph");

        if (doc.contains("name") && !doc["name"].is_string()) throw GraphError("\"name\" must be a string");
        const std::string name = doc.contains("name") ? doc["name"].get<std::string>() : "graph";
        DType dtype = DType::f32;
        if (doc.contains("dtype")) {
            if (!doc["dtype"].is_string()) throw GraphError("\"dtype\" must be \"f32\" or \"f64\"");
            dtype = parse_dtype(doc["dtype"].get<std::string>());
        }
        if (options.dtype) dtype = *options.dtype;
        const std::size_t word = dtype == DType::f32 ? 4 : 8;
        const std::size_t max_elements = options.max_bytes ? options.max_bytes / word : options.max_elements;
        GraphBuilder builder(name, dtype);

        if (doc.contains("tokens")) {
            const json& t = doc["tokens"];
            if (!t.is_array() || !std::all_of(t.begin(), t.end(), [](const json& x) { return x.is_string(); }))
                throw GraphError("\"tokens\" must be a list of strings");
            builder.set_tokens(t.get<std::vector<std::string>>());
        }

        if (!doc.contains("tensors") || !doc["tensors"].is_object())
            throw GraphError("\"tensors\" must be an object of named tensors");
        for (const auto& [tname, spec] : doc["tensors"].items()) {
            const std::string where = "tensor '" + tname + "'";
            if (!spec.is_object()) throw GraphError(where + ": must be an object");
            check_keys(spec, {"kind", "shape", "data", "npy", "safetensors", "key", "transpose"}, where);
            ValueKind kind = ValueKind::param;
            if (spec.contains("kind")) {
                const json& k = spec["kind"];
                if (k == "input") kind = ValueKind::input;
                else if (k == "param") kind = ValueKind::param;
                else throw GraphError(where + ": \"kind\" must be \"input\" or \"param\", got " + json_brief(k));
            }
            std::optional<Shape> shape;
            if (spec.contains("shape")) shape = parse_shape(spec["shape"], where, max_elements);
            const bool has_data = spec.contains("data"), has_npy = spec.contains("npy"),
                       has_st = spec.contains("safetensors");
            const auto given = supplied.find(tname);
            const bool has_given = given != supplied.end();
            if (int(has_data) + int(has_npy) + int(has_st) + int(has_given) != 1)
                throw GraphError(where + ": give exactly one of \"data\", \"npy\" and \"safetensors\"");
            if (!has_st && (spec.contains("key") || spec.contains("transpose")))
                throw GraphError(where + ": \"key\" and \"transpose\" go with \"safetensors\"");
            Tensor t;
            if (has_given) {
                t = given->second.cast(dtype);
                check_elements(t.shape(), where, max_elements);
                if (shape && *shape != t.shape())
                    throw ShapeError(where + ": \"shape\" (" + shape_str(*shape) + ") disagrees with its tensor (" +
                                     shape_str(t.shape()) + ")");
            } else if (has_st) {
                if (!spec["safetensors"].is_string()) throw GraphError(where + ": \"safetensors\" must be a path string");
                if (!spec.contains("key") || !spec["key"].is_string())
                    throw GraphError(where + ": \"safetensors\" needs a \"key\" string naming the tensor in the file");
                if (spec.contains("transpose") && !spec["transpose"].is_boolean())
                    throw GraphError(where + ": \"transpose\" must be true or false");
                const fs::path p = resolve_npy(spec["safetensors"].get<std::string>(), base_dir,
                                               options.allow_outside_paths, where, "safetensors");
                try {
                    t = SafetensorsFile(p).load(spec["key"].get<std::string>(), dtype, spec.value("transpose", false),
                                                max_elements);
                } catch (const IoError& e) {
                    throw IoError(where + ": " + e.what());
                }
                if (shape && *shape != t.shape())
                    throw ShapeError(where + ": \"shape\" (" + shape_str(*shape) + ") disagrees with " + p.string() +
                                     " key '" + spec["key"].get<std::string>() + "' (" + shape_str(t.shape()) + ")");
            } else if (has_data) {
                const Shape s = shape ? *shape : shape_of_data(spec["data"]);
                check_elements(s, where, max_elements);
                std::vector<double> flat;
                flat.reserve(element_count(s));
                flatten(spec["data"], s, 0, flat, where, dtype);
                t = make_tensor(s, flat, dtype);
            } else {
                if (!spec["npy"].is_string()) throw GraphError(where + ": \"npy\" must be a path string");
                const fs::path p = resolve_npy(spec["npy"].get<std::string>(), base_dir, options.allow_outside_paths, where);
                try {
                    t = load_npy(p, max_elements, dtype);
                } catch (const IoError& e) {
                    throw IoError(where + ": " + e.what());
                }
                if (shape && *shape != t.shape())
                    throw ShapeError(where + ": \"shape\" (" + shape_str(*shape) + ") disagrees with " + p.string() +
                                     " (" + shape_str(t.shape()) + ")");
            }
            builder.add_tensor(tname, kind, std::move(t));
        }

        if (!doc.contains("nodes") || !doc["nodes"].is_array()) throw GraphError("\"nodes\" must be a list");
        std::size_t index = 0;
        for (const json& n : doc["nodes"]) {
            std::string where = "nodes[" + std::to_string(index++) + "]";
            if (!n.is_object()) throw GraphError(where + ": must be an object");
            check_keys(n, {"name", "op", "inputs", "attrs"}, where);
            if (!n.contains("name") || !n["name"].is_string()) throw GraphError(where + ": needs a \"name\" string");
            const std::string nname = n["name"].get<std::string>();
            where = "node '" + nname + "'";
            if (!n.contains("op") || !n["op"].is_string()) throw GraphError(where + ": needs an \"op\" string");
            const std::string op = n["op"].get<std::string>();
            const OpDef* def = OpRegistry::instance().find(op);
            if (!def) {
                try {
                    OpRegistry::instance().get(op);
                } catch (const GraphError& e) {
                    throw GraphError(where + ": " + e.what());
                }
            }
            where = "node '" + nname + "' (" + op + ")";
            std::vector<std::string> inputs;
            if (n.contains("inputs")) {
                const json& in = n["inputs"];
                if (!in.is_array() || !std::all_of(in.begin(), in.end(), [](const json& x) { return x.is_string(); }))
                    throw GraphError(where + ": \"inputs\" must be a list of names");
                inputs = in.get<std::vector<std::string>>();
            }
            static const json no_attrs;  // (a reference either way: copying user JSON recurses)
            NodeAttrs attrs = def->parse_attrs(n.contains("attrs") ? n["attrs"] : no_attrs, where);
            builder.add_node(nname, op, std::move(inputs), std::move(attrs));
        }

        if (doc.contains("outputs")) {
            const json& o = doc["outputs"];
            if (!o.is_array() || !std::all_of(o.begin(), o.end(), [](const json& x) { return x.is_string(); }))
                throw GraphError("\"outputs\" must be a list of names");
            for (const auto& out : o) builder.add_output(out.get<std::string>());
        }
        Graph graph = builder.build();
        check_memory(graph, max_elements > SIZE_MAX / word ? SIZE_MAX : max_elements * word);
        return graph;
    } catch (const ShapeError& e) {
        throw ShapeError(origin + ": " + e.what());
    } catch (const IoError& e) {
        throw IoError(origin + ": " + e.what());
    } catch (const GraphError& e) {
        throw GraphError(origin + ": " + e.what());
    } catch (const Error& e) {
        throw GraphError(origin + ": " + e.what());
    } catch (const json::exception& e) {  // a JSON access the checks above missed: still the file's fault
        throw GraphError(origin + ": " + e.what());
    }
}

Graph load_graph(const fs::path& path, const LoadOptions& options) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw IoError(path.string() +
                      (fs::is_directory(path, ec) ? ": is a directory, not a graph file" : ": no such graph file"));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path.string() + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_graph(ss.str(), path.parent_path(), path.string(), options);
}

json tensor_to_json(const Tensor& tensor) {
    const Shape shape = tensor.shape();
    std::vector<json> level;  // build nested lists from the innermost axis out
    const std::size_t n = tensor.size();
    std::vector<json> cur;
    cur.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double v = tensor.at_flat(i);
        if (std::isnan(v)) cur.emplace_back("NaN");
        else if (std::isinf(v)) cur.emplace_back(v > 0 ? "Infinity" : "-Infinity");
        else if (tensor.dtype() == DType::f32) cur.emplace_back(static_cast<float>(v));
        else cur.emplace_back(v);
    }
    if (shape.empty()) return cur.empty() ? json() : cur[0];
    for (std::size_t axis = shape.size(); axis-- > 0;) {
        const std::size_t len = shape[axis];
        std::vector<json> next;
        const std::size_t groups = len ? cur.size() / len : element_count(Shape(shape.begin(), shape.begin() + axis));
        for (std::size_t g = 0; g < groups; ++g) {
            json arr = json::array();
            for (std::size_t i = 0; i < len; ++i) arr.push_back(std::move(cur[g * len + i]));
            next.push_back(std::move(arr));
        }
        cur = std::move(next);
    }
    return cur.empty() ? json::array() : cur[0];
}

// The graph file's document; `values`: its tensors' values too (inline or as .npy files).
static json graph_json(const Graph& graph, const fs::path& weights_dir, const fs::path& graph_dir, bool values);

json graph_to_json(const Graph& graph, const fs::path& weights_dir, const fs::path& graph_dir) {
    return graph_json(graph, weights_dir, graph_dir, true);
}

json graph_structure_json(const Graph& graph) {
    return graph_json(graph, {}, {}, false);
}

static json graph_json(const Graph& graph, const fs::path& weights_dir, const fs::path& graph_dir, bool values) {
    json doc;
    doc["name"] = graph.name();
    doc["dtype"] = to_string(graph.dtype());
    if (!graph.tokens().empty()) doc["tokens"] = graph.tokens();
    json tensors = json::object();
    for (const auto& v : graph.values()) {
        if (!v.data) continue;
        json t;
        t["kind"] = to_string(v.kind);
        t["shape"] = v.shape;
        if (!values) {
            // supplied when read back
        } else if (weights_dir.empty()) {
            t["data"] = tensor_to_json(*v.data);
        } else {
            const fs::path file = weights_dir / (v.name + ".npy");
            save_npy(file, *v.data);
            t["npy"] = fs::relative(file, graph_dir.empty() ? fs::path(".") : graph_dir).generic_string();
        }
        tensors[v.name] = std::move(t);
    }
    doc["tensors"] = std::move(tensors);
    json nodes = json::array();
    for (const auto& node : graph.nodes()) {
        json n;
        n["name"] = node.name;
        n["op"] = node.op->name;
        std::vector<std::string> inputs;
        for (int id : node.inputs) inputs.push_back(graph.value(id).name);
        n["inputs"] = inputs;
        json attrs = node.op->attrs_to_json(node.attrs);
        if (!attrs.empty()) n["attrs"] = std::move(attrs);
        nodes.push_back(std::move(n));
    }
    doc["nodes"] = std::move(nodes);
    std::vector<std::string> outputs;
    for (int id : graph.outputs()) outputs.push_back(graph.value(id).name);
    doc["outputs"] = outputs;
    return doc;
}

}  // namespace attngraph
