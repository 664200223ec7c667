#include "onnx/import.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "engine/attrs.hpp"
#include "engine/error.hpp"
#include "engine/graph.hpp"
#include "engine/half.hpp"
#include "onnx/attention.hpp"
#include "onnx/einsum.hpp"
#include "onnx/fold.hpp"
#include "ops/conv.hpp"
#include "ops/scatter_elements.hpp"
#include "ops/scatter_nd.hpp"

namespace attngraph {

namespace fs = std::filesystem;
namespace {
using nlohmann::json;  // not in attngraph itself: -Wshadow would flag TraceFormat::json in a unity build
}  // namespace
using TP = onnx::TensorProto;

bool is_onnx_path(const fs::path& path) {
    return path.extension() == ".onnx";
}

std::string sanitize_onnx_name(const std::string& onnx_name) {
    if (valid_name(onnx_name)) return onnx_name;
    std::string s;
    for (char c : onnx_name) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
        s += ok ? c : (c == '/' ? '.' : '_');
    }
    const auto first = s.find_first_not_of('.');
    s = first == std::string::npos ? "" : s.substr(first);
    if (s.empty() || s == "." || s == "..") s = "v" + s;
    return s;
}

// ---- reading protobuf -------------------------------------------------------------------

namespace {

std::string read_file_bytes(const fs::path& p, const std::string& what) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw IoError(p.string() + ": cannot open " + what);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

onnx::ModelProto parse_model(const fs::path& path) {
    const std::string bytes = read_file_bytes(path, "the model");
    onnx::ModelProto model;
    if (bytes.empty() || !model.ParseFromString(bytes))
        throw IoError(path.string() + ": not an ONNX model (the protobuf does not parse; truncated or another format)");
    if (!model.has_graph() || model.graph().output_size() == 0)
        throw IoError(path.string() + ": not an ONNX model (no graph with outputs)");
    return model;
}

bool is_integer_type(int t) {
    return t == TP::INT8 || t == TP::INT16 || t == TP::INT32 || t == TP::INT64 || t == TP::UINT8 || t == TP::UINT16 ||
           t == TP::UINT32 || t == TP::UINT64;
}

std::string type_name(int t) {
    switch (t) {
        case TP::FLOAT:
            return "float";
        case TP::UINT8:
            return "uint8";
        case TP::INT8:
            return "int8";
        case TP::UINT16:
            return "uint16";
        case TP::INT16:
            return "int16";
        case TP::INT32:
            return "int32";
        case TP::INT64:
            return "int64";
        case TP::STRING:
            return "string";
        case TP::BOOL:
            return "bool";
        case TP::FLOAT16:
            return "float16";
        case TP::DOUBLE:
            return "double";
        case TP::UINT32:
            return "uint32";
        case TP::UINT64:
            return "uint64";
        case TP::COMPLEX64:
            return "complex64";
        case TP::COMPLEX128:
            return "complex128";
        case TP::BFLOAT16:
            return "bfloat16";
        case 17:
            return "float8e4m3fn";
        case 18:
            return "float8e4m3fnuz";
        case 19:
            return "float8e5m2";
        case 20:
            return "float8e5m2fnuz";
        case 21:
            return "uint4";
        case 22:
            return "int4";
        case 23:
            return "float4e2m1";
        default:
            return "type " + std::to_string(t);
    }
}

std::size_t type_bytes(int t) {
    switch (t) {
        case TP::UINT8:
        case TP::INT8:
        case TP::BOOL:
            return 1;
        case TP::UINT16:
        case TP::INT16:
        case TP::FLOAT16:
        case TP::BFLOAT16:
            return 2;
        case TP::FLOAT:
        case TP::INT32:
        case TP::UINT32:
            return 4;
        case TP::INT64:
        case TP::UINT64:
        case TP::DOUBLE:
            return 8;
        default:
            return 0;  // unsupported
    }
}

// One element of little-endian raw data.
double decode_raw(const unsigned char* p, int t) {
    std::uint64_t bits = 0;
    const std::size_t n = type_bytes(t);
    for (std::size_t b = 0; b < n; ++b) bits |= std::uint64_t(p[b]) << (8 * b);
    switch (t) {
        case TP::FLOAT:
            return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        case TP::DOUBLE:
            return std::bit_cast<double>(bits);
        case TP::FLOAT16:
            return half_to_float(static_cast<std::uint16_t>(bits));
        case TP::BFLOAT16:
            return bfloat16_to_float(static_cast<std::uint16_t>(bits));
        case TP::BOOL:
            return bits != 0 ? 1.0 : 0.0;
        case TP::INT8:
            return static_cast<std::int8_t>(bits);
        case TP::INT16:
            return static_cast<std::int16_t>(bits);
        case TP::INT32:
            return static_cast<std::int32_t>(bits);
        case TP::INT64:
            return static_cast<double>(static_cast<std::int64_t>(bits));
        default:
            return static_cast<double>(bits);  // unsigned
    }
}

struct TensorReader {
    fs::path model_dir;            // external data must stay inside it
    std::string where;             // the model's path, for errors
    std::size_t max_elements = 0;  // 0: no limit

    OnnxTensor read(const TP& t, const std::string& what) const {
        OnnxTensor out;
        out.elem_type = t.data_type();
        const std::size_t word = type_bytes(out.elem_type);
        if (word == 0)
            throw GraphError(where + ": " + what + " has data type " + type_name(out.elem_type) +
                             ", which attngraph does not support (bool, integers, float16/32/64, bfloat16)");
        std::size_t count = 1;
        for (const auto d : t.dims()) {
            if (d < 0) throw GraphError(where + ": " + what + " has a negative dimension " + std::to_string(d));
            out.shape.push_back(d);
            count = (d != 0 && count > SIZE_MAX / static_cast<std::size_t>(d)) ? SIZE_MAX
                                                                               : count * static_cast<std::size_t>(d);
        }
        if (max_elements && count > max_elements)
            throw ShapeError(where + ": " + what + " of shape (" + shape_text(out.shape) + ") has " +
                             (count == SIZE_MAX ? "too many" : std::to_string(count)) +
                             " elements, over the limit of " + std::to_string(max_elements) + " (--max-memory)");
        if (t.data_location() == TP::EXTERNAL) {
            const std::string raw = external_bytes(t, what, count, word, out.shape, out.elem_type);
            decode_all(raw, out, count, word, what);
        } else if (t.has_raw_data()) {
            decode_all(t.raw_data(), out, count, word, what);
        } else {
            auto take = [&](const auto& field, auto convert) {
                if (static_cast<std::size_t>(field.size()) != count)
                    throw GraphError(where + ": " + what + " holds " + std::to_string(field.size()) +
                                     " values for shape (" + shape_text(out.shape) + ")");
                out.values.reserve(count);
                for (const auto v : field) out.values.push_back(convert(v));
            };
            switch (out.elem_type) {
                case TP::FLOAT:
                    take(t.float_data(), [](float v) { return double(v); });
                    break;
                case TP::DOUBLE:
                    take(t.double_data(), [](double v) { return v; });
                    break;
                case TP::INT64:
                    take(t.int64_data(), [](std::int64_t v) { return double(v); });
                    break;
                case TP::UINT32:
                case TP::UINT64:
                    take(t.uint64_data(), [](std::uint64_t v) { return double(v); });
                    break;
                case TP::FLOAT16:
                    take(t.int32_data(),
                         [](std::int32_t v) { return half_to_float(static_cast<std::uint16_t>(v & 0xffff)); });
                    break;
                case TP::BFLOAT16:
                    take(t.int32_data(),
                         [](std::int32_t v) { return bfloat16_to_float(static_cast<std::uint16_t>(v & 0xffff)); });
                    break;
                case TP::BOOL:
                    take(t.int32_data(), [](std::int32_t v) { return v != 0 ? 1.0 : 0.0; });
                    break;
                default:
                    take(t.int32_data(), [](std::int32_t v) { return double(v); });
                    break;
            }
        }
        return out;
    }

    static std::string shape_text(const std::vector<std::int64_t>& s) {
        Shape u;
        for (auto d : s) u.push_back(static_cast<std::size_t>(d));
        return shape_str(u);
    }

    void decode_all(const std::string& raw, OnnxTensor& out, std::size_t count, std::size_t word,
                    const std::string& what) const {
        if (count > raw.size() / word || raw.size() != count * word)
            throw GraphError(where + ": " + what + " of shape (" + shape_text(out.shape) + ") " +
                             type_name(out.elem_type) + " needs " +
                             (count > SIZE_MAX / word ? "too many" : std::to_string(count * word)) +
                             " bytes, its data holds " + std::to_string(raw.size()));
        out.values.resize(count);
        const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
        if (out.elem_type == TP::FLOAT) {
            for (std::size_t i = 0; i < count; ++i) {
                float f;
                std::memcpy(&f, p + 4 * i, 4);
                out.values[i] = f;
            }
            return;
        }
        for (std::size_t i = 0; i < count; ++i) out.values[i] = decode_raw(p + i * word, out.elem_type);
    }

    std::string external_bytes(const TP& t, const std::string& what, std::size_t count, std::size_t word,
                               const std::vector<std::int64_t>& shape, int elem_type) const {
        std::string location;
        long long offset = 0, length = -1;
        for (const auto& kv : t.external_data()) {
            try {
                if (kv.key() == "location")
                    location = kv.value();
                else if (kv.key() == "offset")
                    offset = std::stoll(kv.value());
                else if (kv.key() == "length")
                    length = std::stoll(kv.value());
            } catch (const std::exception&) {
                throw GraphError(where + ": " + what + ": external data " + kv.key() + " '" + kv.value() +
                                 "' is not a number");
            }
        }
        if (location.empty()) throw GraphError(where + ": " + what + ": external data without a location");
        const fs::path rel(location);
        std::error_code ec;
        const fs::path base = fs::weakly_canonical(model_dir, ec);
        const fs::path file = fs::weakly_canonical(model_dir / rel, ec);
        const auto [b, f] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
        if (rel.is_absolute() || b != base.end() || f == file.end())
            throw IoError(where + ": " + what + ": external data file '" + location + "' leaves the model's folder " +
                          model_dir.string());
        std::ifstream in(file, std::ios::binary);
        if (!in || !fs::is_regular_file(file, ec))
            throw IoError(where + ": " + what + ": external data file '" + location + "' is missing (looked in " +
                          model_dir.string() + ")");
        in.seekg(0, std::ios::end);
        const long long size = in.tellg();
        const long long need = static_cast<long long>(count * word);
        if (length >= 0 && length != need)
            throw GraphError(where + ": " + what + " of shape (" + shape_text(shape) + ") " + type_name(elem_type) +
                             " needs " + std::to_string(need) + " bytes, its external data length is " +
                             std::to_string(length) + " (file '" + location + "')");
        if (length < 0) length = need;
        if (offset < 0 || offset > size || size - offset < length)
            throw IoError(where + ": " + what + ": external data file '" + location + "' (" + std::to_string(size) +
                          " bytes) does not hold " + std::to_string(need) + " bytes at offset " +
                          std::to_string(offset));
        std::string raw(static_cast<std::size_t>(length), '\0');
        in.seekg(offset);
        in.read(raw.data(), length);
        if (!in) throw IoError(where + ": " + what + ": cannot read external data file '" + location + "'");
        return raw;
    }
};

}  // namespace

OnnxTensor read_onnx_tensor(const fs::path& pb, std::string* name) {
    const std::string bytes = read_file_bytes(pb, "the tensor");
    TP t;
    if (!t.ParseFromString(bytes)) throw IoError(pb.string() + ": not a serialized onnx.TensorProto");
    if (name) *name = t.name();
    TensorReader reader{pb.parent_path(), pb.string(), 0};
    return reader.read(t, "tensor '" + t.name() + "'");
}

std::pair<std::vector<std::string>, std::vector<std::string>> onnx_io_names(const fs::path& path) {
    const onnx::ModelProto model = parse_model(path);
    std::set<std::string> inits;
    for (const auto& t : model.graph().initializer()) inits.insert(t.name());
    std::pair<std::vector<std::string>, std::vector<std::string>> io;
    for (const auto& v : model.graph().input())
        if (!inits.count(v.name())) io.first.push_back(v.name());
    for (const auto& v : model.graph().output()) io.second.push_back(v.name());
    return io;
}

// ---- the importer -----------------------------------------------------------------------

namespace {

// A value of the model while importing: a constant (folded) or an attngraph value.
struct Value {
    bool is_const = false;
    OnnxTensor c;      // is_const
    std::string name;  // attngraph value name otherwise
    Shape shape;
    int elem_type = TP::FLOAT;
    bool zero_one = false;  // computed, and every element is 0 or 1 (a comparison's, a bool's)
};

std::vector<std::int64_t> to_i64(const Shape& s) {
    return {s.begin(), s.end()};
}
Shape to_shape(const std::vector<std::int64_t>& s) {
    return {s.begin(), s.end()};
}

// The newest opset of the default domain whose ops the mapping knows (ONNX 1.22's backend
// tests, tests/data/onnx/, go up to 25).
constexpr std::int64_t max_opset = 25;

class Importer {
public:
    Importer(const fs::path& path, const ImportOptions& options) : m_path(path), m_options(options) {
        m_where = path.string();
        m_reader.model_dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
        m_reader.where = m_where;
        if (options.max_bytes) m_reader.max_elements = options.max_bytes / (options.dtype == DType::f32 ? 4 : 8);
    }

