#include "inspect/heatmap.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace attngraph::inspect {

namespace {

struct Rgb {
    double r, g, b;
};

constexpr std::array<Rgb, 9> viridis = {{{68, 1, 84},
                                         {71, 45, 123},
                                         {59, 82, 139},
                                         {44, 114, 142},
                                         {33, 145, 140},
                                         {40, 174, 128},
                                         {94, 201, 98},
                                         {173, 220, 48},
                                         {253, 231, 37}}};
constexpr std::array<Rgb, 3> blue_white_red = {{{33, 102, 172}, {247, 247, 247}, {178, 24, 43}}};

template <std::size_t N>
Rgb interpolate(const std::array<Rgb, N>& stops, double t) {
    t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
    const std::size_t i = std::min<std::size_t>(static_cast<std::size_t>(t), N - 2);
    const double f = t - static_cast<double>(i);
    const Rgb& a = stops[i];
    const Rgb& b = stops[i + 1];
    return {a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f};
}

std::string hex(const Rgb& c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(c.r)),
                  static_cast<int>(std::lround(c.g)), static_cast<int>(std::lround(c.b)));
    return buf;
}

std::string num(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string fixed6(double v) {
    if (!std::isfinite(v)) return num(v);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    return std::string(buf) == "-0.000000" ? "0.000000" : buf;
}

// Dark text on light cells, light text on dark ones.
bool is_light(const std::string& hex_colour) {
    const unsigned long v = std::stoul(hex_colour.substr(1), nullptr, 16);
    const double r = static_cast<double>((v >> 16) & 255), g = static_cast<double>((v >> 8) & 255),
                 b = static_cast<double>(v & 255);
    return 0.299 * r + 0.587 * g + 0.114 * b > 150;
}

std::string range_label(const std::vector<std::string>& labels, std::size_t begin, std::size_t end) {
    auto one = [&](std::size_t i) {
        return labels.empty() ? std::to_string(i) : labels[i] + " (" + std::to_string(i) + ")";
    };
    return end - begin == 1 ? one(begin) : one(begin) + " … " + one(end - 1);
}

}  // namespace

std::string ColourScale::colour(double v) const {
    if (!std::isfinite(v)) return "#ff00ff";
    if (diverging) {
        const double m = std::max(std::abs(lo), std::abs(hi));
        return hex(interpolate(blue_white_red, m > 0 ? (v + m) / (2 * m) : 0.5));
    }
    return hex(interpolate(viridis, hi > lo ? (v - lo) / (hi - lo) : 0.5));
}

ColourScale colour_scale_for(const std::vector<double>& values) {
    ColourScale s;
    bool any = false;
    for (double v : values) {
        if (!std::isfinite(v)) continue;
        if (!any || v < s.lo) s.lo = v;
        if (!any || v > s.hi) s.hi = v;
        any = true;
    }
    if (!any) s.lo = 0, s.hi = 1;
    s.diverging = s.lo < 0 && s.hi > 0;
    if (s.diverging) {
        const double m = std::max(-s.lo, s.hi);
        s.lo = -m;
        s.hi = m;
    }
    return s;
}

PooledMatrix pool_matrix(const MatrixView& m, std::size_t max_side) {
    PooledMatrix p;
    p.full_rows = m.rows;
    p.full_cols = m.cols;
    if (max_side == 0) max_side = 1;
    p.row_group = (m.rows + max_side - 1) / max_side;
    p.col_group = (m.cols + max_side - 1) / max_side;
    if (p.row_group <= 1 && p.col_group <= 1) {
        p.row_group = p.col_group = 1;
        p.view = m;
        return p;
    }
    p.row_group = std::max<std::size_t>(p.row_group, 1);
    p.col_group = std::max<std::size_t>(p.col_group, 1);
    p.view.rows = (m.rows + p.row_group - 1) / p.row_group;
    p.view.cols = (m.cols + p.col_group - 1) / p.col_group;
    p.view.slices = m.slices;
    p.view.slice = m.slice;
    p.view.values.assign(p.view.rows * p.view.cols, 0.0);
    std::vector<bool> seen(p.view.values.size(), false);
    for (std::size_t r = 0; r < m.rows; ++r)
        for (std::size_t c = 0; c < m.cols; ++c) {
            const double x = m.values[r * m.cols + c];
            const std::size_t k = (r / p.row_group) * p.view.cols + c / p.col_group;
            double& cell = p.view.values[k];
            if (!seen[k] || std::isnan(x) || (!std::isnan(cell) && std::abs(x) > std::abs(cell))) cell = x;
            seen[k] = true;
        }
    return p;
}

