#include "inspect/report.hpp"

#include <cstring>

#include "engine/stats.hpp"
#include "inspect/heatmap.hpp"

namespace attngraph::inspect {

using nlohmann::json;

namespace {

#include "inspect/report_page.inc"

std::string base64(const unsigned char* data, std::size_t n) {
    static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (std::size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned(data[i]) << 16) | (i + 1 < n ? unsigned(data[i + 1]) << 8 : 0u) |
                           (i + 2 < n ? unsigned(data[i + 2]) : 0u);
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += i + 1 < n ? table[(v >> 6) & 63] : '=';
        out += i + 2 < n ? table[v & 63] : '=';
    }
    return out;
}

// Slice 0 of the tensor as float32 little-endian base64, pooled to max_side a side.
json matrix_record(const Tensor& t, std::size_t max_side) {
    const MatrixView m = matrix_view(t, 0);
    const PooledMatrix p = pool_matrix(m, max_side);
    std::vector<float> f(p.view.values.begin(), p.view.values.end());
    json r;
    r["rows"] = p.view.rows;
    r["cols"] = p.view.cols;
    r["fullRows"] = p.full_rows;
    r["fullCols"] = p.full_cols;
    r["rowGroup"] = p.row_group;
    r["colGroup"] = p.col_group;
    r["slices"] = m.slices;
    r["data"] = base64(reinterpret_cast<const unsigned char*>(f.data()), f.size() * sizeof(float));
    return r;
}

}  // namespace

std::string report_html(const TraceDir& trace, const ReportOptions& o) {
    json data;
    data["graph"] = trace.graph().empty() ? trace.dir().filename().string() : trace.graph();
    data["dir"] = trace.dir().string();
    data["tokens"] = trace.tokens();
    data["complete"] = trace.complete();
    data["note"] = trace.note();
    data["maxSide"] = o.max_side;
    json entries = json::array();
    for (const auto& e : trace.entries()) {
        json r;
        r["name"] = e.name;
        r["kind"] = e.kind.empty() ? "value" : e.kind;
        r["op"] = e.op;
        r["inputs"] = e.inputs;
        r["formula"] = e.formula;
        if (e.seconds) r["seconds"] = *e.seconds;
        if (!e.file.empty()) {
            const Tensor t = trace.load(e);
            r["shape"] = t.shape();
            r["stats"] = stats_json(tensor_stats(t));
            r["m"] = matrix_record(t, o.max_side);
        } else {
            r["shape"] = e.shape;
        }
        if (auto g = trace.load_grad(e)) {
            r["gradStats"] = stats_json(tensor_stats(*g));
            r["g"] = matrix_record(*g, o.max_side);
        }
        entries.push_back(std::move(r));
        if (o.progress) o.progress(entries.size(), trace.entries().size());
    }
    data["entries"] = std::move(entries);

    // inside <script>, "</" would end the element
    std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string safe;
    safe.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/')
            safe += "<\\";
        else
            safe += text[i];
    }
    std::string page = report_page;
    const std::string marker = "/*DATA*/";
    const auto at = page.find(marker);
    page.replace(at, marker.size(), safe);
    const std::string title_marker = "<!--TITLE-->";
    const auto t = page.find(title_marker);
    page.replace(t, title_marker.size(), xml_escape("attngraph report: " + data["graph"].get<std::string>()));
    return page;
}

}  // namespace attngraph::inspect
