#include "engine/trace.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "engine/error.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/stats.hpp"
#include "ops/ops.hpp"

namespace attngraph {

namespace fs = std::filesystem;
namespace {
using nlohmann::json;  // not in attngraph itself: -Wshadow would flag TraceFormat::json in a unity build
}  // namespace

const TraceEntry* Trace::find(const std::string& name) const {
    for (const auto& e : entries)
        if (e.name == name) return &e;
    return nullptr;
}

// Rows of a Softmax output (along its axis) that are all zeros: a softmax row sums to 1
// unless every input was -inf, so these are exactly the fully masked rows.
static std::vector<Shape> zero_softmax_rows(const ops::SoftmaxAttrs& attrs, const Tensor& y, const Shape& shape) {
    std::vector<Shape> rows;
    if (shape.empty()) return rows;
    long axis = attrs.axis;
    if (axis < 0) axis += static_cast<long>(shape.size());
    if (axis < 0 || axis >= static_cast<long>(shape.size())) return rows;
    const auto ax = static_cast<std::size_t>(axis);
    std::size_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < ax; ++i) outer *= shape[i];
    for (std::size_t i = ax + 1; i < shape.size(); ++i) inner *= shape[i];
    const std::size_t len = shape[ax];
    if (len == 0) return rows;
    for (std::size_t r = 0; r < outer * inner; ++r) {
        const std::size_t base = (r / inner) * len * inner + r % inner;
        bool zero = true;
        for (std::size_t k = 0; zero && k < len; ++k) zero = y.at_flat(base + k * inner) == 0.0;
        if (!zero) continue;
        Shape index(shape.size() - 1);
        std::size_t rem = r;
        for (std::size_t i = shape.size(); i-- > 0;) {
            if (i == ax) continue;
            const std::size_t slot = i > ax ? i - 1 : i;
            index[slot] = rem % shape[i];
            rem /= shape[i];
        }
        rows.push_back(std::move(index));
    }
    return rows;
}

void check_tokens(const Graph& graph, const std::vector<std::string>& tokens, const std::string& what) {
    if (tokens.empty()) return;
    std::string inputs;
    for (const ValueInfo& v : graph.values()) {
        if (v.kind == ValueKind::param) continue;  // traces do not label parameters
        const Shape& s = v.shape;
        if ((!s.empty() && s.back() == tokens.size()) || (s.size() >= 2 && s.end()[-2] == tokens.size())) return;
        if (v.kind == ValueKind::input) inputs += (inputs.empty() ? "" : ", ") + v.name + " (" + shape_str(s) + ")";
    }
    throw ShapeError(what + ": " + std::to_string(tokens.size()) + " tokens, but no value of graph '" + graph.name() +
                     "' has a row or column axis of " + std::to_string(tokens.size()) +
                     (inputs.empty() ? std::string() : "; its inputs: " + inputs));
}

Trace make_trace(const Graph& graph, const RunResult& result, const std::vector<std::string>& only) {
    Trace trace;
    trace.graph = graph.name();
    trace.dtype = graph.dtype();
    trace.tokens = graph.tokens();
    trace.complete = result.complete;
    if (!result.complete) trace.note = "stopped at node '" + result.stopped_at + "': " + result.stop_reason;

    std::vector<bool> done(graph.values().size(), false);
    auto add = [&](int id, const Node* node) {
        const auto u = static_cast<std::size_t>(id);
        if (done[u] || !result.values[u] || !matches_any(graph.value(id).name, only)) return;
        done[u] = true;
        const ValueInfo& v = graph.value(id);
        TraceEntry e;
        e.name = v.name;
        e.kind = to_string(v.kind);
        e.shape = v.shape;
        e.dtype = graph.dtype();
        e.data = result.values[u];
        if (node) {
            e.op = node->op->name;
            for (int in : node->inputs) e.inputs.push_back(graph.value(in).name);
            e.formula = graph.formula(*node);
            e.seconds = result.seconds[static_cast<std::size_t>(v.producer)];
            if (const auto* softmax = node->attrs_if<ops::Softmax>())
                e.fully_masked_rows = zero_softmax_rows(*softmax, *e.data, e.shape);
        }
        trace.entries.push_back(std::move(e));
    };
    for (const Node& node : graph.nodes()) {
        for (int id : node.inputs)
            if (graph.value(id).data) add(id, nullptr);
        for (int id : node.outputs) add(id, &node);
    }
    for (std::size_t id = 0; id < graph.values().size(); ++id)
        if (graph.values()[id].data) add(static_cast<int>(id), nullptr);  // tensors no node reads
    return trace;
}

