#include "inspect/dot.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

namespace attngraph::inspect {

namespace {

std::string dot_quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

// "n12", "v3", ":1", built by appending (GCC 12 -Wrestrict misfires on "n" + std::to_string(i))
std::string id_of(char prefix, std::size_t i) {
    std::string s(1, prefix);
    s += std::to_string(i);
    return s;
}

std::string prefix_of(const std::string& name) {
    const auto dot = name.find('.');
    return dot == std::string::npos || dot == 0 ? std::string() : name.substr(0, dot);
}

std::string ms(double seconds) {
    char buf[32];
    if (seconds < 1e-3)
        std::snprintf(buf, sizeof buf, "%.1f µs", seconds * 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
    return buf;
}

// White for no time, deep orange for the slowest node.
std::string time_colour(double fraction) {
    fraction = std::clamp(fraction, 0.0, 1.0);
    char buf[8];
    std::snprintf(buf, sizeof buf, "#ff%02x%02x", static_cast<int>(255 - 120 * fraction),
                  static_cast<int>(255 - 230 * fraction));
    return buf;
}

}  // namespace

std::string graph_dot(const Graph& g, const DotOptions& o) {
    // per node: the wall time of its first output, as the trace recorded it
    std::vector<std::optional<double>> seconds(g.nodes().size());
    double slowest = 0, total = 0;
    if (o.trace)
        for (std::size_t i = 0; i < g.nodes().size(); ++i) {
            const auto* e = o.trace->find(g.value(g.nodes()[i].outputs.at(0)).name);
            if (e && e->seconds) {
                seconds[i] = *e->seconds;
                slowest = std::max(slowest, *e->seconds);
                total += *e->seconds;
            }
        }

    auto leaf_shown = [&](const ValueInfo& v) { return !(o.hide_params && v.kind == ValueKind::param); };
    // statement lines grouped by cluster ("" = top level), in graph order
    std::map<std::string, std::vector<std::string>> clusters;
    std::vector<std::string> cluster_order;
    auto place = [&](const std::string& name, std::string line) {
        const std::string c = prefix_of(name);
        if (!clusters.count(c)) cluster_order.push_back(c);
        clusters[c].push_back(std::move(line));
    };
    for (const Node& n : g.nodes()) {  // clusters in node order: head1, head2, ..., head10
        const std::string c = prefix_of(n.name);
        if (!clusters.count(c)) {
            cluster_order.push_back(c);
            clusters[c];
        }
    }
    // tensors in order of first use, so that Graphviz starts from the graph's own order
    std::vector<std::size_t> leaves;
    std::vector<bool> listed(g.values().size(), false);
    for (const Node& n : g.nodes())
        for (int in : n.inputs) {
            const auto u = static_cast<std::size_t>(in);
            if (!listed[u]) leaves.push_back(u);
            listed[u] = true;
        }
    for (std::size_t id = 0; id < g.values().size(); ++id)
        if (!listed[id]) leaves.push_back(id);
    for (std::size_t id : leaves) {
        const ValueInfo& v = g.values()[id];
        if (!v.data || !leaf_shown(v)) continue;
        const std::string label = v.name + "\n" + to_string(v.kind) + " " + shape_str(v.shape);
        place(v.name, id_of('v', id) + " [shape=note, style=filled, fillcolor=" +
                          std::string(v.kind == ValueKind::input ? "\"#dbe9f6\"" : "\"#eeeeee\"") +
                          ", label=" + dot_quote(label) + "];");
    }
    for (std::size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        std::string shapes;
        for (int id : n.outputs) shapes += (shapes.empty() ? "" : ", ") + shape_str(g.value(id).shape);
        std::string label = n.name + "\n" + n.op->name + " " + shapes;
        std::string fill = "\"#ffffff\"";
        if (seconds[i]) {
            label += '\n';
            label += ms(*seconds[i]);
            fill = dot_quote(time_colour(slowest > 0 ? *seconds[i] / slowest : 0));
        }
        place(n.name, id_of('n', i) + " [shape=box, style=\"rounded,filled\", fillcolor=" + fill +
                          ", label=" + dot_quote(label) + "];");
    }

    std::string s = "digraph " + dot_quote(g.name()) + " {\n";
    std::string title = g.name() + " (" + std::to_string(g.nodes().size()) + " nodes";
    if (o.trace && total > 0) title += ", " + ms(total) + " summed node time";
    title += ")";
    s += "  label=" + dot_quote(title) + "; labelloc=t; fontname=\"sans-serif\";\n";
    // Graphviz keeps the head clusters in order (head1 left of head2 ...) with newrank when
    // the weights are drawn, and without it when they are not (checked for 2 to 24 heads)
    s += std::string("  rankdir=TB; nodesep=0.15; ranksep=0.35;") + (o.hide_params ? "" : " newrank=true;") + "\n";
    s += "  node [fontname=\"sans-serif\", fontsize=10, margin=\"0.08,0.03\", height=0.3];\n";
    s += "  edge [arrowsize=0.6, color=\"#555555\"];\n";
    int k = 0;
    for (const auto& c : cluster_order) {
        const bool boxed = !c.empty();
        const std::string indent = boxed ? "    " : "  ";
        if (boxed)
            s += "  subgraph cluster_" + std::to_string(k++) + " {\n    label=" + dot_quote(c) +
                 "; style=\"rounded,filled\"; fillcolor=\"#f7f7fb\"; color=\"#9999bb\";\n";
        for (const auto& line : clusters[c]) s += indent + line + "\n";
        if (boxed) s += "  }\n";
    }
    for (std::size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        for (int id : n.inputs) {
            const ValueInfo& v = g.value(id);
            if (v.data && !leaf_shown(v)) continue;
            const std::string from = v.producer >= 0 ? id_of('n', static_cast<std::size_t>(v.producer))
                                                     : id_of('v', static_cast<std::size_t>(id));
            std::string attrs;
            if (v.producer >= 0 && g.nodes()[static_cast<std::size_t>(v.producer)].outputs.size() > 1)
                attrs = " [label=" + dot_quote(id_of(':', static_cast<std::size_t>(v.output_index))) + ", fontsize=8]";
            s += "  " + from + " -> " + id_of('n', i) + attrs + ";\n";
        }
    }
    // the graph's outputs
    for (int id : g.outputs()) {
        const ValueInfo& v = g.value(id);
        if (v.producer < 0) continue;
        const std::string out = "out" + v.name;
        s += "  " + dot_quote(out) + " [shape=plaintext, label=" + dot_quote("output " + v.name) + "];\n";
        s += "  " + id_of('n', static_cast<std::size_t>(v.producer)) + " -> " + dot_quote(out) + ";\n";
    }
    s += "}\n";
    return s;
}

}  // namespace attngraph::inspect