    ImportedModel run() {
        const onnx::ModelProto model = parse_model(m_path);
        bool has_opset = false;
        for (const auto& op : model.opset_import())
            if (op.domain().empty() || op.domain() == "ai.onnx") {
                m_opset = op.version();
                has_opset = true;
            }
        // an op's meaning is the one of the newest version at or before the model's opset: a
        // model without one, or newer than the mapping knows, cannot be read faithfully
        if (!has_opset)
            throw GraphError(m_where + ": the model imports no opset of the default ONNX domain ('' or 'ai.onnx')");
        if (m_opset < 1 || m_opset > max_opset)
            throw GraphError(m_where + ": opset " + std::to_string(m_opset) +
                             " of the default ONNX domain is not supported (opsets 1 to " + std::to_string(max_opset) +
                             ")");
        const auto& g = model.graph();
        m_out.graph = {{"name", sanitize_onnx_name(g.name().empty() ? m_path.stem().string() : g.name())},
                       {"dtype", to_string(m_options.dtype)},
                       {"tensors", json::object()},
                       {"nodes", json::array()}};
        check_defined_once(g);
        std::set<std::string> inits;
        for (const auto& t : g.initializer()) {
            inits.insert(t.name());
            Value v;
            v.is_const = true;
            v.c = m_reader.read(t, "initializer '" + t.name() + "'");
            v.elem_type = v.c.elem_type;
            v.shape = to_shape(v.c.shape);
            m_values[t.name()] = std::move(v);
        }
        for (const auto& vi : g.input()) {
            if (inits.count(vi.name())) continue;
            add_input(vi);
        }
        for (int i = 0; i < g.node_size(); ++i) {
            // a node's error names the file, node and op (import_node's `where`); one that does
            // not name the input shapes yet (folding's) gets them here
            auto with_shapes = [&](const Error& e) {
                std::string text = e.what();
                std::string shapes;
                auto paren = [](const Shape& s) { return s.empty() ? std::string("()") : "(" + shape_str(s) + ")"; };
                for (const auto& name : g.node(i).input()) {
                    const auto it = m_values.find(name);
                    if (!shapes.empty()) shapes += ", ";
                    shapes += name.empty()           ? std::string("(absent)")
                              : it == m_values.end() ? std::string("(?)")
                                                     : paren(it->second.shape);
                }
                if (text.find("shapes (") == std::string::npos && !shapes.empty()) text += "; shapes " + shapes;
                return m_out.reshaped_inputs.empty() ? text : text + " (" + m_out.reshaped_inputs + ")";
            };
            try {
                import_node(g.node(i), i);
            } catch (const ShapeError& e) {
                throw ShapeError(with_shapes(e));
            } catch (const GraphError& e) {
                throw GraphError(with_shapes(e));
            }
        }
        json outputs = json::array();
        for (const auto& vi : g.output()) {
            const auto it = m_values.find(vi.name());
            if (it == m_values.end())
                throw GraphError(m_where + ": graph output '" + vi.name() + "' is not produced by any node");
            if (it->second.is_const) {
                // an output computable at import time: a param holding it, passed through a node
                const std::string p = materialize(vi.name(), true);
                const std::string n = unique(sanitize_onnx_name(vi.name()) + ".out");
                emit("Reshape", n, {p}, {{"shape", to_i64(it->second.shape)}});
                outputs.push_back(n);
                m_out.names.emplace_back(vi.name(), n);
            } else if (it->second.name != sanitize_onnx_name(vi.name())) {
                // another value under the output's name (Identity, Dropout, a Cast that needs no
                // node) or one output of several (NAME:k): a node of that name passes it on, so
                // that runs and traces show the output under the name the model gives it
                const std::string n = unique(sanitize_onnx_name(vi.name()));
                emit("Reshape", n, {it->second.name}, {{"shape", to_i64(it->second.shape)}});
                outputs.push_back(n);
                m_out.names.emplace_back(vi.name(), n);
            } else {
                outputs.push_back(it->second.name);
            }
        }
        m_out.graph["outputs"] = outputs;
        if (m_float16) m_out.notes.push_back(m_where + ": float16 model runs in " + to_string(m_options.dtype));
        return std::move(m_out);
    }

private:
    // ---- names ----
    std::string unique(const std::string& base) {
        std::string n = base;
        for (int k = 1; m_used.count(n); ++k) n = base + "_" + std::to_string(k);
        m_used.insert(n);
        return n;
    }

    // ONNX graphs are SSA: every name is defined once, by one initializer, graph input or node
    // output. An initializer may also be listed as a graph input (IR < 4 models list every
    // initializer so; the initializer is the input's default value).
    void check_defined_once(const onnx::GraphProto& g) const {
        std::map<std::string, std::string> definer;
        const auto define = [&](const std::string& name, const std::string& by) {
            if (name.empty()) return;  // an absent optional output
            const auto [it, added] = definer.emplace(name, by);
            if (!added)
                throw GraphError(m_where + ": '" + name + "' is defined twice, by " + it->second + " and by " + by +
                                 " (an ONNX name is defined once)");
        };
        std::set<std::string> inits, inputs;
        for (const auto& t : g.initializer()) {
            define(t.name(), "initializer '" + t.name() + "'");
            inits.insert(t.name());
        }
        for (const auto& vi : g.input()) {
            if (!inputs.insert(vi.name()).second)
                throw GraphError(m_where + ": graph input '" + vi.name() +
                                 "' is listed twice (an ONNX name is defined once)");
            if (!inits.count(vi.name())) define(vi.name(), "graph input '" + vi.name() + "'");
        }
        for (int i = 0; i < g.node_size(); ++i) {
            const auto& n = g.node(i);
            const std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
            for (const auto& o : n.output()) define(o, "node '" + name + "' (" + n.op_type() + ")");
        }
    }

    // ---- graph building ----
    void add_input(const onnx::ValueInfoProto& vi) {
        const auto bound = m_options.constant_inputs.find(vi.name());
        if (bound != m_options.constant_inputs.end()) {
            Value v;
            v.is_const = true;
            v.c = bound->second;
            v.elem_type = v.c.elem_type;
            v.shape = to_shape(v.c.shape);
            m_values[vi.name()] = std::move(v);
            return;
        }
        if (!vi.type().has_tensor_type())
            throw GraphError(m_where + ": graph input '" + vi.name() + "' is not a tensor");
        const auto& tt = vi.type().tensor_type();
        const int et = tt.elem_type();
        if (type_bytes(et) == 0)
            throw GraphError(m_where + ": graph input '" + vi.name() + "' has data type " + type_name(et) +
                             ", which attngraph does not support (bool, integers, float16/32/64, bfloat16)");
        if (et == TP::FLOAT16 || et == TP::BFLOAT16) m_float16 = true;
        Shape shape;
        const auto given = m_options.input_shapes.find(vi.name());
        if (given != m_options.input_shapes.end()) {
            shape = given->second;
            if (tt.has_shape()) {
                // a fixed dimension given another size: named in every later error
                bool differs = static_cast<std::size_t>(tt.shape().dim_size()) != shape.size();
                std::string declared;
                for (int k = 0; k < tt.shape().dim_size(); ++k) {
                    const auto& d = tt.shape().dim(k);
                    declared += std::string(k ? "x" : "") + (d.has_dim_value()   ? std::to_string(d.dim_value())
                                                             : d.has_dim_param() ? d.dim_param()
                                                                                 : "?");
                    if (!differs && d.has_dim_value() && d.dim_value() != static_cast<std::int64_t>(shape[k]))
                        differs = true;
                }
                if (differs)
                    m_out.reshaped_inputs += std::string(m_out.reshaped_inputs.empty() ? "" : "; ") +
                                             "the model declares input '" + vi.name() + "' as (" + declared +
                                             "), given (" + shape_str(shape) + ")";
            }
        } else {
            if (!tt.has_shape())
                throw ShapeError(m_where + ": graph input '" + vi.name() +
                                 "' has no shape in the model: give one with --input " + vi.name() + "=FILE.npy");
            for (const auto& d : tt.shape().dim()) {
                if (!d.has_dim_value() || d.dim_value() < 0)
                    throw ShapeError(m_where + ": graph input '" + vi.name() + "' has the symbolic dimension '" +
                                     (d.has_dim_param() ? d.dim_param() : std::string("?")) +
                                     "': its shape cannot be resolved statically; give it with --input " + vi.name() +
                                     "=FILE.npy");
                shape.push_back(static_cast<std::size_t>(d.dim_value()));
            }
        }
        const std::size_t count = element_count_capped(shape);
        if (m_reader.max_elements && count > m_reader.max_elements)
            throw ShapeError(m_where + ": graph input '" + vi.name() + "' of shape (" + shape_str(shape) + ") has " +
                             (count == SIZE_MAX ? "too many" : std::to_string(count)) +
                             " elements, over the limit of " + std::to_string(m_reader.max_elements) +
                             " (--max-memory)");
        const std::string name = unique(sanitize_onnx_name(vi.name()));
        m_out.graph["tensors"][name] = {{"kind", "input"}, {"shape", shape}};
        m_out.tensors[name] = zeros(m_options.dtype, shape);
        m_out.names.emplace_back(vi.name(), name);
        Value v;
        v.name = name;
        v.shape = shape;
        v.elem_type = et;
        m_values[vi.name()] = std::move(v);
    }

    // A constant of our own named `name` (type `elem_type`, `shape`, row-major `values`),
    // materialized: its attngraph name.
    std::string constant(const std::string& name, int elem_type, const Shape& shape, std::vector<double> values) {
        Value c;
        c.is_const = true;
        c.c = OnnxTensor{elem_type, to_i64(shape), std::move(values)};
        c.elem_type = elem_type;
        m_values[name] = c;
        m_synthetic.insert(name);
        return materialize(name);
    }

    // A float scalar constant of our own named `name`, materialized: its attngraph name.
    std::string scalar(const std::string& name, double value) { return constant(name, TP::FLOAT, {}, {value}); }

    // The attngraph name of a value; a constant becomes a param on first use. A zero-size
    // constant (an empty Slice) may only be a graph output: no op takes zero-size inputs.
    std::string materialize(const std::string& onnx_name, bool graph_output = false) {
        Value& v = m_values.at(onnx_name);
        if (!v.is_const) return v.name;
        if (!graph_output && element_count(to_shape(v.c.shape)) == 0)
            throw ShapeError(m_where + ": '" + onnx_name + "' of shape (" + shape_str(to_shape(v.c.shape)) +
                             ") is empty: attngraph ops take no zero-size inputs");
        auto it = m_params.find(onnx_name);
        if (it != m_params.end()) return it->second;
        const std::string name = unique(sanitize_onnx_name(onnx_name));
        if (v.c.elem_type != TP::FLOAT && v.c.elem_type != TP::DOUBLE && v.c.elem_type != TP::FLOAT16 &&
            v.c.elem_type != TP::BFLOAT16 && m_options.dtype == DType::f32)
            for (double x : v.c.values)
                if (std::fabs(x) > 16777216.0)
                    throw GraphError(m_where + ": constant '" + onnx_name + "' holds the integer " + std::to_string(x) +
                                     ", beyond 2^24: f32 cannot hold it exactly");
        const Shape s = to_shape(v.c.shape);
        m_out.graph["tensors"][name] = {{"kind", "param"}, {"shape", s}};
        Tensor t = zeros(m_options.dtype, s);
        t.visit([&](auto& a) {
            using T = typename std::decay_t<decltype(a)>::value_type;
            std::transform(v.c.values.begin(), v.c.values.end(), a.data(), [](double x) { return static_cast<T>(x); });
        });
        m_out.tensors[name] = std::move(t);
        if (!m_synthetic.count(onnx_name)) m_out.names.emplace_back(onnx_name, name);
        m_params[onnx_name] = name;
        return name;
    }

    void emit(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
              const json& attrs = json::object()) {
        json n = {{"name", name}, {"op", op}, {"inputs", inputs}};
        if (!attrs.empty()) n["attrs"] = attrs;
        m_out.graph["nodes"].push_back(std::move(n));
    }

    // Defines ONNX output `onnx_name` as the attngraph value `name` of `shape`.
    void define(const std::string& onnx_name, const std::string& name, const Shape& shape, int elem_type) {
        Value v;
        v.name = name;
        v.shape = shape;
        v.elem_type = elem_type;
        m_values[onnx_name] = std::move(v);
        m_out.names.emplace_back(onnx_name, name);
    }

    void alias(const std::string& onnx_name, const Value& v) {
        m_values[onnx_name] = v;
        if (!v.is_const) m_out.names.emplace_back(onnx_name, v.name);
    }

    // ---- nodes ----
    void import_node(const onnx::NodeProto& node, int index);

    fs::path m_path;
    ImportOptions m_options;
    std::string m_where;
    TensorReader m_reader;
    std::int64_t m_opset = 1;
    bool m_float16 = false;
    std::map<std::string, Value> m_values;
    std::map<std::string, std::string> m_params;
    std::set<std::string> m_used;
    std::set<std::string> m_synthetic;  // constants made at import (a transposed weight), not ONNX values
    ImportedModel m_out;
};

}  // namespace

// ---- mapping one node -------------------------------------------------------------------

namespace {

using onnx_fold::attr_float;
using onnx_fold::attr_int;
using onnx_fold::attr_ints;

std::int64_t normalize(std::int64_t axis, std::size_t rank, const std::string& where) {
    const auto r = static_cast<std::int64_t>(rank);
    if (axis < -r || axis >= r)
        throw ShapeError(where + ": axis " + std::to_string(axis) + " is out of range for rank " +
                         std::to_string(rank));
    return axis < 0 ? axis + r : axis;
}

Shape broadcast(const Shape& a, const Shape& b, const std::string& where) {
    return to_shape(onnx_fold::broadcast_shapes(to_i64(a), to_i64(b), where));
}

// numpy's rule, one way: `from` stretches to `to`
bool broadcasts_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (std::size_t i = 0; i < from.size(); ++i) {
        const std::size_t d = from[from.size() - 1 - i];
        if (d != 1 && d != to[to.size() - 1 - i]) return false;
    }
    return true;
}