TraceFormat parse_trace_format(const std::string& text) {
    if (text == "npy") return TraceFormat::npy;
    if (text == "text") return TraceFormat::text;
    if (text == "json") return TraceFormat::json;
    throw Error("unknown trace format '" + text + "' (expected npy, text or json)");
}

// ---- text ------------------------------------------------------------------------------

namespace {

// Display width of UTF-8 text: East Asian wide characters take two columns.
std::size_t display_width(const std::string& s) {
    std::size_t w = 0;
    for (std::size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        unsigned cp = c;
        if (len > 1) {
            cp = c & (0xFF >> (len + 1));
            for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        w += (cp >= 0x1100 &&
              (cp <= 0x115F || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
               (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF00 && cp <= 0xFF60) || (cp >= 0x20000 && cp <= 0x3FFFD)))
                 ? 2
                 : 1;
        i += len;
    }
    return w;
}

std::string pad_left(const std::string& s, std::size_t width) {
    const std::size_t w = display_width(s);
    return w >= width ? s : std::string(width - w, ' ') + s;
}
std::string pad_right(const std::string& s, std::size_t width) {
    const std::size_t w = display_width(s);
    return w >= width ? s : s + std::string(width - w, ' ');
}

std::string number6(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    return std::string(buf) == "-0.000000" ? "0.000000" : buf;
}

std::string matrix_text(const Tensor& t, const Shape& shape, const std::vector<std::string>& tokens, bool label) {
    std::string out;
    const std::size_t rank = shape.size();
    const std::size_t rows = rank >= 2 ? shape[rank - 2] : 1;
    const std::size_t cols = rank >= 1 ? shape[rank - 1] : 1;
    const bool row_labels = label && rank >= 2 && !tokens.empty() && rows == tokens.size();
    const bool col_labels = label && rank >= 1 && !tokens.empty() && cols == tokens.size();
    const std::size_t slices = rows * cols != 0 ? t.size() / (rows * cols) : 0;
    std::size_t width = 10;
    for (std::size_t i = 0; i < t.size(); ++i) width = std::max(width, number6(t.at_flat(i)).size() + 2);
    std::size_t label_width = 0;
    if (row_labels)
        for (const auto& tok : tokens) label_width = std::max(label_width, display_width(tok) + 2);
    for (std::size_t s = 0; s < slices; ++s) {
        if (rank > 2) {
            std::string idx = "[";
            std::size_t rem = s;
            std::vector<std::size_t> ix(rank - 2);
            for (std::size_t a = rank - 2; a-- > 0;) {
                ix[a] = rem % shape[a];
                rem /= shape[a];
            }
            for (auto i : ix) idx += std::to_string(i) + ", ";
            out += idx + ":, :]\n";
        }
        if (col_labels) {
            out += std::string(label_width, ' ');
            for (const auto& tok : tokens) out += pad_left(tok, width);
            out += '\n';
        }
        for (std::size_t r = 0; r < rows; ++r) {
            if (row_labels) out += pad_right(tokens[r], label_width);
            for (std::size_t c = 0; c < cols; ++c)
                out += pad_left(number6(t.at_flat((s * rows + r) * cols + c)), width);
            out += '\n';
        }
    }
    if (t.size() == 0) out += "(empty)\n";
    return out;
}

}  // namespace

std::string entry_text(const Trace& trace, const TraceEntry& e) {
    std::string out = e.name + " (" + shape_str(e.shape) + ")";
    if (e.op.empty()) {
        out += " = " + e.kind + "\n";
    } else {
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.3f ms", e.seconds * 1e3);
        out += " = " + e.formula + "    [" + e.op + ", " + ms + "]\n";
    }
    const std::size_t max_notes = 16;
    for (std::size_t k = 0; k < e.fully_masked_rows.size() && k < max_notes; ++k) {
        std::string index;
        for (std::size_t i : e.fully_masked_rows[k]) index += (index.empty() ? "" : ", ") + std::to_string(i);
        out += "  note: row [" + index + "] fully masked -> zeros\n";
    }
    if (e.fully_masked_rows.size() > max_notes)
        out += "  note: ... " + std::to_string(e.fully_masked_rows.size() - max_notes) + " more fully masked rows\n";
    if (e.data) out += matrix_text(*e.data, e.shape, trace.tokens, e.kind != "param");
    return out;
}

namespace {

// The indices of an axis of `size` a summary shows: all, or the `edge` first, a gap
// (size as a marker) and the `edge` last.
std::vector<std::size_t> edge_indices(std::size_t size, std::size_t edge) {
    std::vector<std::size_t> ix;
    if (size <= 2 * edge) {
        for (std::size_t i = 0; i < size; ++i) ix.push_back(i);
        return ix;
    }
    for (std::size_t i = 0; i < edge; ++i) ix.push_back(i);
    ix.push_back(size);
    for (std::size_t i = size - edge; i < size; ++i) ix.push_back(i);
    return ix;
}

std::string value_stats(const Tensor& t, const Shape& shape) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
    std::size_t nans = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const double v = t.at_flat(i);
        if (std::isnan(v)) {
            ++nans;
            continue;
        }
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
    }
    const std::size_t counted = t.size() - nans;
    std::string out = "  shape (" + shape_str(shape) + "), " + std::to_string(t.size()) + " values";
    if (counted)
        out +=
            ": min " + number6(lo) + ", max " + number6(hi) + ", mean " + number6(sum / static_cast<double>(counted));
    if (nans) out += ", " + std::to_string(nans) + " nan";
    return out + "\n";
}

}  // namespace

