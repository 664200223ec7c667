#include "inspect/explain.hpp"

#include <cmath>
#include <cstdio>

#include "engine/error.hpp"
#include "engine/gemm.hpp"
#include "ops/ops.hpp"

namespace attngraph::inspect {

namespace {

std::string number(double v) {
    if (std::isnan(v)) return "\\mathrm{NaN}";
    if (std::isinf(v)) return v > 0 ? "\\infty" : "-\\infty";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    std::string s = buf;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s == "-0" ? "0" : s;
}

std::string shape_tex(const Shape& s) {
    if (s.empty()) return "1";
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "\\times " : "") + std::to_string(s[i]);
    return out;
}

// "X\ (shape=3\times 4)"
std::string operand(const std::string& tex, const Shape& s) {
    return tex + "\\ (shape=" + shape_tex(s) + ")";
}

// Indices shown along an axis of length n: all, or the first max-2, a gap (npos), the last.
std::vector<std::size_t> shown(std::size_t n, std::size_t max) {
    std::vector<std::size_t> idx;
    if (n <= max || max < 3) {
        for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
        return idx;
    }
    for (std::size_t i = 0; i + 2 < max; ++i) idx.push_back(i);
    idx.push_back(std::string::npos);
    idx.push_back(n - 1);
    return idx;
}

class Writer {
public:
    Writer(const Graph& g, const RunResult& r, const ExplainOptions& o) : m_graph(g), m_result(r), m_options(o) {}

    std::string run() {
        m_out += "# Walkthrough of graph `" + m_graph.name() + "`\n\n";
        m_out += "Computed in " + to_string(m_graph.dtype()) + "; numbers are rounded to 6 decimals.";
        if (!m_graph.tokens().empty()) {
            m_out += " Tokens:";
            for (const auto& t : m_graph.tokens()) m_out += " " + t;
            m_out += ".";
        }
        m_out += "\n";
        std::vector<bool> shown_leaf(m_graph.values().size(), false);
        int step = 0;
        for (const Node& node : m_graph.nodes()) {
            m_out += "\n## " + std::to_string(++step) + ". `" + m_graph.value(node.outputs.at(0)).name +
                     "` = " + node.op->name + "\n\n";
            for (int id : node.inputs) {
                const ValueInfo& v = m_graph.value(id);
                if (!v.data || shown_leaf[static_cast<std::size_t>(id)]) continue;
                shown_leaf[static_cast<std::size_t>(id)] = true;
                matrix("$$", latex_name(v.name), value(id));
            }
            explain_node(node);
        }
        return m_out;
    }

private:
    const Tensor& value(int id) const {
        const auto& v = m_result.values.at(static_cast<std::size_t>(id));
        if (!v) throw GraphError("explain: value '" + m_graph.value(id).name + "' was not kept by the run");
        return *v;
    }

    std::string op_tex(int id) const { return operand(latex_name(m_graph.value(id).name), m_graph.value(id).shape); }

    void display(const std::string& tex) { m_out += "\\[ " + tex + " \\]\n\n"; }

    // "$$ label (shape=...)= \begin{bmatrix} ... \end{bmatrix} $$", one per 2-D slice
    void matrix(const std::string& fence, const std::string& label, const Tensor& t) {
        const Shape s = t.shape();
        const std::size_t rows = s.size() >= 2 ? s[s.size() - 2] : 1, cols = s.empty() ? 1 : s.back();
        const std::size_t per = rows * cols, slices = per ? t.size() / per : 0;
        const std::string close = fence == "$$" ? "$$" : "\\]";
        for (std::size_t k = 0; k < slices && k < m_options.max_slices; ++k) {
            std::string head = label;
            if (s.size() > 2) {
                std::string idx;
                std::size_t rem = k;
                std::vector<std::size_t> ix(s.size() - 2);
                for (std::size_t a = s.size() - 2; a-- > 0;) {
                    ix[a] = rem % s[a];
                    rem /= s[a];
                }
                for (auto i : ix) {
                    if (!idx.empty()) idx += ',';
                    idx += std::to_string(i);
                }
                head += "_{[" + idx + ",:,:]}";
            }
            m_out += fence + " " + head + "\\ (shape=" + shape_tex(s) + ")= \\begin{bmatrix} ";
            const auto ri = shown(rows, m_options.max_side), ci = shown(cols, m_options.max_side);
            for (std::size_t a = 0; a < ri.size(); ++a) {
                if (a) m_out += "\\\\ ";
                for (std::size_t b = 0; b < ci.size(); ++b) {
                    if (b) m_out += " & ";
                    if (ri[a] == std::string::npos)
                        m_out += ci[b] == std::string::npos ? "\\ddots" : "\\vdots";
                    else if (ci[b] == std::string::npos)
                        m_out += "\\cdots";
                    else
                        m_out += number(t.at_flat(k * per + ri[a] * cols + ci[b]));
                }
            }
            m_out += " \\end{bmatrix} " + close + "\n\n";
        }
        if (slices > m_options.max_slices)
            m_out += "(" + std::to_string(slices - m_options.max_slices) + " more slices not shown)\n\n";
    }

