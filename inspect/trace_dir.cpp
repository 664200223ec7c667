#include "inspect/trace_dir.hpp"

#include <algorithm>
#include <fstream>

#include "engine/error.hpp"
#include "engine/graph.hpp"
#include "engine/npy.hpp"

namespace attngraph::inspect {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A manifest's file reference must stay inside the trace directory.
fs::path checked_relative(const std::string& text, const std::string& where) {
    const fs::path p = fs::path(text).lexically_normal();
    if (text.empty() || p.is_absolute() || p.begin() == p.end() || *p.begin() == "..")
        throw IoError(where + ": file '" + text + "' is not a path inside the trace directory");
    return p;
}

std::string get_string(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) return {};
    if (!j[key].is_string()) throw IoError(where + ": \"" + key + "\" must be a string");
    return j[key].get<std::string>();
}

}  // namespace

TraceDir::TraceDir(const fs::path& dir) : m_dir(dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": not a directory");
    const fs::path manifest = dir / "manifest.json";
    if (fs::exists(manifest, ec)) {
        read_manifest(manifest);
        return;
    }
    for (const auto& f : fs::directory_iterator(dir, ec)) {
        if (!f.is_regular_file() || f.path().extension() != ".npy") continue;
        TraceDirEntry e;
        e.name = f.path().stem().string();
        e.file = f.path().filename();
        m_entries.push_back(std::move(e));
    }
    if (ec) throw IoError(dir.string() + ": cannot list (" + ec.message() + ")");
    std::sort(m_entries.begin(), m_entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    if (m_entries.empty()) throw IoError(dir.string() + ": no manifest.json and no .npy files");
}

void TraceDir::read_manifest(const fs::path& path) {
    const std::string where = path.string();
    m_has_manifest = true;
    json j;
    try {
        std::ifstream in(path);
        j = json::parse(in);
    } catch (const json::exception& e) {
        throw IoError(where + ": not valid JSON (" + e.what() + ")");
    }
    try {
        if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array())
            throw IoError(where + ": expected an object with an \"entries\" array");
        m_graph = get_string(j, "graph", where);
        if (j.contains("tokens")) m_tokens = j["tokens"].get<std::vector<std::string>>();
        if (j.contains("complete")) m_complete = j["complete"].get<bool>();
        m_note = get_string(j, "note", where);
        const std::string format = get_string(j, "format", where);
        if (!format.empty() && format != "npy")
            throw IoError(where + ": the trace was written with --format " + format +
                          "; inspecting needs the .npy files of --format npy");
        for (const auto& r : j["entries"]) {
            TraceDirEntry e;
            e.name = get_string(r, "name", where);
            if (!valid_name(e.name) && e.name.find(':') == std::string::npos)
                throw IoError(where + ": bad entry name '" + e.name + "'");
            const std::string at = where + ": entry '" + e.name + "'";
            e.kind = get_string(r, "kind", at);
            e.op = get_string(r, "op", at);
            e.formula = get_string(r, "formula", at);
            if (r.contains("inputs")) e.inputs = r["inputs"].get<std::vector<std::string>>();
            if (r.contains("shape")) e.shape = r["shape"].get<Shape>();
            if (r.contains("seconds") && r["seconds"].is_number()) e.seconds = r["seconds"].get<double>();
            if (r.contains("file")) e.file = checked_relative(get_string(r, "file", at), at);
            if (r.contains("stats")) e.stats = r["stats"];
            // gradients (written by `attngraph grad`): "grad": "grad/NAME.npy" or {"file": ...}
            if (r.contains("grad")) {
                const json& g = r["grad"];
                if (g.is_string())
                    e.grad_file = checked_relative(g.get<std::string>(), at);
                else if (g.is_object() && g.contains("file") && g["file"].is_string())
                    e.grad_file = checked_relative(g["file"].get<std::string>(), at);
            }
            m_entries.push_back(std::move(e));
        }
        // or a top-level "grads": {"NAME": "grad/NAME.npy"} / [{"name": ..., "file": ...}] / ["NAME"]
        if (j.contains("grads")) {
            auto set_grad = [&](const std::string& name, const std::string& file) {
                for (auto& e : m_entries)
                    if (e.name == name && e.grad_file.empty()) e.grad_file = checked_relative(file, where);
            };
            const json& g = j["grads"];
            if (g.is_object()) {
                for (const auto& [name, v] : g.items()) {
                    if (v.is_string())
                        set_grad(name, v.get<std::string>());
                    else if (v.is_object() && v.contains("file"))
                        set_grad(name, v["file"].get<std::string>());
                }
            } else if (g.is_array()) {
                for (const auto& v : g) {
                    if (v.is_string())
                        set_grad(v.get<std::string>(), "grad/" + v.get<std::string>() + ".npy");
                    else if (v.is_object() && v.contains("name") && v.contains("file"))
                        set_grad(v["name"].get<std::string>(), v["file"].get<std::string>());
                }
            }
        }
    } catch (const json::exception& e) {
        throw IoError(where + ": unexpected manifest content (" + e.what() + ")");
    }
}

const TraceDirEntry* TraceDir::find(const std::string& name) const {
    for (const auto& e : m_entries)
        if (e.name == name) return &e;
    return nullptr;
}

const TraceDirEntry& TraceDir::at(const std::string& name) const {
    if (const auto* e = find(name)) return *e;
    std::string names;
    for (const auto& e : m_entries) {
        if (names.size() > 200) {
            names += ", ...";
            break;
        }
        names += (names.empty() ? "" : ", ") + e.name;
    }
    throw IoError(m_dir.string() + ": no traced value '" + name + "' (traced: " + names + ")");
}

Tensor TraceDir::load(const TraceDirEntry& e) const {
    if (e.file.empty()) throw IoError(m_dir.string() + ": value '" + e.name + "' has no data file in the manifest");
    Tensor t = load_npy(m_dir / e.file);
    if (m_has_manifest && t.shape() != e.shape)
        throw IoError((m_dir / e.file).string() + ": shape (" + shape_str(t.shape()) +
                      ") differs from the manifest's (" + shape_str(e.shape) + ") for '" + e.name + "'");
    return t;
}

std::optional<Tensor> TraceDir::load_grad(const TraceDirEntry& e) const {
    if (e.grad_file.empty()) return std::nullopt;
    std::error_code ec;
    if (!fs::exists(m_dir / e.grad_file, ec)) return std::nullopt;
    return load_npy(m_dir / e.grad_file);
}

MatrixView matrix_view(const Tensor& t, std::size_t slice) {
    const Shape s = t.shape();
    MatrixView v;
    v.rows = s.size() >= 2 ? s[s.size() - 2] : 1;
    v.cols = s.empty() ? 1 : s.back();
    // a tensor with no elements but in its last two axes ((2, 0, 1, 4): no slices at all) shows
    // as one empty matrix, as (2, 0, 4) does: there is nothing to read
    if (t.size() == 0) v.rows = 0;
    const std::size_t per = v.rows * v.cols;
    v.slices = per ? t.size() / per : 1;
    if (slice >= std::max<std::size_t>(v.slices, 1))
        throw Error("slice " + std::to_string(slice) + " is out of range: the tensor (" + shape_str(s) + ") has " +
                    std::to_string(v.slices) + " slices of " + std::to_string(v.rows) + "x" + std::to_string(v.cols));
    v.slice = slice;
    v.values.resize(per);
    for (std::size_t i = 0; i < per; ++i) v.values[i] = t.at_flat(slice * per + i);
    return v;
}

}  // namespace attngraph::inspect