std::string xml_escape(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::size_t text_columns(const std::string& s) {
    std::size_t w = 0;
    for (std::size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        w += len >= 3 ? 2 : 1;
        i += len;
    }
    return w;
}

std::string heatmap_svg(const MatrixView& full, const HeatmapOptions& o) {
    const PooledMatrix p = pool_matrix(full, o.max_side);
    const MatrixView& m = p.view;
    const bool row_labels = !o.row_labels.empty() && o.row_labels.size() == full.rows;
    const bool col_labels = !o.col_labels.empty() && o.col_labels.size() == full.cols;
    const ColourScale scale = colour_scale_for(m.values);

    const double side = static_cast<double>(std::max(m.rows, m.cols));
    const double cell = std::clamp(std::floor(640.0 / side), 2.0, 64.0);
    const bool show_labels_each = cell >= 12;  // one label per cell; otherwise every k-th
    const double font = std::clamp(cell * 0.45, 9.0, 13.0);
    std::size_t row_label_cols = 4;
    if (row_labels)
        for (const auto& l : o.row_labels) row_label_cols = std::max(row_label_cols, text_columns(l));
    std::size_t col_label_cols = 4;
    if (col_labels)
        for (const auto& l : o.col_labels) col_label_cols = std::max(col_label_cols, text_columns(l));
    const double left = 12 + font * 0.62 * static_cast<double>(std::min<std::size_t>(row_label_cols, 24));
    const double top = 34 + font * 0.62 * static_cast<double>(std::min<std::size_t>(col_label_cols, 24));
    const double width = cell * static_cast<double>(m.cols), height = cell * static_cast<double>(m.rows);
    const double legend_x = left + width + 24;
    const double total_w = legend_x + 110, total_h = std::max(top + height + 40, top + 260);

    std::string s;
    char buf[512];
    auto add = [&](const char* fmt, auto... args) {
        std::snprintf(buf, sizeof buf, fmt, args...);
        s += buf;
    };
    add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
        "font-family=\"sans-serif\" font-size=\"%.1f\">\n",
        total_w, total_h, total_w, total_h, font);
    s += "<title>" + xml_escape(o.title) + "</title>\n";
    add("<text x=\"%.1f\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", left);
    std::string heading = o.title + " (" + std::to_string(full.rows) + "x" + std::to_string(full.cols);
    if (full.slices > 1) heading += ", slice " + std::to_string(full.slice) + " of " + std::to_string(full.slices);
    heading += ")";
    if (p.row_group > 1 || p.col_group > 1)
        heading +=
            " — max-|x| pooled over " + std::to_string(p.row_group) + "x" + std::to_string(p.col_group) + " blocks";
    s += xml_escape(heading) + "</text>\n";

    // axis labels: tokens when the axis is the sequence, else indices
    const std::size_t row_step = show_labels_each ? 1 : static_cast<std::size_t>(std::ceil(14.0 / cell));
    const std::size_t col_step = row_step;
    s += "<g class=\"row-labels\" text-anchor=\"end\">\n";
    for (std::size_t r = 0; r < m.rows; r += row_step) {
        const std::size_t fr = r * p.row_group;
        const std::string label = row_labels ? o.row_labels[fr] : std::to_string(fr);
        add("<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">", left - 6,
            top + cell * (static_cast<double>(r) + 0.5));
        s += xml_escape(label) + "</text>\n";
    }
    s += "</g>\n<g class=\"col-labels\">\n";
    for (std::size_t c = 0; c < m.cols; c += col_step) {
        const std::size_t fc = c * p.col_group;
        const std::string label = col_labels ? o.col_labels[fc] : std::to_string(fc);
        const double x = left + cell * (static_cast<double>(c) + 0.5), y = top - 6;
        add("<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-60 %.1f %.1f)\">", x, y, x, y);
        s += xml_escape(label) + "</text>\n";
    }
    s += "</g>\n<g class=\"cells\">\n";
    const bool values_inside = cell >= 44;
    for (std::size_t r = 0; r < m.rows; ++r)
        for (std::size_t c = 0; c < m.cols; ++c) {
            const double v = m.values[r * m.cols + c];
            const std::string colour = scale.colour(v);
            const double x = left + cell * static_cast<double>(c), y = top + cell * static_cast<double>(r);
            add("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">", x, y, cell, cell,
                colour.c_str());
            const std::size_t r0 = r * p.row_group, r1 = std::min(full.rows, r0 + p.row_group);
            const std::size_t c0 = c * p.col_group, c1 = std::min(full.cols, c0 + p.col_group);
            std::string title = "row " + range_label(row_labels ? o.row_labels : std::vector<std::string>{}, r0, r1) +
                                ", col " + range_label(col_labels ? o.col_labels : std::vector<std::string>{}, c0, c1) +
                                ": " + (r1 - r0 > 1 || c1 - c0 > 1 ? "max |x| " : "") + fixed6(v);
            s += "<title>" + xml_escape(title) + "</title></rect>\n";
            if (values_inside) {
                add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" dominant-baseline=\"middle\" fill=\"%s\" "
                    "pointer-events=\"none\">%s</text>\n",
                    x + cell / 2, y + cell / 2, is_light(colour) ? "#000" : "#fff", num(v).c_str());
            }
        }
    s += "</g>\n";

    // legend: a vertical gradient from hi (top) to lo (bottom)
    const double lh = std::max(120.0, std::min(height, 360.0));
    s += "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
    for (int i = 0; i <= 10; ++i) {
        const double t = i / 10.0;
        add("<stop offset=\"%.2f\" stop-color=\"%s\"/>\n", t,
            scale.colour(scale.lo + (scale.hi - scale.lo) * t).c_str());
    }
    s += "</linearGradient></defs>\n<g class=\"legend\">\n";
    add("<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"%.1f\" fill=\"url(#scale)\" stroke=\"#444\"/>\n", legend_x,
        top, lh);
    for (int i = 0; i <= 4; ++i) {
        const double t = i / 4.0;
        const double y = top + lh * (1 - t);
        add("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", legend_x + 16, legend_x + 20, y,
            y);
        add("<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">%s</text>\n", legend_x + 23, y,
            num(scale.lo + (scale.hi - scale.lo) * t).c_str());
    }
    add("<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">magenta: NaN/Inf</text>\n", legend_x - 4, top + lh + 16);
    s += "</g>\n</svg>\n";
    return s;
}

}  // namespace attngraph::inspect