    void explain_node(const Node& node) {
        const int out = node.outputs.at(0);
        const std::string y = latex_name(m_graph.value(out).name);
        const Shape& ys = m_graph.value(out).shape;
        if (node.is<ops::Linear>()) {
            linear(node);
            return;
        }
        std::vector<std::string> operands;
        for (int id : node.inputs) operands.push_back(op_tex(id));
        display(node.op->latex(node.attrs, operands, operand(y, ys), ys));
        // an op without LaTeX of its own: its formula too, as the text trace prints it
        if (!node.op->own_latex) m_out += "`" + m_graph.value(out).name + " = " + m_graph.formula(node) + "`\n\n";
        for (std::size_t k = 0; k < node.outputs.size(); ++k) {
            const int id = node.outputs[k];
            matrix("$$", latex_name(m_graph.value(id).name), value(id));
        }
    }

    // Q = X·W + b as the seed shows it: the raw product, the bias broadcast over the rows,
    // their sum.
    void linear(const Node& node) {
        const auto& in = node.inputs;
        const int out = node.outputs.at(0);
        const std::string yname = m_graph.value(out).name;
        const Shape& ys = m_graph.value(out).shape;
        const std::string raw = latex_name(yname) + "_{\\mathrm{raw}}";
        display(op_tex(in[0]) + "\\cdot " + op_tex(in[1]) + "=" + operand(raw, ys));
        const Tensor& x = value(in[0]);
        const Tensor& w = value(in[1]);
        Tensor product = zeros(m_graph.dtype(), ys);
        product.visit([&](auto& p) {
            using T = typename std::decay_t<decltype(p)>::value_type;
            const std::size_t k = w.shape()[0], n = w.shape()[1], m = n ? p.size() / n : 0;
            gemm<T>(false, false, m, n, k, T(1), x.as<T>().data(), k, w.as<T>().data(), n, T(0), p.data(), n);
        });
        if (in.size() < 3) {
            matrix("$$", latex_name(yname), value(out));
            return;
        }
        matrix("\\[", raw, product);
        const Tensor& b = value(in[2]);
        Tensor bias = zeros(m_graph.dtype(), ys);
        bias.visit([&](auto& p) {
            using T = typename std::decay_t<decltype(p)>::value_type;
            const auto& bd = b.as<T>();
            const std::size_t n = bd.size();
            for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = bd.data()[i % n];
        });
        const std::string B = "B_{" + latex_name(m_graph.value(in[2]).name) + "}";
        matrix("\\[", B, bias);
        display(operand(raw, ys) + "+" + operand(B, ys) + "=" + operand(latex_name(yname), ys));
        matrix("$$", latex_name(yname), value(out));
    }

    const Graph& m_graph;
    const RunResult& m_result;
    const ExplainOptions& m_options;
    std::string m_out;
};

}  // namespace

std::string latex_name(const std::string& name) {
    std::string s;
    for (char c : name) {
        if (c == '_' || c == '%' || c == '#' || c == '&' || c == '$') s += '\\';
        s += c;
    }
    return "\\mathrm{" + s + "}";
}

std::string explain_markdown(const Graph& graph, const RunResult& result, const ExplainOptions& options) {
    return Writer(graph, result, options).run();
}

}  // namespace attngraph::inspect