std::string entry_summary_text(const Trace& trace, const TraceEntry& e, std::size_t threshold, std::size_t edge) {
    if (!e.data || e.data->size() <= threshold) return entry_text(trace, e);
    TraceEntry header = e;
    header.data = nullptr;
    std::string out = entry_text(trace, header) + value_stats(*e.data, e.shape);
    const Tensor& t = *e.data;
    const Shape& shape = e.shape;
    const std::size_t rank = shape.size();
    const std::size_t rows = rank >= 2 ? shape[rank - 2] : 1, cols = rank >= 1 ? shape[rank - 1] : 1;
    const bool row_labels = e.kind != "param" && rank >= 2 && !trace.tokens.empty() && rows == trace.tokens.size();
    const bool col_labels = e.kind != "param" && rank >= 1 && !trace.tokens.empty() && cols == trace.tokens.size();
    const auto row_ix = edge_indices(rows, edge), col_ix = edge_indices(cols, edge);
    // the leading axes: every combination of their edge indices, "..." for a gap
    std::vector<std::vector<std::size_t>> lead_ix;
    for (std::size_t a = 0; a + 2 < rank; ++a) lead_ix.push_back(edge_indices(shape[a], edge));
    std::size_t width = 10;
    std::size_t label_width = 0;
    if (row_labels)
        for (std::size_t r : row_ix)
            if (r < rows) label_width = std::max(label_width, display_width(trace.tokens[r]) + 2);
    std::vector<std::size_t> at(lead_ix.size(), 0);  // position in each lead_ix list
    bool gap_printed = false;
    for (;;) {
        bool gap = false;
        std::size_t base = 0;
        std::string idx = "[";
        for (std::size_t a = 0; a < lead_ix.size(); ++a) {
            const std::size_t i = lead_ix[a][at[a]];
            if (i == shape[a]) gap = true;
            base = base * shape[a] + (i == shape[a] ? 0 : i);
            idx += std::to_string(i) + ", ";
        }
        if (gap) {
            if (!gap_printed) out += "...\n";
            gap_printed = true;
        } else {
            gap_printed = false;
            if (rank > 2) out += idx + ":, :]\n";
            if (col_labels) {
                out += std::string(label_width, ' ');
                for (std::size_t c : col_ix)
                    out += pad_left(c == cols ? "..." : trace.tokens[c], c == cols ? 5 : width);
                out += '\n';
            }
            for (std::size_t r : row_ix) {
                if (r == rows) {
                    out += std::string(label_width, ' ') + pad_left("...", width) + "\n";
                    continue;
                }
                if (row_labels) out += pad_right(trace.tokens[r], label_width);
                for (std::size_t c : col_ix)
                    out += c == cols ? pad_left("...", 5)
                                     : pad_left(number6(t.at_flat((base * rows + r) * cols + c)), width);
                out += '\n';
            }
        }
        std::size_t a = lead_ix.size();
        while (a > 0 && ++at[a - 1] == lead_ix[a - 1].size()) at[--a] = 0;
        if (a == 0) break;
    }
    return out;
}