void Importer::import_node(const onnx::NodeProto& node, int index) {
    const std::string& op = node.op_type();
    const std::string node_name = node.name().empty() ? op + "_" + std::to_string(index) : node.name();
    const std::string where = m_where + ": node '" + node_name + "' (" + op + ")";
    if (!node.domain().empty() && node.domain() != "ai.onnx")
        throw GraphError(where + ": op '" + op + "' of domain '" + node.domain() +
                         "' is not supported (supported ops: docs/onnx.md)");
    if (node.output_size() == 0) throw GraphError(where + ": the node has no outputs");
    std::vector<const Value*> in;
    bool all_const = true;
    for (const auto& name : node.input()) {
        if (name.empty()) {
            in.push_back(nullptr);
            continue;
        }
        const auto it = m_values.find(name);
        if (it == m_values.end())
            throw GraphError(where + ": input '" + name +
                             "' is not produced by any earlier node, input or initializer");
        in.push_back(&it->second);
        all_const = all_const && it->second.is_const;
    }
    auto has = [&](std::size_t i) { return i < in.size() && in[i]; };
    auto arg = [&](std::size_t i) -> const Value& {
        if (!has(i)) throw GraphError(where + ": input " + std::to_string(i) + " is missing");
        return *in[i];
    };
    // the ONNX name of input i, which must be given
    auto input = [&](std::size_t i) -> const std::string& {
        (void)arg(i);
        return node.input(static_cast<int>(i));
    };
    // "(3x4x5), (5)": the shapes of the node's inputs, for errors
    auto shapes_text = [&]() {
        std::string t;
        for (std::size_t i = 0; i < in.size(); ++i) {
            if (i) t += ", ";
            t += !in[i]                 ? std::string("(absent)")
                 : in[i]->shape.empty() ? std::string("()")  // a scalar
                                        : "(" + shape_str(in[i]->shape) + ")";
        }
        return t;
    };
    auto const_ints = [&](std::size_t i, const std::string& what) {
        const Value& v = arg(i);
        if (!v.is_const)
            throw ShapeError(
                where + ": " + what + " '" + node.input(static_cast<int>(i)) +
                "' is computed from the graph's inputs, not a constant: its value cannot be resolved statically");
        std::vector<std::int64_t> out;
        for (double d : v.c.values) {
            if (std::isnan(d))
                throw ShapeError(where + ": " + what + " '" + node.input(static_cast<int>(i)) +
                                 "' holds NaN where an integer is expected; shapes " + shapes_text());
            out.push_back(d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : static_cast<std::int64_t>(d));
        }
        return out;
    };
    auto out_name = [&](int k) {
        return unique(sanitize_onnx_name(node.output(k).empty() ? node_name : node.output(k)));
    };
    const std::string out0 = node.output_size() ? node.output(0) : "";
    // an attribute the mapping does not read is refused, never ignored
    auto check_attrs = [&](std::initializer_list<const char*> known) {
        for (const auto& a : node.attribute())
            if (std::none_of(known.begin(), known.end(), [&](const char* k) { return a.name() == k; }))
                throw GraphError(where + ": attribute '" + a.name() + "' is not supported; shapes " + shapes_text() +
                                 " (supported ops: docs/onnx.md)");
    };

    if (op == "Constant") {
        if (const auto* a = onnx_fold::find_attr(node, "value")) {
            Value v;
            v.is_const = true;
            v.c = m_reader.read(a->t(), "constant '" + out0 + "'");
            v.elem_type = v.c.elem_type;
            v.shape = to_shape(v.c.shape);
            m_values[out0] = std::move(v);
            return;
        }
    }
    // Shape and Size of anything with a known shape are constants
    if (op == "Shape" || op == "Size") {
        const Shape s = arg(0).shape;
        OnnxTensor t{TP::INT64, {}, {}};
        if (op == "Size") {
            t.values = {static_cast<double>(element_count(s))};
        } else {
            const auto r = static_cast<std::int64_t>(s.size());
            std::int64_t b = attr_int(node, "start", 0), e = attr_int(node, "end", r);
            if (b < 0) b += r;
            if (e < 0) e += r;
            b = std::clamp<std::int64_t>(b, 0, r);
            e = std::clamp<std::int64_t>(e, 0, r);
            for (std::int64_t i = b; i < e; ++i)
                t.values.push_back(static_cast<double>(s[static_cast<std::size_t>(i)]));
            t.shape = {static_cast<std::int64_t>(t.values.size())};
        }
        Value v;
        v.is_const = true;
        v.c = t;
        v.elem_type = TP::INT64;
        v.shape = to_shape(t.shape);
        m_values[out0] = v;
        return;
    }
    if (all_const && onnx_fold::foldable(op)) {
        std::vector<const OnnxTensor*> cin;
        for (const auto* v : in) cin.push_back(v ? &v->c : nullptr);
        // fold checks each output's shape against the limit before allocating it
        std::vector<OnnxTensor> outs;
        try {
            outs = onnx_fold::fold(node, cin, m_opset, where, m_reader.max_elements);
        } catch (const std::bad_alloc&) {
            throw ShapeError(where + ": out of memory folding the node; shapes " + shapes_text());
        } catch (const std::length_error&) {
            throw ShapeError(where + ": the folded output is too large; shapes " + shapes_text());
        }
        for (int k = 0; k < node.output_size() && k < static_cast<int>(outs.size()); ++k) {
            Value v;
            v.is_const = true;
            v.c = std::move(outs[static_cast<std::size_t>(k)]);
            v.elem_type = v.c.elem_type;
            v.shape = to_shape(v.c.shape);
            m_values[node.output(k)] = std::move(v);
        }
        return;
    }
    if (op == "Constant") {  // not foldable above only when it has no inputs: all_const holds
        throw GraphError(where + ": unexpected");
    }

    // ---- ops computed by the graph ----
    const int et = has(0) ? arg(0).elem_type : TP::FLOAT;
    auto reshape_to = [&](const std::string& x, const Shape& shape, const std::string& name) {
        emit("Reshape", name, {x}, {{"shape", to_i64(shape)}});
    };
    // a mapping written out as several attngraph nodes: step(op, "suffix", inputs, attrs)
    // emits NAME.suffix (made unique) and returns its name; the mapping's last node is NAME
    auto steps_of = [&](const std::string& name) {
        return [&, name](const std::string& o, const std::string& suffix, const std::vector<std::string>& inputs,
                         const json& attrs = json::object()) {
            const std::string n = unique(name + "." + suffix);
            emit(o, n, inputs, attrs);
            return n;
        };
    };
    // q truncated toward zero into `name` (a float cast to an integer type, an integer Div):
    // Where(q < 0, ⌈q⌉, ⌊q⌋), steps NAME.floor, NAME.ceil, NAME.negative
    auto truncate_into = [&](const std::string& q, const std::string& name) {
        const auto step = steps_of(name);
        const std::string negative = step("Less", "negative", {q, scalar(name + ".zero", 0)});
        emit("Where", name, {negative, step("Ceil", "ceil", {q}), step("Floor", "floor", {q})});
    };
    // a value a mapping makes (an output that grows, a constant of its own) is checked against
    // the memory limit (--max-memory; else 2^31 elements) before anything is allocated
    auto check_size = [&](const Shape& shape, const std::string& what) {
        const std::size_t limit = m_reader.max_elements ? m_reader.max_elements : std::size_t(1) << 31;
        const std::size_t count = element_count_capped(shape);
        if (count > limit)
            throw ShapeError(where + ": " + what + " of shape (" + shape_str(shape) + ") has " +
                             (count == SIZE_MAX ? "too many" : std::to_string(count)) +
                             " elements, over the limit of " + std::to_string(limit) +
                             (m_reader.max_elements ? " (--max-memory)" : "") + "; shapes " + shapes_text());
    };
    // an output with an empty axis is a zero-size constant, which may be a graph output but no
    // op's input (materialize refuses it there)
    auto define_empty = [&](const Shape& s) {
        Value v;
        v.is_const = true;
        v.c = OnnxTensor{TP::FLOAT, to_i64(s), {}};
        v.shape = s;
        v.elem_type = et;
        m_values[out0] = std::move(v);
    };
    if (op == "Identity" || op == "Dropout") {
        check_attrs({"seed", "ratio", "is_test"});
        alias(out0, arg(0));
        if (node.output_size() > 1 && !node.output(1).empty())
            throw GraphError(where + ": the mask output of Dropout is not supported");
        return;
    }
    if (op == "Cast" || op == "CastLike") {
        check_attrs({"to", "saturate", "round_mode"});
        const int to = op == "Cast" ? static_cast<int>(attr_int(node, "to", TP::FLOAT)) : arg(1).elem_type;
        const bool float_to = to == TP::FLOAT || to == TP::DOUBLE || to == TP::FLOAT16 || to == TP::BFLOAT16;
        const bool float_from = et == TP::FLOAT || et == TP::DOUBLE || et == TP::FLOAT16 || et == TP::BFLOAT16;
        if (to == TP::BOOL && et == TP::BOOL) {
            alias(out0, arg(0));
            return;
        }
        if (to == TP::BOOL) {
            // bool: nonzero is true. attngraph holds bools as 0/1 floats: a value known to be
            // 0/1 (a comparison's, cast to float) is already one; any other becomes
            // where(x, 1, 0)
            const Value& x = arg(0);
            if (x.zero_one) {
                Value v = x;
                v.elem_type = to;
                alias(out0, v);
                return;
            }
            const std::string name = out_name(0);
            const std::string one = scalar(name + ".one", 1), zero = scalar(name + ".zero", 0);
            emit("Where", name, {x.name, one, zero});
            define(out0, name, x.shape, TP::BOOL);
            m_values[out0].zero_one = true;
            return;
        }
        if (float_from && !float_to) {
            // to an integer type: truncated toward zero, as C's cast (and numpy's astype, ONNX's
            // reference) does; a value the type cannot hold is not wrapped
            const std::string name = out_name(0);
            truncate_into(materialize(input(0)), name);
            define(out0, name, arg(0).shape, to);
            return;
        }
        // between float types, or from an integer or bool (whole numbers already; an integer
        // type to another is not wrapped either)
        Value v = arg(0);
        v.elem_type = to;
        alias(out0, v);
        return;
    }
    if (op == "And") {
        // bools are 0/1 floats here: a and b = a·b
        check_attrs({});
        const Shape s = broadcast(arg(0).shape, arg(1).shape, where);
        const std::string name = out_name(0);
        emit("Mul", name, {materialize(input(0)), materialize(input(1))});
        define(out0, name, s, TP::BOOL);
        m_values[out0].zero_one = true;
        return;
    }
    if (op == "Or" || op == "Not") {
        // bools are 0/1 floats here: a or b = where(a, 1, b), not a = where(a, 0, 1)
        check_attrs({});
        const Shape s = op == "Or" ? broadcast(arg(0).shape, arg(1).shape, where) : arg(0).shape;
        const std::string name = out_name(0);
        const std::string cond = materialize(input(0));
        if (op == "Or")
            emit("Where", name, {cond, scalar(name + ".one", 1), materialize(input(1))});
        else
            emit("Where", name, {cond, scalar(name + ".zero", 0), scalar(name + ".one", 1)});
        define(out0, name, s, TP::BOOL);
        m_values[out0].zero_one = true;
        return;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
        check_attrs({});
        const Value& a = arg(0);
        const Value& b = arg(1);
        const Shape s = broadcast(a.shape, b.shape, where);
        const std::string name = out_name(0);
        const Value* dyn = !a.is_const ? &a : &b;
        const Value* cst = a.is_const ? &a : (b.is_const ? &b : nullptr);
        const bool scalar_const = cst && cst->c.values.size() == 1 && dyn->shape == s;
        if (op == "Mul" && scalar_const) {
            // torch's attention scale: a Scale, which the fused attention step recognises
            emit("Scale", name, {dyn->name}, {{"factor", cst->c.values[0]}});
        } else if (op == "Div" && is_integer_type(et)) {
            // integers divide truncating toward zero (C's /, ONNX's reference): the quotient
            // NAME.quotient, truncated (exact for the whole numbers f32 holds, |a| < 2^24)
            truncate_into(steps_of(name)("Div", "quotient", {materialize(input(0)), materialize(input(1))}), name);
        } else if (op == "Div" && scalar_const && b.is_const && b.c.values[0] != 0 &&
                   std::isfinite(1.0 / b.c.values[0])) {
            emit("Scale", name, {a.name}, {{"factor", 1.0 / b.c.values[0]}});
        } else {
            emit(op, name, {materialize(input(0)), materialize(input(1))});
        }
        define(out0, name, s, et);
        // a product of 0/1 values (a logical and) is 0/1
        auto zero_one = [](const Value& x) {
            return x.is_const
                       ? std::all_of(x.c.values.begin(), x.c.values.end(), [](double e) { return e == 0 || e == 1; })
                       : x.zero_one;
        };
        if (op == "Mul" && zero_one(a) && zero_one(b)) m_values[out0].zero_one = true;
        return;
    }
    if (op == "Neg" || op == "Exp" || op == "Log" || op == "Tanh" || op == "Erf" || op == "Sqrt" || op == "Sin" ||
        op == "Cos" || op == "Relu" || op == "Sigmoid" || op == "Abs" || op == "Softplus" || op == "Floor" ||
        op == "Ceil" || op == "Round" || op == "Sign") {
        check_attrs({});
        const std::string name = out_name(0);
        emit(op, name, {materialize(input(0))});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Mod") {
        // fmod 1: the sign of a (C's fmod); 0: the sign of b (ONNX allows 0 for integers only;
        // it is as well defined for floats, numpy.mod's, and read so)
        check_attrs({"fmod"});
        const Shape s = broadcast(arg(0).shape, arg(1).shape, where);
        const std::string name = out_name(0);
        emit("Mod", name, {materialize(input(0)), materialize(input(1))}, {{"fmod", attr_int(node, "fmod", 0) != 0}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Gelu") {  // opset 20: written out as torch exports it before (x·½(1 + erf(x/√2)), or tanh's form)
        check_attrs({"approximate"});
        const auto* a = onnx_fold::find_attr(node, "approximate");
        const std::string approximate = a ? a->s() : "none";
        if (approximate != "none" && approximate != "tanh")
            throw GraphError(where + ": approximate '" + approximate + "' is not 'none' or 'tanh'; shapes " +
                             shapes_text());
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        std::string inner;  // erf(x/√2) or tanh(√(2/π)·(x + 0.044715·x³))
        if (approximate == "none") {
            inner = step("Erf", "erf", {step("Scale", "scaled", {x}, {{"factor", 1 / std::sqrt(2.0)}})});
        } else {
            const std::string cube = step("Pow", "cube", {x}, {{"exponent", 3.0}});
            const std::string sum =
                step("Add", "sum", {x, step("Scale", "cube_scaled", {cube}, {{"factor", 0.044715}})});
            inner = step("Tanh", "tanh", {step("Scale", "scaled", {sum}, {{"factor", std::sqrt(2 / M_PI)}})});
        }
        const std::string half_x = step("Scale", "half_x", {x}, {{"factor", 0.5}});
        emit("Mul", name, {half_x, step("Add", "one_plus", {inner, scalar(name + ".one", 1)})});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Reciprocal") {  // 1/x as a Div, exact (onnxscript and tf2onnx write rsqrt as Reciprocal(Sqrt))
        check_attrs({});
        const std::string x = materialize(input(0)), name = out_name(0);
        emit("Div", name, {scalar(name + ".one", 1), x});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "LeakyRelu") {
        check_attrs({"alpha"});
        const std::string name = out_name(0);
        // (ONNX's alpha is a float: its default is 0.01f, as a runtime computing in double reads it)
        emit(op, name, {materialize(input(0))}, {{"alpha", double(attr_float(node, "alpha", 0.01f))}});
        define(out0, name, arg(0).shape, et);
        return;
    }
    // activations written out with the ops above, as ONNX's reference defines them; each step
    // is a traced node (NAME.suffix) and the gradient is that of the steps
    if (op == "HardSigmoid" || op == "HardSwish") {
        // HardSigmoid: clip(alpha·x + beta, 0, 1); HardSwish: x · that with alpha 1/6, beta 1/2
        const bool swish = op == "HardSwish";
        if (swish)
            check_attrs({});
        else
            check_attrs({"alpha", "beta"});
        const double alpha = swish ? 1.0 / 6 : double(attr_float(node, "alpha", 0.2f));
        const double beta = swish ? 0.5 : double(attr_float(node, "beta", 0.5f));
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        const std::string shifted =
            step("Add", "shifted", {step("Scale", "scaled", {x}, {{"factor", alpha}}), scalar(name + ".beta", beta)});
        const json unit = {{"min", 0.0}, {"max", 1.0}};
        if (swish)
            emit("Mul", name, {x, step("Clip", "gate", {shifted}, unit)});
        else
            emit("Clip", name, {shifted}, unit);
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Elu" || op == "Selu" || op == "Celu") {
        // x where x > 0, else alpha·(exp(x) − 1) (Celu: alpha·(exp(x/alpha) − 1); Selu: both
        // sides times gamma). exp reads min(x, 0): the side Where does not pick stays finite, so
        // its zero gradient stays zero (0·exp(100) would be NaN)
        if (op == "Selu")
            check_attrs({"alpha", "gamma"});
        else
            check_attrs({"alpha"});
        const double alpha = double(attr_float(node, "alpha", op == "Selu" ? 1.67326319217681884765625f : 1.0f));
        const double gamma = op == "Selu" ? double(attr_float(node, "gamma", 1.05070102214813232421875f)) : 1.0;
        if (op == "Celu" && alpha == 0)
            throw GraphError(where + ": alpha 0 is not supported (Celu divides by alpha); shapes " + shapes_text());
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        const std::string zero = scalar(name + ".zero", 0), one = scalar(name + ".one", 1);
        const std::string positive = step("Greater", "positive", {x, zero});
        std::string neg = step("Clip", "nonpositive", {x}, {{"max", 0.0}});
        if (op == "Celu" && alpha != 1) neg = step("Div", "over_alpha", {neg, scalar(name + ".alpha", alpha)});
        std::string below = step("Sub", "expm1", {step("Exp", "exp", {neg}), one});
        if (alpha != 1 || op == "Selu") below = step("Scale", "alpha_expm1", {below}, {{"factor", alpha}});
        std::string above = x;
        if (op == "Selu") {
            below = step("Scale", "gamma_below", {below}, {{"factor", gamma}});
            above = step("Scale", "gamma_x", {x}, {{"factor", gamma}});
        }
        emit("Where", name, {positive, above, below});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "ThresholdedRelu") {  // x where x > alpha, else 0
        check_attrs({"alpha"});
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        const std::string above =
            step("Greater", "above", {x, scalar(name + ".alpha", double(attr_float(node, "alpha", 1.0f)))});
        emit("Where", name, {above, x, scalar(name + ".zero", 0)});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "PRelu") {  // x where x >= 0, slope·x where x < 0; slope broadcasts to x's shape
        check_attrs({});
        if (!broadcasts_to(arg(1).shape, arg(0).shape))
            throw ShapeError(where +
                             ": slope does not broadcast to x's shape (PRelu's slope stretches to x, one "
                             "way); shapes " +
                             shapes_text());
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        const std::string negative = step("Less", "negative", {x, scalar(name + ".zero", 0)});
        emit("Where", name, {negative, step("Mul", "scaled", {x, materialize(input(1))}), x});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Mish") {  // x · tanh(softplus(x))
        check_attrs({});
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        emit("Mul", name, {x, step("Tanh", "tanh", {step("Softplus", "softplus", {x})})});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Clip") {
        // the bounds: attributes before opset 11, optional inputs from it (must fold to
        // constant scalars); absent, -inf (min) or inf (max) is no bound
        json attrs = json::object();
        auto bound = [&](const char* which, std::size_t i, double none) {
            double v = none;
            if (m_opset < 11) {
                if (onnx_fold::find_attr(node, which)) v = attr_float(node, which, 0);
            } else if (has(i)) {
                const Value& b = arg(i);
                const std::string what = std::string(which) + " '" + node.input(static_cast<int>(i)) + "'";
                if (!b.is_const)
                    throw ShapeError(where + ": " + what +
                                     " is computed from the graph's inputs, not a constant: its value cannot be "
                                     "resolved statically");
                if (b.c.values.size() != 1)
                    throw ShapeError(where + ": " + what + " of shape (" + shape_str(b.shape) +
                                     ") is not a scalar (Clip's bounds are one number)");
                v = b.c.values[0];
            }
            if (std::isnan(v) || (std::isinf(v) && v != none))
                throw GraphError(where + ": " + which + " " +
                                 (std::isnan(v) ? "NaN"
                                  : v > 0       ? "inf"
                                                : "-inf") +
                                 " is not supported (a bound is a finite number, or -inf for min and inf for max)");
            if (v != none) attrs[which] = v;
        };
        if (m_opset < 11) {
            check_attrs({"min", "max"});
        } else {
            check_attrs({});
            if (in.size() > 3)
                throw GraphError(where + ": Clip takes at most 3 inputs, not " + std::to_string(in.size()));
        }
        bound("min", 1, -std::numeric_limits<double>::infinity());
        bound("max", 2, std::numeric_limits<double>::infinity());
        const std::string name = out_name(0);
        emit(op, name, {materialize(input(0))}, attrs);
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
        // variadic with broadcasting: a chain of attngraph's binary op (Add for Sum and Mean),
        // NAME.1, NAME.2, ... the running result after each further input, NAME the last;
        // Mean's last sum is NAME.sum, scaled by 1/n into NAME
        check_attrs({});
        const Value& first = arg(0);
        Shape s = first.shape;
        for (std::size_t k = 1; k < in.size(); ++k) s = broadcast(s, arg(k).shape, where);
        if (in.size() == 1) {
            alias(out0, first);
            return;
        }
        const std::string binary = op == "Sum" || op == "Mean" ? "Add" : op;
        const std::string name = out_name(0);
        std::string acc = materialize(input(0));
        for (std::size_t k = 1; k < in.size(); ++k) {
            const std::string step = k + 1 < in.size() ? unique(name + "." + std::to_string(k))
                                     : op == "Mean"    ? unique(name + ".sum")
                                                       : name;
            emit(binary, step, {acc, materialize(input(k))});
            acc = step;
        }
        if (op == "Mean") emit("Scale", name, {acc}, {{"factor", 1.0 / static_cast<double>(in.size())}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Pow") {
        check_attrs({});
        const Value& x = arg(0);
        const Value& y = arg(1);
        if (!y.is_const || y.c.values.empty() ||
            std::any_of(y.c.values.begin(), y.c.values.end(), [&](double e) { return e != y.c.values[0]; }))
            throw GraphError(where +
                             ": an exponent that is not one constant number is not supported (attngraph's "
                             "Pow takes a scalar exponent); shapes " +
                             shapes_text());
        const Shape s = broadcast(x.shape, y.shape, where);
        const std::string name = out_name(0);
        std::string xn = x.name;
        if (s != x.shape) {  // an exponent tensor of a larger shape broadcasts x
            xn = unique(name + ".x");
            emit("Expand", xn, {x.name}, {{"shape", to_i64(s)}});
        }
        emit("Pow", name, {xn}, {{"exponent", y.c.values[0]}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Where") {
        check_attrs({});
        const Shape s = broadcast(broadcast(arg(0).shape, arg(1).shape, where), arg(2).shape, where);
        const std::string name = out_name(0);
        emit("Where", name, {materialize(input(0)), materialize(input(1)), materialize(input(2))});
        define(out0, name, s, arg(1).elem_type);
        return;
    }
    if (op == "Equal" || op == "Less" || op == "Greater") {
        check_attrs({});
        const Shape s = broadcast(arg(0).shape, arg(1).shape, where);
        const std::string name = out_name(0);
        emit(op, name, {materialize(input(0)), materialize(input(1))});
        define(out0, name, s, TP::BOOL);
        m_values[out0].zero_one = true;
        return;
    }
    if (op == "LessOrEqual" || op == "GreaterOrEqual") {
        // a <= b as where(a < b, 1, a == b) (NAME.less or NAME.greater, NAME.equal): NaN gives 0
        check_attrs({});
        const Shape s = broadcast(arg(0).shape, arg(1).shape, where);
        const std::string a = materialize(input(0)), b = materialize(input(1)), name = out_name(0);
        const auto step = steps_of(name);
        const std::string strict =
            op == "LessOrEqual" ? step("Less", "less", {a, b}) : step("Greater", "greater", {a, b});
        emit("Where", name, {strict, scalar(name + ".one", 1), step("Equal", "equal", {a, b})});
        define(out0, name, s, TP::BOOL);
        m_values[out0].zero_one = true;
        return;
    }
    if (op == "IsNaN" || op == "IsInf") {
        // IsNaN: where(x == x, 0, 1) (NAME.self_equal); IsInf: |x| (or x, or −x) above the dtype's
        // largest finite number (NAME.abs, NAME.beyond)
        if (op == "IsNaN")
            check_attrs({});
        else
            check_attrs({"detect_negative", "detect_positive"});
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        if (op == "IsNaN") {
            emit("Where", name,
                 {step("Equal", "self_equal", {x, x}), scalar(name + ".zero", 0), scalar(name + ".one", 1)});
        } else {
            const bool neg = attr_int(node, "detect_negative", 1) != 0, pos = attr_int(node, "detect_positive", 1) != 0;
            const double big = m_options.dtype == DType::f32 ? double(std::numeric_limits<float>::max())
                                                             : std::numeric_limits<double>::max();
            if (neg && pos)
                emit("Greater", name, {step("Abs", "abs", {x}), scalar(name + ".beyond", big)});
            else if (pos)
                emit("Greater", name, {x, scalar(name + ".beyond", big)});
            else if (neg)
                emit("Less", name, {x, scalar(name + ".beyond", -big)});
            else  // detects nothing: 0 everywhere
                emit("Where", name,
                     {step("Equal", "self_equal", {x, x}), scalar(name + ".zero", 0), scalar(name + ".zero_too", 0)});
        }
        define(out0, name, arg(0).shape, TP::BOOL);
        m_values[out0].zero_one = true;
        return;
    }
    if (op == "Softsign") {  // x / (1 + |x|) (NAME.abs, NAME.one_plus)
        check_attrs({});
        const std::string x = materialize(input(0)), name = out_name(0);
        const auto step = steps_of(name);
        emit("Div", name, {x, step("Add", "one_plus", {step("Abs", "abs", {x}), scalar(name + ".one", 1)})});
        define(out0, name, arg(0).shape, et);
        return;
    }
    if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
        // x (N, C, D1, ...): ReduceMean / ReduceMax over the spatial axes, kept as 1s (torch's
        // AdaptiveAvgPool / AdaptiveMaxPool to size 1, in front of a classifier head)
        check_attrs({});
        const Value& x = arg(0);
        if (x.shape.size() < 3)
            throw ShapeError(where + ": x must be (N, C, D1, ...), with spatial axes; shapes " + shapes_text());
        std::vector<std::int64_t> axes;
        Shape s(x.shape.begin(), x.shape.begin() + 2);
        for (std::size_t d = 2; d < x.shape.size(); ++d) {
            axes.push_back(static_cast<std::int64_t>(d));
            s.push_back(1);
        }
        const std::string name = out_name(0);
        emit(op == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax", name, {materialize(input(0))},
             {{"axes", axes}, {"keepdims", 1}, {"noop_with_empty_axes", 0}});
        define(out0, name, s, et);
        return;
    }
    if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceL1" ||
        op == "ReduceL2" || op == "ReduceSumSquare" || op == "ReduceLogSum" || op == "ReduceLogSumExp") {
        check_attrs({"axes", "keepdims", "noop_with_empty_axes"});
        const Value& x = arg(0);
        // axes: an input from opset 13 (ReduceSum) / 18 (the others), an attribute before
        std::vector<std::int64_t> axes = has(1) ? const_ints(1, "axes") : attr_ints(node, "axes");
        const bool keep = attr_int(node, "keepdims", 1) != 0;
        const bool noop = attr_int(node, "noop_with_empty_axes", 0) != 0;
        std::vector<bool> reduced(x.shape.size(), axes.empty() && !noop);
        for (auto& ax : axes) {
            ax = normalize(ax, x.shape.size(), where);
            reduced[static_cast<std::size_t>(ax)] = true;
        }
        Shape s;
        for (std::size_t i = 0; i < x.shape.size(); ++i)
            if (!reduced[i])
                s.push_back(x.shape[i]);
            else if (keep)
                s.push_back(1);
        const std::string name = out_name(0);
        const json attrs = {{"axes", axes}, {"keepdims", keep ? 1 : 0}, {"noop_with_empty_axes", noop ? 1 : 0}};
        if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax") {
            emit(op, name, {x.name}, attrs);
        } else if (axes.empty() && noop) {
            alias(out0, x);  // nothing reduced: the input, as ONNX's reference returns it
            return;
        } else {
            // written out: min = −max(−x), L1 = sum(|x|), sum of squares = sum(x·x), L2 = √ of that,
            // log-sum = log(sum(x)), log-sum-exp = m + log(sum(exp(x − m))) with m = max(x) (kept
            // dims, then reshaped)
            const auto step = steps_of(name);
            const std::string xn = materialize(input(0));
            if (op == "ReduceLogSumExp") {
                // the shift m is max(x), 0 where that is ±inf (torch.logsumexp's rule): a +inf
                // gives inf (not inf − inf), all −inf gives log 0 = −inf
                json kept = attrs;
                kept["keepdims"] = 1;
                const std::string max = step("ReduceMax", "max", {xn}, kept);
                const std::string infinite =
                    step("Equal", "max_is_inf", {step("Abs", "max_abs", {max}), scalar(name + ".inf", INFINITY)});
                const std::string m = step("Where", "shift", {infinite, scalar(name + ".zero", 0), max});
                const std::string sum =
                    step("ReduceSum", "sum", {step("Exp", "exp", {step("Sub", "shifted", {xn, m})})}, kept);
                const std::string lse = step("Log", "log_sum", {sum});
                if (keep) {
                    emit("Add", name, {lse, m});
                } else {
                    reshape_to(step("Add", "kept", {lse, m}), s, name);
                }
            } else if (op == "ReduceLogSum") {
                emit("Log", name, {step("ReduceSum", "sum", {xn}, attrs)});
            } else if (op == "ReduceMin") {
                emit("Neg", name, {step("ReduceMax", "max_negated", {step("Neg", "negated", {xn})}, attrs)});
            } else if (op == "ReduceL1") {
                emit("ReduceSum", name, {step("Abs", "abs", {xn})}, attrs);
            } else {
                const std::string square = step("Mul", "square", {xn, xn});
                if (op == "ReduceSumSquare")
                    emit("ReduceSum", name, {square}, attrs);
                else
                    emit("Sqrt", name, {step("ReduceSum", "sum_square", {square}, attrs)});
            }
        }
        define(out0, name, s, et);
        return;
    }
    if (op == "Expand") {
        check_attrs({});
        const Value& x = arg(0);
        const std::vector<std::int64_t> shape = const_ints(1, "shape");
        if (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; }))
            throw ShapeError(where + ": a negative dimension in the shape; shapes " + shapes_text());
        const Shape s = broadcast(x.shape, to_shape(shape), where);
        const std::string name = out_name(0);
        emit("Expand", name, {x.name}, {{"shape", to_i64(s)}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Gather") {
        check_attrs({"axis"});
        const Value& x = arg(0);
        const Value& idx = arg(1);
        const auto axis = static_cast<std::size_t>(normalize(attr_int(node, "axis", 0), x.shape.size(), where));
        if (idx.is_const)
            for (double i : idx.c.values)
                if (!(i >= -static_cast<double>(x.shape[axis]) && i < static_cast<double>(x.shape[axis])))  // NaN too
                    throw ShapeError(where + ": index " +
                                     (std::isnan(i)
                                          ? std::string("NaN")
                                          : std::to_string(static_cast<std::int64_t>(std::clamp(i, -9.2e18, 9.2e18)))) +
                                     " is out of range for axis " + std::to_string(axis) + "; shapes " + shapes_text());
        Shape s(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis));
        s.insert(s.end(), idx.shape.begin(), idx.shape.end());
        s.insert(s.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape.end());
        const std::string name = out_name(0);
        emit("Gather", name, {materialize(input(0)), materialize(input(1))},
             {{"axis", static_cast<std::int64_t>(axis)}});
        define(out0, name, s, et);
        return;
    }
    if (op == "GatherElements") {
        // attngraph's op of that name (torch.gather); indices computed or constant, checked when
        // the graph runs as Gather's
        check_attrs({"axis"});
        const auto axis = normalize(attr_int(node, "axis", 0), arg(0).shape.size(), where);
        try {  // the op's own rule, so that a mismatch is the node's import error
            ops::GatherElements::infer_shape({static_cast<int>(axis)}, {arg(0).shape, arg(1).shape});
        } catch (const ShapeError& e) {
            throw ShapeError(where + ": " + e.what() + "; shapes " + shapes_text());
        }
        const std::string name = out_name(0);
        emit(op, name, {materialize(input(0)), materialize(input(1))}, {{"axis", axis}});
        define(out0, name, arg(1).shape, et);
        return;
    }
    if (op == "TopK") {
        // K must fold to a constant (opset 10 on; an attribute before); positions are int64 values
        check_attrs({"k", "axis", "largest", "sorted"});
        const Value& x = arg(0);
        if (x.shape.empty())
            throw ShapeError(where + ": TopK takes a tensor of rank 1 or more; shapes " + shapes_text());
        const std::vector<std::int64_t> k =
            has(1) ? const_ints(1, "K") : std::vector<std::int64_t>{attr_int(node, "k", 0)};
        const auto axis = normalize(attr_int(node, "axis", -1), x.shape.size(), where);
        const std::size_t len = x.shape[static_cast<std::size_t>(axis)];
        if (k.size() != 1 || k[0] < 1 || static_cast<std::uint64_t>(k[0]) > len)
            throw ShapeError(where + ": K must be one number from 1 to " + std::to_string(len) +
                             " (the axis' length; 0 would give empty outputs); shapes " + shapes_text());
        // the node is OUT.topk (OUT: output 0's name), its values and positions OUT.topk:0 and
        // OUT.topk:1, so that a graph output keeps its own name for the node passing it on
        const std::string name = unique(sanitize_onnx_name(out0) + ".topk");
        emit("TopK", name, {materialize(input(0))},
             {{"k", k[0]}, {"axis", axis}, {"largest", attr_int(node, "largest", 1) != 0 ? 1 : 0}});
        Shape s = x.shape;
        s[static_cast<std::size_t>(axis)] = static_cast<std::size_t>(k[0]);
        define(node.output(0), name + ":0", s, et);
        if (node.output_size() > 1 && !node.output(1).empty()) define(node.output(1), name + ":1", s, TP::INT64);
        return;
    }
    if (op == "ArgMax" || op == "ArgMin") {
        check_attrs({"axis", "keepdims", "select_last_index"});
        const Value& x = arg(0);
        if (x.shape.empty())
            throw ShapeError(where + ": " + op + " takes a tensor of rank 1 or more; shapes " + shapes_text());
        const auto axis = normalize(attr_int(node, "axis", 0), x.shape.size(), where);
        const bool keep = attr_int(node, "keepdims", 1) != 0;
        Shape s = x.shape;
        if (keep)
            s[static_cast<std::size_t>(axis)] = 1;
        else
            s.erase(s.begin() + axis);
        const std::string name = out_name(0);
        emit(op, name, {materialize(input(0))},
             {{"axis", axis},
              {"keepdims", keep ? 1 : 0},
              {"select_last_index", attr_int(node, "select_last_index", 0) != 0 ? 1 : 0}});
        define(out0, name, s, TP::INT64);
        return;
    }
    if (op == "ScatterElements" || op == "ScatterND") {
        // attngraph's ops of the same names (indices: computed ones too, checked when the graph
        // runs; constant ones become a param); every reduction
        if (op == "ScatterND")
            check_attrs({"reduction"});
        else
            check_attrs({"axis", "reduction"});
        const auto* r = onnx_fold::find_attr(node, "reduction");
        const std::string reduction = r ? r->s() : "none";
        const std::string name = out_name(0);
        const std::vector<Shape> shapes = {arg(0).shape, arg(1).shape, arg(2).shape};
        json attrs = {{"reduction", reduction}};
        try {  // the ops' own rules, so that a mismatch is the node's import error
            if (op == "ScatterElements") {
                const auto axis = normalize(attr_int(node, "axis", 0), arg(0).shape.size(), where);
                ops::ScatterElements::infer_shape({static_cast<int>(axis), reduction}, shapes);
                attrs["axis"] = axis;
            } else {
                ops::ScatterND::infer_shape({reduction}, shapes);
            }
        } catch (const ShapeError& e) {
            throw ShapeError(where + ": " + e.what());
        } catch (const GraphError& e) {
            throw GraphError(where + ": " + e.what());
        }
        emit(op, name, {materialize(input(0)), materialize(input(1)), materialize(input(2))}, attrs);
        define(out0, name, arg(0).shape, et);
        return;
    }
    // Conv's and AveragePool's strides, dilations and pads for x of shape xs (N, C, D1..Dk) and
    // a window of `kernel` per spatial axis: auto_pad's SAME_* and VALID become explicit pads
    // here (the shapes are known)
    const auto window_attrs = [&](const Shape& xs, const std::vector<std::size_t>& kernel) {
        const std::size_t k = xs.size() - 2;
        const auto list = [&](const char* name, std::size_t len, std::int64_t fallback) {
            std::vector<std::int64_t> v =
                onnx_fold::find_attr(node, name) ? attr_ints(node, name) : std::vector<std::int64_t>(len, fallback);
            std::vector<int> r;
            for (std::int64_t e : v) {
                if (e < INT_MIN || e > INT_MAX) throw ShapeError(where + ": " + name + " entry out of range");
                r.push_back(static_cast<int>(e));
            }
            return r;
        };
        ops::ConvAttrs a;
        a.strides = list("strides", k, 1);
        a.dilations = list("dilations", k, 1);
        const auto* ap = onnx_fold::find_attr(node, "auto_pad");
        const std::string auto_pad = ap ? ap->s() : "NOTSET";
        if (auto_pad == "NOTSET") {
            a.pads = list("pads", 2 * k, 0);
        } else if (auto_pad == "VALID") {
            a.pads = std::vector<int>(2 * k, 0);
        } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
            // output ceil(D / stride): the total pad split evenly, the odd one at the end (UPPER)
            std::vector<int> pads(2 * k, 0);
            for (std::size_t d = 0; d < k && d < a.strides->size() && d < a.dilations->size(); ++d) {
                const long stride = std::max((*a.strides)[d], 1), dil = (*a.dilations)[d];
                const long in_len = static_cast<long>(xs[d + 2]), out_len = (in_len + stride - 1) / stride;
                const long total =
                    std::max(0L, (out_len - 1) * stride + dil * (static_cast<long>(kernel[d]) - 1) + 1 - in_len);
                const long small = total / 2, large = total - small;
                pads[d] = static_cast<int>(auto_pad == "SAME_UPPER" ? small : large);
                pads[d + k] = static_cast<int>(auto_pad == "SAME_UPPER" ? large : small);
            }
            a.pads = pads;
        } else {
            throw GraphError(where + ": auto_pad '" + auto_pad +
                             "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID; shapes " + shapes_text());
        }
        return a;
    };
    if (op == "Conv") {
        // attngraph's Conv (ops/conv.hpp): 1 to 3 spatial axes; kernel_shape must be W's
        check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
        const Shape &xs = arg(0).shape, &ws = arg(1).shape;
        if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size())
            throw ShapeError(where + ": x must be (N, C, D1..Dk) with 1 to 3 spatial axes and W of its rank");
        const std::size_t k = xs.size() - 2;
        if (onnx_fold::find_attr(node, "kernel_shape")) {
            const std::vector<std::int64_t> ks = attr_ints(node, "kernel_shape");
            if (ks.size() != k || !std::equal(ks.begin(), ks.end(), ws.begin() + 2, [](std::int64_t a, std::size_t b) {
                    return a >= 0 && std::size_t(a) == b;
                }))
                throw ShapeError(where + ": kernel_shape does not match W's spatial axes");
        }
        ops::ConvAttrs a = window_attrs(xs, std::vector<std::size_t>(ws.begin() + 2, ws.end()));
        a.group = static_cast<int>(attr_int(node, "group", 1));
        std::vector<Shape> shapes = {xs, ws};
        std::vector<std::string> inputs = {materialize(input(0)), materialize(input(1))};
        if (has(2)) {
            shapes.push_back(arg(2).shape);
            inputs.push_back(materialize(input(2)));
        }
        Shape ys;
        try {  // the op's own shape rule, so that a mismatch is the node's import error
            ys = ops::Conv::infer_shape(a, shapes);
        } catch (const ShapeError& e) {
            throw ShapeError(where + ": " + e.what());
        }
        const std::string name = out_name(0);
        emit(op, name, inputs, attrs_to_json(a));
        define(out0, name, ys, et);
        return;
    }
    if (op == "AveragePool") {
        // a depthwise Conv (group C) with the constant window `NAME.window` (C, 1, k1..kk) of
        // 1/|window|. With count_include_pad 0 and pads: a window of ones (`NAME.sum`) divided by
        // `NAME.count` (1, 1, out...), the input positions each window covers. ceil_mode 1 is
        // refused where it adds a partial window.
        check_attrs({"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"});
        const Shape& xs = arg(0).shape;
        if (xs.size() < 3 || xs.size() > 5)
            throw ShapeError(where + ": x must be (N, C, D1..Dk) with 1 to 3 spatial axes; shapes " + shapes_text());
        const std::size_t k = xs.size() - 2, channels = xs[1];
        if (!onnx_fold::find_attr(node, "kernel_shape"))
            throw GraphError(where + ": the attribute kernel_shape is required; shapes " + shapes_text());
        std::vector<std::size_t> kernel;
        for (std::int64_t e : attr_ints(node, "kernel_shape")) {
            if (e < 1 || e > INT_MAX) throw ShapeError(where + ": kernel_shape entries must be at least 1");
            kernel.push_back(static_cast<std::size_t>(e));
        }
        if (kernel.size() != k)
            throw ShapeError(where + ": kernel_shape has " + std::to_string(kernel.size()) + " entries, " +
                             std::to_string(k) + " needed for " + std::to_string(k) + " spatial axes");
        ops::ConvAttrs a = window_attrs(xs, kernel);
        a.group = static_cast<int>(channels);
        Shape ws = {channels, 1};
        ws.insert(ws.end(), kernel.begin(), kernel.end());
        Shape ys;
        try {
            ys = ops::Conv::infer_shape(a, {xs, ws});
        } catch (const ShapeError& e) {
            throw ShapeError(where + ": " + e.what());
        }
        const std::vector<int>&strides = *a.strides, &dilations = *a.dilations, &pads = *a.pads;
        if (attr_int(node, "ceil_mode", 0) != 0)
            for (std::size_t d = 0; d < k; ++d) {
                const long span = static_cast<long>(xs[d + 2]) + pads[d] + pads[d + k] -
                                  dilations[d] * (static_cast<long>(kernel[d]) - 1) - 1;
                if ((span + strides[d] - 1) / strides[d] + 1 != static_cast<long>(ys[d + 2]))
                    throw GraphError(where + ": ceil_mode 1 adds a partial window at the end of spatial axis " +
                                     std::to_string(d) + ", which is not supported; shapes " + shapes_text());
            }
        const std::size_t window = element_count(kernel);
        const bool padded = std::any_of(pads.begin(), pads.end(), [](int p) { return p != 0; });
        const bool divide = attr_int(node, "count_include_pad", 0) == 0 && padded;
        const std::string name = out_name(0);
        const std::string w = constant(name + ".window", TP::FLOAT, ws,
                                       std::vector<double>(channels * window, divide ? 1.0 : 1.0 / double(window)));
        if (!divide) {
            emit("Conv", name, {materialize(input(0)), w}, attrs_to_json(a));
        } else {
            // count[o] = Π over axes of the window taps o_d·stride − pad + j·dilation inside x
            Shape cs = {1, 1};
            cs.insert(cs.end(), ys.begin() + 2, ys.end());
            std::vector<double> count(element_count(cs), 1.0);
            for (std::size_t o = 0; o < count.size(); ++o) {
                std::size_t rest = o;
                for (std::size_t d = k; d-- > 0;) {
                    const long at = static_cast<long>(rest % ys[d + 2]) * strides[d] - pads[d];
                    rest /= ys[d + 2];
                    long inside = 0;
                    for (std::size_t j = 0; j < kernel[d]; ++j) {
                        const long p = at + static_cast<long>(j) * dilations[d];
                        inside += p >= 0 && p < static_cast<long>(xs[d + 2]);
                    }
                    count[o] *= static_cast<double>(inside);
                }
                if (count[o] == 0)
                    throw ShapeError(where +
                                     ": a window covers no position of x (pads as wide as the window); shapes " +
                                     shapes_text());
            }
            emit("Conv", name + ".sum", {materialize(input(0)), w}, attrs_to_json(a));
            emit("Div", name, {name + ".sum", constant(name + ".count", TP::FLOAT, cs, count)});
        }
        define(out0, name, ys, et);
        return;
    }
    if (op == "BatchNormalization") {
        // inference mode (a model exported in eval mode): y = x·a + c per channel (axis 1), with
        // a = scale / √(var + ε) and c = B − mean·a folded from the constant statistics into
        // `NAME.factor` and `NAME.shift` ((C, 1, ..., 1) for x of rank r: r − 1 axes), applied by
        // `NAME.scaled` (Mul) and NAME (Add)
        check_attrs({"epsilon", "momentum", "training_mode", "spatial"});
        const Value& x = arg(0);
        if (attr_int(node, "training_mode", 0) != 0)
            throw GraphError(where + ": training_mode 1 (batch statistics) is not supported, only inference; shapes " +
                             shapes_text());
        for (int k = 1; k < node.output_size(); ++k)
            if (!node.output(k).empty())
                throw GraphError(where + ": the running statistics outputs (training mode) are not supported; shapes " +
                                 shapes_text());
        if (attr_int(node, "spatial", 1) != 1)
            throw GraphError(where + ": spatial 0 (statistics per element) is not supported; shapes " + shapes_text());
        if (x.shape.size() < 2) throw ShapeError(where + ": x must be (N, C, ...)");
        const std::size_t channels = x.shape[1];
        const char* what[] = {"", "scale", "B", "input_mean", "input_var"};
        for (std::size_t i = 1; i <= 4; ++i) {
            if (arg(i).shape != Shape{channels})
                throw ShapeError(where + ": " + what[i] + " must be (" + std::to_string(channels) + "), x's channels");
            if (!arg(i).is_const)
                throw ShapeError(where + ": " + what[i] + " '" + node.input(static_cast<int>(i)) +
                                 "' is computed from the graph's inputs: only constant statistics and weights are "
                                 "supported (inference mode)");
        }
        const double eps = attr_float(node, "epsilon", 1e-5f);
        std::vector<double> factor(channels), shift(channels);
        for (std::size_t c = 0; c < channels; ++c) {
            factor[c] = arg(1).c.values[c] / std::sqrt(arg(4).c.values[c] + eps);
            shift[c] = arg(2).c.values[c] - arg(3).c.values[c] * factor[c];
        }
        Shape per_channel(x.shape.size() - 1, 1);
        per_channel[0] = channels;
        const std::string name = out_name(0);
        const std::string f = constant(name + ".factor", TP::FLOAT, per_channel, factor),
                          b = constant(name + ".shift", TP::FLOAT, per_channel, shift);
        emit("Mul", name + ".scaled", {materialize(input(0)), f});
        emit("Add", name, {name + ".scaled", b});
        define(out0, name, x.shape, et);
        return;
    }
    // input i (a per-channel or per-group scale or bias) as `shape`, named `as`: a constant of
    // that shape, or a Reshape when computed (InstanceNormalization, GroupNormalization)
    const auto input_as_shape = [&](std::size_t i, const std::string& as, const Shape& shape) {
        if (arg(i).is_const) return constant(as, TP::FLOAT, shape, arg(i).c.values);
        emit("Reshape", as, {materialize(input(i))},
             {{"shape", std::vector<std::int64_t>(shape.begin(), shape.end())}});
        return as;
    };
    if (op == "InstanceNormalization") {
        // x normalized over its spatial axes per (n, c): `NAME.normalized`, a LayerNormalization
        // from axis 2 (its scale `NAME.one`); then times scale and plus B per channel (`NAME.scaled`,
        // NAME), each (C) reshaped to (C, 1, ..., 1) (`NAME.scale`, `NAME.bias` when computed)
        check_attrs({"epsilon"});
        const Value& x = arg(0);
        if (x.shape.size() < 3) throw ShapeError(where + ": x must be (N, C, D1, ...)");
        const std::size_t channels = x.shape[1];
        for (std::size_t i = 1; i <= 2; ++i)
            if (arg(i).shape != Shape{channels})
                throw ShapeError(where + ": " + (i == 1 ? "scale" : "B") + " must be (" + std::to_string(channels) +
                                 "), x's channels");
        const std::string name = out_name(0);
        Shape per_channel(x.shape.size() - 1, 1);
        per_channel[0] = channels;
        const double eps = attr_float(node, "epsilon", 1e-5f);
        emit("LayerNormalization", name + ".normalized",
             {materialize(input(0)), constant(name + ".one", TP::FLOAT, {1}, {1.0})}, {{"axis", 2}, {"epsilon", eps}});
        emit("Mul", name + ".scaled", {name + ".normalized", input_as_shape(1, name + ".scale", per_channel)});
        emit("Add", name, {name + ".scaled", input_as_shape(2, name + ".bias", per_channel)});
        define(out0, name, x.shape, et);
        return;
    }
    if (op == "GroupNormalization") {
        // x (N, C, D1, ...) normalized per (n, group) over the group's C/G channels and the
        // spatial axes: `NAME.grouped` (N, G, C/G·D1·...), `NAME.normalized` a LayerNormalization
        // from axis 2 (its scale `NAME.one`). Opset 18's scale and bias are per group, (G): applied
        // there as (G, 1) (`NAME.group_scaled`, `NAME.group_shifted`), then NAME the Reshape back
        // to x's shape. From opset 21 they are per channel, (C): NAME.ungrouped the Reshape back,
        // then `NAME.scaled` and NAME as InstanceNormalization's. stash_type: the graph's dtype.
        check_attrs({"epsilon", "num_groups", "stash_type"});
        const Value& x = arg(0);
        if (!onnx_fold::find_attr(node, "num_groups"))
            throw GraphError(where + ": the attribute num_groups is required; shapes " + shapes_text());
        if (x.shape.size() < 2) throw ShapeError(where + ": x must be (N, C, ...); shapes " + shapes_text());
        const std::int64_t groups = attr_int(node, "num_groups", 0);
        const std::size_t channels = x.shape[1];
        if (groups < 1 || channels % static_cast<std::size_t>(groups) != 0)
            throw ShapeError(where + ": num_groups " + std::to_string(groups) + " does not divide x's channels " +
                             std::to_string(channels) + "; shapes " + shapes_text());
        const auto g = static_cast<std::size_t>(groups);
        const bool per_channel = m_opset >= 21;
        const std::size_t affine = per_channel ? channels : g;
        for (std::size_t i = 1; i <= 2; ++i)
            if (arg(i).shape != Shape{affine})
                throw ShapeError(where + ": " + (i == 1 ? "scale" : "bias") + " must be (" + std::to_string(affine) +
                                 "), " + (per_channel ? "x's channels" : "num_groups (opset 18; per channel from 21)") +
                                 "; shapes " + shapes_text());
        const std::string name = out_name(0);
        std::size_t group_size = channels / g;
        for (std::size_t d = 2; d < x.shape.size(); ++d) group_size *= x.shape[d];
        const std::vector<std::int64_t> grouped = {static_cast<std::int64_t>(x.shape[0]), groups,
                                                   static_cast<std::int64_t>(group_size)},
                                        back(x.shape.begin(), x.shape.end());
        const double eps = attr_float(node, "epsilon", 1e-5f);
        emit("Reshape", name + ".grouped", {materialize(input(0))}, {{"shape", grouped}});
        emit("LayerNormalization", name + ".normalized",
             {name + ".grouped", constant(name + ".one", TP::FLOAT, {1}, {1.0})}, {{"axis", 2}, {"epsilon", eps}});
        if (per_channel) {
            Shape channelwise(x.shape.size() - 1, 1);
            channelwise[0] = channels;
            emit("Reshape", name + ".ungrouped", {name + ".normalized"}, {{"shape", back}});
            emit("Mul", name + ".scaled", {name + ".ungrouped", input_as_shape(1, name + ".scale", channelwise)});
            emit("Add", name, {name + ".scaled", input_as_shape(2, name + ".bias", channelwise)});
        } else {
            emit("Mul", name + ".group_scaled", {name + ".normalized", input_as_shape(1, name + ".scale", {g, 1})});
            emit("Add", name + ".group_shifted", {name + ".group_scaled", input_as_shape(2, name + ".bias", {g, 1})});
            emit("Reshape", name, {name + ".group_shifted"}, {{"shape", back}});
        }
        define(out0, name, x.shape, et);
        return;
    }
    if (op == "RMSNormalization" || op == "LayerNormalization") {
        check_attrs({"axis", "epsilon", "stash_type"});
        const Value& x = arg(0);
        const std::int64_t axis = normalize(attr_int(node, "axis", -1), x.shape.size(), where);
        const Shape tail(x.shape.begin() + axis, x.shape.end());
        for (std::size_t i = 1; i < in.size(); ++i)
            if (has(i) && !broadcasts_to(arg(i).shape, tail))
                throw ShapeError(where + ": " + (i == 1 ? "scale" : "bias") +
                                 " does not broadcast to x.shape[axis:] = (" + shape_str(tail) + "); shapes " +
                                 shapes_text());
        json attrs = {{"axis", axis}, {"epsilon", static_cast<double>(attr_float(node, "epsilon", 1e-5f))}};
        std::vector<std::string> inputs{x.name, materialize(input(1))};
        if (op == "LayerNormalization" && has(2)) inputs.push_back(materialize(input(2)));
        const bool stats = op == "LayerNormalization" && ((node.output_size() > 1 && !node.output(1).empty()) ||
                                                          (node.output_size() > 2 && !node.output(2).empty()));
        if (stats) attrs["stats"] = 1;
        const std::string name = out_name(0);
        emit(op, name, inputs, attrs);
        if (!stats) {
            define(out0, name, x.shape, et);
            return;
        }
        // Mean and InvStdDev: x.shape[:axis] followed by 1s
        Shape ss(x.shape.begin(), x.shape.begin() + axis);
        ss.resize(x.shape.size(), 1);
        define(out0, name + ":0", x.shape, et);
        for (int k = 1; k < 3 && k < node.output_size(); ++k)
            if (!node.output(k).empty()) define(node.output(k), name + ":" + std::to_string(k), ss, et);
        return;
    }
    if (op == "Attention") {
        // softmax_precision names the type softmax runs in: here always the graph's dtype
        check_attrs({"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                     "softmax_precision"});
        if (has(6))
            throw GraphError(where + ": input nonpad_kv_seqlen (opset 24) is not supported; shapes " + shapes_text() +
                             " (supported ops: docs/onnx.md)");
        AttentionAttrs a;
        if (onnx_fold::find_attr(node, "scale")) a.scale = static_cast<double>(attr_float(node, "scale", 0.0f));
        a.is_causal = static_cast<int>(attr_int(node, "is_causal", 0));
        a.softcap = static_cast<double>(attr_float(node, "softcap", 0.0f));
        if (onnx_fold::find_attr(node, "q_num_heads"))
            a.q_num_heads = static_cast<int>(attr_int(node, "q_num_heads", 0));
        if (onnx_fold::find_attr(node, "kv_num_heads"))
            a.kv_num_heads = static_cast<int>(attr_int(node, "kv_num_heads", 0));
        a.qk_matmul_output_mode = static_cast<int>(attr_int(node, "qk_matmul_output_mode", 0));
        if (has(3)) a.mask_type = arg(3).elem_type == TP::BOOL ? "boolean" : "additive";
        std::vector<std::optional<onnx_import::AttentionOperand>> operands(6);
        for (std::size_t i = 0; i < 6; ++i)
            if (has(i)) operands[i] = onnx_import::AttentionOperand{materialize(input(i)), arg(i).shape};
        for (const auto& o : operands)  // the expansion holds each operand once (zeros) while it builds
            if (o &&
                element_count_capped(o->shape) > (m_reader.max_elements ? m_reader.max_elements : std::size_t(1) << 31))
                throw ShapeError(where + ": operand '" + o->name +
                                 "' is over the memory limit (--max-memory); shapes " + shapes_text());
        const std::string name = unique(sanitize_onnx_name(node_name));
        onnx_import::AttentionExpansion e;
        try {
            e = onnx_import::expand_attention(name, operands, a, m_options.dtype);
        } catch (const Error& err) {
            // attention() names the node and the operands' shapes
            throw ShapeError(m_where + ": " + err.what());
        }
        for (const auto& n : e.nodes) {
            const std::string nn = n["name"];
            if (m_used.count(nn))
                throw GraphError(where + ": its step '" + nn + "' clashes with another value of the model");
            m_used.insert(nn);
            m_out.graph["nodes"].push_back(n);
        }
        auto output = [&](int k, const std::string& value) {
            if (k >= node.output_size() || node.output(k).empty()) return;
            if (value.empty())
                throw GraphError(where + ": output " + std::to_string(k) + " '" + node.output(k) +
                                 "' is not produced for these inputs; shapes " + shapes_text());
            if (k == 1 && value == arg(1).name) return alias(node.output(k), arg(1));  // present_key = K
            if (k == 2 && value == arg(2).name) return alias(node.output(k), arg(2));
            define(node.output(k), value, e.shapes.at(value), et);
        };
        output(0, e.y);
        output(1, e.present_key.empty() ? e.k_heads : e.present_key);
        output(2, e.present_value.empty() ? e.v_heads : e.present_value);
        output(3, e.qk);
        return;
    }
    if (op == "RotaryEmbedding") {
        check_attrs({"interleaved", "rotary_embedding_dim", "num_heads"});
        const Value& x = arg(0);
        std::vector<std::string> inputs{x.name, materialize(input(1)), materialize(input(2))};
        if (has(3)) inputs.push_back(materialize(input(3)));
        const std::string name = out_name(0);
        emit("RotaryEmbedding", name, inputs,
             {{"interleaved", attr_int(node, "interleaved", 0)},
              {"rotary_embedding_dim", attr_int(node, "rotary_embedding_dim", 0)},
              {"num_heads", attr_int(node, "num_heads", 0)}});
        define(out0, name, x.shape, et);
        return;
    }
    if (op == "MatMul") {
        check_attrs({});
        const Value& a = arg(0);
        const Value& b = arg(1);
        const std::string name = out_name(0);
        std::string an = materialize(input(0)), bn = materialize(input(1));
        Shape as = a.shape, bs = b.shape;
        if (as.empty() || bs.empty()) throw ShapeError(where + ": MatMul of a scalar");
        const bool a1 = as.size() == 1, b1 = bs.size() == 1;
        if (a1) {
            as = {1, as[0]};
            reshape_to(an, as, name + ".a2d");
            an = name + ".a2d";
            m_used.insert(an);
        }
        if (b1) {
            bs = {bs[0], 1};
            reshape_to(bn, bs, name + ".b2d");
            bn = name + ".b2d";
            m_used.insert(bn);
        }
        if (as.back() != bs[bs.size() - 2])
            throw ShapeError(where + ": shapes (" + shape_str(a.shape) + ") and (" + shape_str(b.shape) +
                             ") do not multiply");
        const Shape batch = broadcast(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), where);
        Shape full = batch;
        full.push_back(as[as.size() - 2]);
        full.push_back(bs.back());
        Shape result = batch;
        if (!a1) result.push_back(as[as.size() - 2]);
        if (!b1) result.push_back(bs.back());
        if (a1 || b1) {
            emit("MatMul", name + ".full", {an, bn});
            m_used.insert(name + ".full");
            reshape_to(name + ".full", result, name);
        } else {
            emit("MatMul", name, {an, bn});
        }
        define(out0, name, result, et);
        return;
    }
    if (op == "Einsum") {
        check_attrs({"equation"});
        const auto* eq = onnx_fold::find_attr(node, "equation");
        if (!eq || eq->type() != onnx::AttributeProto::STRING)
            throw GraphError(where + ": the attribute 'equation' (a string) is missing; shapes " + shapes_text());
        std::vector<onnx_import::EinsumOperand> operands;
        for (std::size_t i = 0; i < in.size(); ++i) {
            const Shape& s = arg(i).shape;  // an absent input is an error
            operands.push_back({materialize(input(i)), s});
        }
        const std::string name = out_name(0);
        const onnx_import::EinsumSink sink{
            [&](const std::string& base) { return unique(base); },
            [&](const std::string& o, const std::string& n, const std::vector<std::string>& inputs, const json& attrs) {
                emit(o, n, inputs, attrs);
            },
            [&](const std::string& base, const Shape& s, const std::vector<double>& values) {
                return constant(base, TP::INT64, s, values);
            }};
        const Shape s = onnx_import::expand_einsum(name, eq->s(), operands, sink, where);
        define(out0, name, s, et);
        return;
    }
    if (op == "Gemm") {
        check_attrs({"alpha", "beta", "transA", "transB"});
        const Value& a = arg(0);
        const Value& b = arg(1);
        const float alpha = attr_float(node, "alpha", 1.0f), beta = attr_float(node, "beta", 1.0f);
        const bool ta = attr_int(node, "transA", 0) != 0, tb = attr_int(node, "transB", 0) != 0;
        if (a.shape.size() != 2 || b.shape.size() != 2)
            throw ShapeError(where + ": A (" + shape_str(a.shape) + ") and B (" + shape_str(b.shape) +
                             ") must be matrices");
        const std::string name = out_name(0);
        auto operand = [&](std::size_t i, bool t, const std::string& suffix) {
            const Value& v = arg(i);
            if (!t) return materialize(input(i));
            if (v.is_const) {  // fold the transpose of a constant weight
                Value tv;
                tv.is_const = true;
                onnx::NodeProto tr;
                tr.set_op_type("Transpose");
                tv.c = onnx_fold::fold(tr, {&v.c}, m_opset, where)[0];
                tv.shape = to_shape(tv.c.shape);
                tv.elem_type = v.elem_type;
                const std::string cname = node.input(static_cast<int>(i)) + "_T";
                m_values[cname] = tv;
                m_synthetic.insert(cname);
                return materialize(cname);
            }
            const std::string n = name + suffix;
            m_used.insert(n);
            emit("Transpose", n, {v.name}, {{"perm", {1, 0}}});
            return n;
        };
        const std::string an = operand(0, ta, ".At"), bn = operand(1, tb, ".Bt");
        const std::size_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
        const std::size_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
        if (k != kb)
            throw ShapeError(where + ": A (" + shape_str(a.shape) + ") and B (" + shape_str(b.shape) +
                             ") do not multiply");
        const Shape result{m, n};
        const bool has_c = has(2) && beta != 0.0f;
        // x·W + b with a bias row: one Linear (torch's nn.Linear exports as Gemm transB=1)
        if (!ta && alpha == 1.0f && beta == 1.0f && has_c &&
            (arg(2).shape == Shape{n} || arg(2).shape == Shape{1, n})) {
            emit("Linear", name, {an, bn, materialize(input(2))});
            define(out0, name, result, et);
            return;
        }
        std::string cur = name + ".AB";
        m_used.insert(cur);
        emit("MatMul", cur, {an, bn});
        if (alpha != 1.0f) {
            emit("Scale", name + ".alphaAB", {cur}, {{"factor", static_cast<double>(alpha)}});
            cur = name + ".alphaAB";
            m_used.insert(cur);
        }
        if (has_c) {
            broadcast(arg(2).shape, result, where);
            std::string cn = materialize(input(2));
            if (beta != 1.0f) {
                emit("Scale", name + ".betaC", {cn}, {{"factor", static_cast<double>(beta)}});
                cn = name + ".betaC";
                m_used.insert(cn);
            }
            emit("Add", name, {cur, cn});
        } else {
            emit("Reshape", name, {cur}, {{"shape", to_i64(result)}});
        }
        define(out0, name, result, et);
        return;
    }
    if (op == "Transpose") {
        check_attrs({"perm"});
        const Value& x = arg(0);
        std::vector<std::int64_t> perm = attr_ints(node, "perm");
        if (perm.empty())
            for (std::size_t i = 0; i < x.shape.size(); ++i)
                perm.push_back(static_cast<std::int64_t>(x.shape.size() - 1 - i));
        if (perm.size() != x.shape.size())
            throw ShapeError(where + ": perm does not match the rank of (" + shape_str(x.shape) + ")");
        Shape s;
        for (auto p : perm) s.push_back(x.shape[static_cast<std::size_t>(normalize(p, x.shape.size(), where))]);
        const std::string name = out_name(0);
        const std::size_t r = perm.size();
        std::vector<std::int64_t> heads(r);  // perm with its last two entries swapped
        for (std::size_t i = 0; i < r; ++i) heads[i] = normalize(perm[i], r, where);
        if (r >= 3 && heads[r - 2] == static_cast<std::int64_t>(r - 1)) {
            std::swap(heads[r - 2], heads[r - 1]);
            bool identity = true;
            for (std::size_t i = 0; i < r; ++i) identity = identity && heads[i] == static_cast<std::int64_t>(i);
            if (!identity) {
                // x's last axis goes second to last: a Kᵀ, as torch writes it for (m, h, d) keys
                // ([1, 2, 0]). As two Transposes, the heads first and then the last two axes
                // swapped, the run plan's fused attention finds its Kᵀ (engine/optimize.cpp).
                Shape hs;
                for (auto p : heads) hs.push_back(x.shape[static_cast<std::size_t>(p)]);
                const std::string mid = unique(name + ".heads");
                emit("Transpose", mid, {x.name}, {{"perm", heads}});
                std::vector<std::int64_t> swap(r);
                for (std::size_t i = 0; i < r; ++i) swap[i] = static_cast<std::int64_t>(i);
                std::swap(swap[r - 2], swap[r - 1]);
                emit("Transpose", name, {mid}, {{"perm", swap}});
                define(out0, name, s, et);
                return;
            }
        }
        emit("Transpose", name, {x.name}, {{"perm", perm}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
        check_attrs({"allowzero", "axis", "axes"});
        const Value& x = arg(0);
        // the shape the folding rules give, computed on a stand-in of x's shape
        OnnxTensor standin{TP::FLOAT, to_i64(x.shape), std::vector<double>(element_count(x.shape), 0.0)};
        std::vector<OnnxTensor> extra;
        std::vector<const OnnxTensor*> cin{&standin};
        for (std::size_t i = 1; i < in.size(); ++i) {
            if (!has(i)) {
                cin.push_back(nullptr);
                continue;
            }
            const_ints(i, i == 1 && op == "Reshape" ? "shape" : "axes");
            cin.push_back(&arg(i).c);
        }
        const Shape s = to_shape(onnx_fold::fold(node, cin, m_opset, where)[0].shape);
        const std::string name = out_name(0);
        reshape_to(x.name, s, name);
        define(out0, name, s, et);
        return;
    }
    if (op == "Concat") {
        check_attrs({"axis"});
        std::vector<std::string> names;
        Shape s = arg(0).shape;
        const auto axis = static_cast<std::size_t>(normalize(attr_int(node, "axis", 0), s.size(), where));
        s[axis] = 0;
        for (std::size_t i = 0; i < in.size(); ++i) {
            const Value& v = arg(i);
            if (v.shape.size() != s.size()) throw ShapeError(where + ": inputs of different ranks");
            s[axis] += v.shape[axis];
            if (v.shape[axis] == 0) continue;  // ONNX allows empty pieces; attngraph needs none
            names.push_back(materialize(input(i)));
        }
        const std::string name = out_name(0);
        if (names.size() == 1)
            reshape_to(names[0], s, name);
        else
            emit("Concat", name, names, {{"axis", static_cast<std::int64_t>(axis)}});
        define(out0, name, s, et);
        return;
    }
    if (op == "Split") {
        check_attrs({"axis", "split", "num_outputs"});
        const Value& x = arg(0);
        if (x.shape.empty()) throw ShapeError(where + ": cannot split a scalar");
        const auto axis = static_cast<std::size_t>(normalize(attr_int(node, "axis", 0), x.shape.size(), where));
        std::vector<std::int64_t> sizes = has(1) ? const_ints(1, "split") : attr_ints(node, "split");
        const std::int64_t len = static_cast<std::int64_t>(x.shape[axis]);
        const auto outputs = static_cast<std::int64_t>(node.output_size());
        if (sizes.empty()) {
            const std::int64_t parts = attr_int(node, "num_outputs", outputs);
            if (parts < 1 || parts > len)
                throw ShapeError(where + ": num_outputs " + std::to_string(parts) + " cannot split axis " +
                                 std::to_string(axis) + " of (" + shape_str(x.shape) + ") into non-empty pieces");
            const std::int64_t piece = (len + parts - 1) / parts;
            for (std::int64_t k = 0; k < parts && k * piece < len; ++k)
                sizes.push_back(std::min(piece, len - k * piece));
        }
        std::int64_t total = 0;
        for (auto s : sizes) {
            if (s < 1 || s > len)
                throw ShapeError(where + ": split size " + std::to_string(s) + " for axis " + std::to_string(axis) +
                                 " of (" + shape_str(x.shape) + "): each piece needs 1 to " + std::to_string(len) +
                                 " elements");
            total += s;
        }
        if (total != len || static_cast<std::int64_t>(sizes.size()) != outputs)
            throw ShapeError(where + ": sizes do not split axis " + std::to_string(axis) + " of (" +
                             shape_str(x.shape) + ")");
        const std::string name = out_name(0) + (outputs > 1 ? ".split" : "");
        emit("Split", name, {x.name}, {{"axis", static_cast<std::int64_t>(axis)}, {"sizes", sizes}});
        for (int k = 0; k < node.output_size(); ++k) {
            Shape s = x.shape;
            s[axis] = static_cast<std::size_t>(sizes[static_cast<std::size_t>(k)]);
            define(node.output(k), name + ":" + std::to_string(k), s, et);
        }
        return;
    }
    if (op == "Slice") {
        check_attrs({"starts", "ends", "axes"});
        const Value& x = arg(0);
        std::vector<std::int64_t> starts, ends, axes, steps;
        if (m_opset < 10) {
            starts = attr_ints(node, "starts");
            ends = attr_ints(node, "ends");
            axes = attr_ints(node, "axes");
        } else {
            starts = const_ints(1, "starts");
            ends = const_ints(2, "ends");
            if (has(3)) axes = const_ints(3, "axes");
            if (has(4)) steps = const_ints(4, "steps");
        }
        if (axes.empty())
            for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
        if (starts.size() != axes.size() || ends.size() != axes.size() ||
            (!steps.empty() && steps.size() != axes.size()))
            throw ShapeError(where + ": starts, ends, axes and steps differ in length; shapes " + shapes_text());
        std::string cur = x.name;
        Shape s = x.shape;
        const std::string name = out_name(0);
        struct Cut {
            std::size_t ax;
            std::int64_t b, e, st;
            std::vector<double> picked;
        };
        std::vector<Cut> cuts;
        bool empty = false;
        for (std::size_t k = 0; k < axes.size(); ++k) {
            const auto ax = static_cast<std::size_t>(normalize(axes[k], s.size(), where));
            const std::int64_t len = static_cast<std::int64_t>(s[ax]);
            std::int64_t st = steps.empty() ? 1 : steps[k];
            if (st == 0) throw ShapeError(where + ": Slice step 0 on axis " + std::to_string(ax));
            // a step longer than the axis picks one element: bounded, so that i += st cannot overflow
            st = std::clamp<std::int64_t>(st, -len - 1, len + 1);
            // ONNX's clamping: a negative bound counts from the end; then start and end in [0, len]
            // for a positive step, start in [0, len - 1] and end in [-1, len - 1] for a negative one
            std::int64_t b = starts[k], e = ends[k];
            if (b < 0) b = b < -len ? -1 : b + len;  // (a huge negative bound saturates, no overflow)
            if (e < 0) e = e < -len ? -1 : e + len;
            b = st > 0 ? std::clamp<std::int64_t>(b, 0, len) : std::clamp<std::int64_t>(b, 0, len - 1);
            e = st > 0 ? std::clamp<std::int64_t>(e, 0, len) : std::clamp<std::int64_t>(e, -1, len - 1);
            Cut c{ax, b, e, st, {}};
            for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) c.picked.push_back(static_cast<double>(i));
            empty = empty || c.picked.empty();
            s[ax] = c.picked.size();
            cuts.push_back(std::move(c));
        }
        if (empty) {  // nothing is picked
            define_empty(s);
            return;
        }
        s = x.shape;
        for (std::size_t k = 0; k < cuts.size(); ++k) {
            const auto& [ax, b, e, st, picked] = cuts[k];
            const std::int64_t len = static_cast<std::int64_t>(s[ax]);
            if (st == 1 && b == 0 && e == len) continue;
            const std::string n = k + 1 == cuts.size() ? name : unique(name + ".axis" + std::to_string(ax));
            if (st == 1) {
                emit("Slice", n, {cur}, {{"axis", static_cast<std::int64_t>(ax)}, {"start", b}, {"end", e}});
            } else {
                // any other step (negative too): a Gather of the constant indices it picks
                Value iv;
                iv.is_const = true;
                iv.c = OnnxTensor{TP::INT64, {static_cast<std::int64_t>(picked.size())}, picked};
                iv.shape = to_shape(iv.c.shape);
                iv.elem_type = TP::INT64;
                const std::string cname = n + ".indices";
                m_values[cname] = iv;
                m_synthetic.insert(cname);
                emit("Gather", n, {cur, materialize(cname)}, {{"axis", static_cast<std::int64_t>(ax)}});
            }
            cur = n;
            s[ax] = picked.size();
        }
        if (cur != name) reshape_to(cur, s, name);
        define(out0, name, s, et);
        return;
    }
    if (op == "Tile") {
        // x (d0, d1, ...) repeated (r0, r1, ...) times: Reshape to (1, d0, 1, d1, ...) (NAME.split),
        // Expand to (r0, d0, r1, d1, ...) (NAME.expanded), Reshape to (r0·d0, r1·d1, ...); its
        // gradient sums the copies (Expand's)
        check_attrs({});
        const Value& x = arg(0);
        const std::vector<std::int64_t> repeats = const_ints(1, "repeats");
        if (repeats.size() != x.shape.size())
            throw ShapeError(where + ": " + std::to_string(repeats.size()) + " repeats for rank " +
                             std::to_string(x.shape.size()) + " (one per axis); shapes " + shapes_text());
        Shape split, expanded, s;
        for (std::size_t i = 0; i < repeats.size(); ++i) {
            if (repeats[i] < 0 || repeats[i] > (std::int64_t(1) << 40))
                throw ShapeError(where + ": repeat " + std::to_string(repeats[i]) + " for axis " + std::to_string(i) +
                                 " is not a count; shapes " + shapes_text());
            split.insert(split.end(), {1, x.shape[i]});
            expanded.insert(expanded.end(), {static_cast<std::size_t>(repeats[i]), x.shape[i]});
        }
        check_size(expanded, "the output");  // (so that no r·d below overflows)
        for (std::size_t i = 0; i < repeats.size(); ++i) s.push_back(expanded[2 * i] * x.shape[i]);
        if (element_count(s) == 0) {
            define_empty(s);
            return;
        }
        if (s == x.shape) {
            alias(out0, x);
            return;
        }
        const std::string name = out_name(0);
        const auto step = steps_of(name);
        const std::string split_x = step("Reshape", "split", {materialize(input(0))}, {{"shape", to_i64(split)}});
        reshape_to(step("Expand", "expanded", {split_x}, {{"shape", to_i64(expanded)}}), s, name);
        define(out0, name, s, et);
        return;
    }
    if (op == "Pad") {
        // per padded axis: constant mode a Slice where a pad is negative and a Concat with
        // constant blocks (NAME.before_axisK, NAME.after_axisK); edge, reflect and wrap a Gather
        // of the indices each output element reads (NAME.indices_axisK). The last step is NAME.
        check_attrs({"mode", "pads", "value", "paddings"});
        const Value& x = arg(0);
        const auto* mode_attr = onnx_fold::find_attr(node, "mode");
        const std::string mode = mode_attr ? mode_attr->s() : "constant";
        if (mode != "constant" && mode != "edge" && mode != "reflect" && (mode != "wrap" || m_opset < 19))
            throw GraphError(where + ": mode '" + mode + "' is not one of constant, edge, reflect" +
                             (m_opset >= 19 ? ", wrap" : "") + "; shapes " + shapes_text());
        // opset 11 on: pads, constant_value and axes (18 on) are inputs; before: attributes
        // ("paddings" in opset 1)
        const std::vector<std::int64_t> pads =
            m_opset >= 11 ? const_ints(1, "pads") : attr_ints(node, m_opset < 2 ? "paddings" : "pads");
        double value = m_opset >= 11 ? 0.0 : double(attr_float(node, "value", 0.0f));
        if (m_opset >= 11 && has(2)) {
            const Value& c = arg(2);
            if (!c.is_const || c.c.values.size() != 1)
                throw ShapeError(where + ": constant_value '" + node.input(2) + "' is not a constant number; shapes " +
                                 shapes_text());
            value = c.c.values[0];
        }
        std::vector<std::int64_t> axes;
        if (m_opset >= 18 && has(3))
            axes = const_ints(3, "axes");
        else
            for (std::size_t i = 0; i < x.shape.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
        if (pads.size() != 2 * axes.size())
            throw ShapeError(where + ": pads has " + std::to_string(pads.size()) + " values for " +
                             std::to_string(axes.size()) + " axes (a begin and an end each); shapes " + shapes_text());
        // the axes, checked, and the output's shape, before any node is written
        std::vector<std::size_t> axis_of;
        Shape padded_shape = x.shape;
        for (std::size_t k = 0; k < axes.size(); ++k) {
            const auto ax = static_cast<std::size_t>(normalize(axes[k], x.shape.size(), where));
            if (std::find(axis_of.begin(), axis_of.end(), ax) != axis_of.end())
                throw ShapeError(where + ": axis " + std::to_string(ax) + " is padded twice; shapes " + shapes_text());
            axis_of.push_back(ax);
            const std::int64_t len = static_cast<std::int64_t>(x.shape[ax]), b = pads[k], e = pads[k + axes.size()];
            if (b < -len || e < -len || b > (std::int64_t(1) << 40) || e > (std::int64_t(1) << 40) || len + b + e < 0)
                throw ShapeError(where + ": pads " + std::to_string(b) + ", " + std::to_string(e) + " on axis " +
                                 std::to_string(ax) + " of length " + std::to_string(len) +
                                 " are out of range; shapes " + shapes_text());
            if (len == 0 && mode != "constant" && (b > 0 || e > 0))
                throw ShapeError(where + ": axis " + std::to_string(ax) +
                                 " is empty: there is nothing to pad it with in mode '" + mode + "'; shapes " +
                                 shapes_text());
            padded_shape[ax] = static_cast<std::size_t>(len + b + e);
        }
        check_size(padded_shape, "the output");  // (the constant blocks and indices are smaller)
        if (element_count(padded_shape) == 0) {
            define_empty(padded_shape);
            return;
        }
        const std::string name = out_name(0);
        const auto step = steps_of(name);
        std::string cur;  // the value so far, materialized on first use
        auto current = [&]() -> std::string {
            if (cur.empty()) cur = materialize(input(0));
            return cur;
        };
        Shape s = x.shape;
        for (std::size_t k = 0; k < axes.size(); ++k) {
            const std::size_t ax = axis_of[k];
            const std::int64_t len = static_cast<std::int64_t>(s[ax]), b = pads[k], e = pads[k + axes.size()];
            const std::string tag = "axis" + std::to_string(ax);
            if (b == 0 && e == 0) continue;
            const std::size_t padded = padded_shape[ax];
            if (mode == "constant") {
                std::vector<std::string> pieces;
                auto block = [&](const std::string& which, std::int64_t size) {
                    Shape bs = s;
                    bs[ax] = static_cast<std::size_t>(size);
                    pieces.push_back(constant(name + "." + which + "_" + tag, TP::FLOAT, bs,
                                              std::vector<double>(element_count(bs), value)));
                };
                const std::int64_t from = std::max<std::int64_t>(-b, 0), to = len - std::max<std::int64_t>(-e, 0);
                if (b > 0) block("before", b);
                if (to > from) {
                    std::string kept = current();
                    if (from > 0 || to < len)
                        kept = step("Slice", "kept_" + tag, {kept},
                                    {{"axis", static_cast<std::int64_t>(ax)}, {"start", from}, {"end", to}});
                    pieces.push_back(kept);
                }
                if (e > 0) block("after", e);
                cur = pieces.size() == 1
                          ? pieces[0]
                          : step("Concat", "padded_" + tag, pieces, {{"axis", static_cast<std::int64_t>(ax)}});
            } else {
                // the index each output element reads: output i is input i − b extended by the mode
                if ((mode == "reflect" || mode == "wrap") && ((b < 0 && e > 0) || (b > 0 && e < 0)))
                    throw ShapeError(where + ": pads " + std::to_string(b) + ", " + std::to_string(e) + " on axis " +
                                     std::to_string(ax) + " both crop and pad in mode '" + mode +
                                     "', which runtimes read differently; shapes " + shapes_text());
                std::vector<double> idx;
                for (std::int64_t i = -b; i < len + e; ++i) {
                    std::int64_t j = i;
                    if (mode == "edge") {
                        j = std::clamp<std::int64_t>(i, 0, len - 1);
                    } else if (mode == "wrap") {
                        j = ((i % len) + len) % len;
                    } else if (len == 1) {
                        j = 0;
                    } else {  // reflect: period 2·(len − 1), the edges not repeated
                        const std::int64_t p = 2 * (len - 1);
                        j = ((i % p) + p) % p;
                        if (j >= len) j = p - j;
                    }
                    idx.push_back(static_cast<double>(j));
                }
                const Shape idx_shape{idx.size()};
                const std::string indices = constant(name + ".indices_" + tag, TP::INT64, idx_shape, std::move(idx));
                cur = step("Gather", "padded_" + tag, {current(), indices}, {{"axis", static_cast<std::int64_t>(ax)}});
            }
            s[ax] = padded;
        }
        if (cur.empty()) {  // nothing padded
            alias(out0, x);
            return;
        }
        reshape_to(cur, s, name);
        define(out0, name, s, et);
        return;
    }
    if (op == "CumSum") {
        // y_i = the sum of x_j over j <= i along the axis (exclusive: j < i; reverse: j >= i,
        // j > i): attngraph's CumSum, summed in sequence
        check_attrs({"exclusive", "reverse"});
        const Value& x = arg(0);
        const std::vector<std::int64_t> axis_value = const_ints(1, "axis");
        if (axis_value.size() != 1 || x.shape.empty())
            throw ShapeError(where + ": CumSum takes a tensor of rank 1 or more and one axis; shapes " + shapes_text());
        const auto axis = normalize(axis_value[0], x.shape.size(), where);
        const std::string name = out_name(0);
        emit("CumSum", name, {materialize(input(0))},
             {{"axis", axis},
              {"exclusive", attr_int(node, "exclusive", 0) != 0},
              {"reverse", attr_int(node, "reverse", 0) != 0}});
        define(out0, name, x.shape, et);
        return;
    }
    if (op == "Softmax" || op == "LogSoftmax") {
        check_attrs({"axis"});
        const Value& x = arg(0);
        const std::int64_t def = m_opset < 13 ? 1 : -1;
        const auto axis = normalize(attr_int(node, "axis", def), x.shape.size(), where);
        const std::string name = out_name(0);
        const auto step = steps_of(name);
        // opset < 13 flattens to (outer, inner) around the axis (NAME.2d, the result NAME.sm)
        const bool flatten = m_opset < 13 && static_cast<std::size_t>(axis) + 1 != x.shape.size();
        std::string src = materialize(input(0));
        if (flatten) {
            std::size_t outer = 1, inner = 1;
            for (std::size_t i = 0; i < x.shape.size(); ++i)
                (static_cast<std::int64_t>(i) < axis ? outer : inner) *= x.shape[i];
            src = step("Reshape", "2d", {src}, {{"shape", to_i64(Shape{outer, inner})}});
        }
        const std::int64_t along = flatten ? 1 : axis;
        const std::string result = flatten ? unique(name + ".sm") : name;
        if (op == "Softmax") {
            emit("Softmax", result, {src}, {{"axis", along}});
        } else {
            // written out as ONNX's reference computes it: s = x − max(x), s − log(Σ exp(s))
            // (NAME.max, NAME.shifted, NAME.exp, NAME.sum, NAME.log_sum)
            const json keep = {{"axes", json::array({along})}, {"keepdims", 1}, {"noop_with_empty_axes", 0}};
            const std::string shifted = step("Sub", "shifted", {src, step("ReduceMax", "max", {src}, keep)});
            const std::string sum = step("ReduceSum", "sum", {step("Exp", "exp", {shifted})}, keep);
            emit("Sub", result, {shifted, step("Log", "log_sum", {sum})});
        }
        if (flatten) reshape_to(result, x.shape, name);
        define(out0, name, x.shape, et);
        return;
    }
    throw GraphError(where + ": op '" + op + "' is not supported" + (all_const ? "" : " on computed values") +
                     "; shapes " + shapes_text() + " (supported ops: docs/onnx.md)");
}

}  // namespace

ImportedModel import_onnx(const fs::path& model, const ImportOptions& options) {
    try {
        return Importer(model, options).run();
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw IoError(model.string() + ": " + e.what());
    }
}

Graph to_graph(const ImportedModel& imported, const fs::path& model, const LoadOptions& options) {
    const fs::path dir = model.parent_path().empty() ? fs::path(".") : model.parent_path();
    if (imported.reshaped_inputs.empty())
        return graph_from_document(imported.graph, dir, model.string(), options, imported.tensors);
    // an input of another shape than the model's: its error says so (a torch export holds
    // shapes folded for the declared ones)
    const std::string hint = " (" + imported.reshaped_inputs + ")";
    try {
        return graph_from_document(imported.graph, dir, model.string(), options, imported.tensors);
    } catch (const ShapeError& e) {
        throw ShapeError(e.what() + hint);
    } catch (const GraphError& e) {
        throw GraphError(e.what() + hint);
    } catch (const ValueError& e) {
        throw ValueError(e.what() + hint);
    }
}

}  // namespace attngraph