std::string trace_text(const Trace& trace) {
    std::string out = "# trace of graph '" + trace.graph + "' (" + to_string(trace.dtype) + ")";
    if (!trace.tokens.empty()) {
        out += ", tokens:";
        for (const auto& t : trace.tokens) out += " " + t;
    }
    out += "\n";
    if (!trace.complete) out += "# INCOMPLETE: " + trace.note + "\n";
    for (const auto& e : trace.entries) {
        out += '\n';
        out += entry_text(trace, e);
    }
    return out;
}

// ---- json / manifest ----------------------------------------------------------------------

static json entry_record(const TraceEntry& e) {
    json r;
    r["name"] = e.name;
    r["kind"] = e.kind;
    if (!e.op.empty()) {
        r["op"] = e.op;
        r["inputs"] = e.inputs;
        r["formula"] = e.formula;
        r["seconds"] = e.seconds;
    }
    r["shape"] = e.shape;
    r["dtype"] = to_string(e.dtype);
    if (!e.fully_masked_rows.empty()) r["fully_masked_rows"] = e.fully_masked_rows;
    if (!e.onnx_name.empty()) r["onnx_name"] = e.onnx_name;
    if (e.patched) r["patched"] = true;
    return r;
}

static json trace_header(const Trace& trace) {
    json j;
    j["graph"] = trace.graph;
    j["dtype"] = to_string(trace.dtype);
    j["tokens"] = trace.tokens;
    j["complete"] = trace.complete;
    if (!trace.complete) j["note"] = trace.note;
    return j;
}

json trace_json(const Trace& trace) {
    json j = trace_header(trace);
    json entries = json::array();
    for (const auto& e : trace.entries) {
        json r = entry_record(e);
        if (e.data) r["data"] = tensor_to_json(*e.data);
        entries.push_back(std::move(r));
    }
    j["entries"] = std::move(entries);
    return j;
}

json trace_manifest(const Trace& trace, TraceFormat format) {
    json j = trace_header(trace);
    j["format"] = format == TraceFormat::npy ? "npy" : format == TraceFormat::text ? "text" : "json";
    json entries = json::array();
    for (const auto& e : trace.entries) {
        json r = entry_record(e);
        if (format == TraceFormat::npy) r["file"] = e.name + ".npy";
        if (e.data) r["stats"] = stats_json(tensor_stats(*e.data));
        entries.push_back(std::move(r));
    }
    j["entries"] = std::move(entries);
    return j;
}

// ---- writing --------------------------------------------------------------------------

// The absolute directory `dir` names ("t/" and "t" alike); never the current directory or
// one that holds it, which replacing would pull from under the caller.
static fs::path output_target(const fs::path& dir) {
    fs::path target = fs::absolute(dir).lexically_normal();
    if (!target.has_filename()) target = target.parent_path();
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    if (!target.has_filename() ||
        (!ec && std::mismatch(target.begin(), target.end(), cwd.begin(), cwd.end()).first == target.end()))
        throw IoError(dir.string() + ": is the current directory or holds it; name a directory to create");
    return target;
}

void check_output_dir(const fs::path& dir, bool force) {
    output_target(dir);
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw IoError(dir.string() + ": exists and is not a directory");
    if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec) && !force)
        throw IoError(dir.string() + ": directory exists and is not empty (use --force to replace it)");
}

// A run killed while writing leaves its hidden ".DIR.tmp-PID-N" (or ".DIR.old-PID")
// sibling behind; the next write of DIR removes those whose process is gone.
static void remove_stale_temporaries(const fs::path& parent, const std::string& name) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
        const std::string f = entry.path().filename().string();
        std::string rest;
        for (const char* kind : {".tmp-", ".old-"}) {
            std::string prefix(1, '.');
            prefix.append(name).append(kind);
            if (f.rfind(prefix, 0) == 0) rest = f.substr(prefix.size());
        }
        if (rest.empty() || rest.find_first_not_of("0123456789-") != std::string::npos) continue;
        const long pid = std::strtol(rest.c_str(), nullptr, 10);
        if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
            fs::remove_all(entry.path(), ec);
    }
}

// ".NAME": the hidden name beside `target` its temporaries start with ("." + name as a
// std::string first: GCC 12 warns (-Wrestrict) on "literal" + std::string)
static std::string hidden_name(const fs::path& target) {
    std::string hidden = ".";
    hidden += target.filename().string();
    return hidden;
}

// ".NAME.tmp-PID-N" beside `target`: what remove_stale_temporaries clears once PID is gone
static fs::path temporary_beside(const fs::path& target) {
    std::random_device rd;
    return target.parent_path() /
           (hidden_name(target) + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000));
}

void write_directory_atomically(const fs::path& dir, bool force, const std::function<void(const fs::path&)>& fill) {
    check_output_dir(dir, force);
    const fs::path target = output_target(dir);
    std::error_code ec;
    const fs::path parent = target.parent_path();
    fs::create_directories(parent, ec);
    if (ec) throw IoError(parent.string() + ": cannot create (" + ec.message() + ")");
    remove_stale_temporaries(parent, target.filename().string());
    const std::string hidden = hidden_name(target);
    const fs::path tmp = temporary_beside(target);
    fs::create_directory(tmp, ec);
    if (ec)  // the folder the user named, and the temporary one that could not be made beside it
        throw IoError(target.string() + ": cannot create (" + ec.message() + "; writing through " + tmp.string() + ")");
    try {
        fill(tmp);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    // replacing (--force): swap both in one step where the file system can, so that DIR
    // always holds either the old trace or the new one
    if (fs::exists(target, ec) && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        fs::remove_all(tmp, ec);
        return;
    }
    fs::path old;
    if (fs::exists(target, ec) && !fs::is_empty(target, ec)) {
        old = parent / (hidden + ".old-" + std::to_string(::getpid()));
        fs::rename(target, old, ec);
        if (ec) {
            const std::string msg = ec.message();
            fs::remove_all(tmp, ec);
            throw IoError(target.string() + ": cannot replace (" + msg + ")");
        }
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        const std::string msg = ec.message();
        if (!old.empty()) fs::rename(old, target, ec);
        fs::remove_all(tmp, ec);
        throw IoError(target.string() + ": cannot move the finished directory into place (" + msg + ")");
    }
    if (!old.empty()) fs::remove_all(old, ec);
}

void write_file_atomically(const fs::path& path, const std::string& bytes) {
    if (!path.has_filename()) throw IoError("'" + path.string() + "': names no file to write");
    const fs::path target = fs::absolute(path);
    const fs::path parent = target.parent_path();
    remove_stale_temporaries(parent, target.filename().string());
    const fs::path tmp = temporary_beside(target);
    // O_EXCL | O_NOFOLLOW: never truncate or write through a file or symlink already there
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) throw IoError(path.string() + ": cannot create (" + std::strerror(errno) + ")");
    std::size_t done = 0;
    int err = 0;
    while (done < bytes.size()) {
        const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            err = n < 0 ? errno : EIO;
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    std::error_code ec;
    if (err != 0) {
        fs::remove(tmp, ec);
        throw IoError(path.string() + ": write failed (" + std::strerror(err) + ")");
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        const std::string msg = ec.message();
        fs::remove(tmp, ec);
        throw IoError(path.string() + ": cannot move into place (" + msg + ")");
    }
}

static void write_file(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw IoError(path.string() + ": write failed");
}

void write_trace(const Trace& trace, const fs::path& dir, TraceFormat format, bool force) {
    write_directory_atomically(dir, force, [&](const fs::path& tmp) {
        if (format == TraceFormat::npy) {
            for (const auto& e : trace.entries)
                if (e.data) save_npy(tmp / (e.name + ".npy"), *e.data);
        } else if (format == TraceFormat::text) {
            write_file(tmp / "trace.txt", trace_text(trace));
        } else {
            write_file(tmp / "trace.json", trace_json(trace).dump(1) + "\n");
        }
        write_file(tmp / "manifest.json", trace_manifest(trace, format).dump(2) + "\n");
    });
}

}  // namespace attngraph
