// ONNX Einsum lowered to primitive nodes. The plan, for operands A, B, C, ... and output O:
//   1. each operand: a letter repeated within it takes the diagonal (Transpose the two axes
//      last, Reshape them into one, Gather every (n+1)-th element); a letter no other operand
//      and not O holds is summed out (ReduceSum);
//   2. the operands fold left to right, A·B, then (A·B)·C, ...: the letters both hold and a later
//      operand or O needs are batch axes, the ones both hold and nothing later needs are
//      contracted, the rest are A's rows and B's columns. With something to contract it is one
//      MatMul ([batch, rows, k] · [batch, k, cols], each side transposed and reshaped to that
//      form only where it is not already); with nothing, a broadcasting Mul;
//   3. the result is transposed into O's order.
// A two-operand einsum of attention ("bhqd,bhkd->bhqk") so becomes Transpose + MatMul, and one
// of a projection ("bsd,de->bse") a single GEMM against the 2-D weight.
#include "onnx/einsum.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "engine/error.hpp"

namespace attngraph::onnx_import {
namespace {

// A letter's label is its character code (so sorting labels sorts as numpy's implicit output
// does, capitals first); the axes "..." stands for are labels 256, 257, ... counted from the
// leftmost axis any operand's "..." covers.
using Label = int;
constexpr Label ellipsis_base = 256;

struct Term {
    std::string name;  // the attngraph value
    std::vector<Label> labels;
    Shape shape;
};

std::string label_text(Label l) {
    return l < ellipsis_base ? std::string(1, static_cast<char>(l)) : "...[" + std::to_string(l - ellipsis_base) + "]";
}

std::string shape_text(const Shape& s) {
    std::string t = "(";  // (one append at a time: "(" + shape_str(s) trips GCC 12's -Wrestrict)
    t += shape_str(s);
    t += ')';
    return t;
}

// a label as part of a node's name: the letter, or e0, e1, ... for the axes of "..."
std::string label_tag(Label l) {
    std::string t(1, l < ellipsis_base ? static_cast<char>(l) : 'e');
    if (l >= ellipsis_base) t += std::to_string(l - ellipsis_base);
    return t;
}

// One side of the equation's terms: letters and at most one "...", -1 standing for it
std::vector<Label> parse_term(const std::string& term, const std::string& where) {
    std::vector<Label> out;
    bool ellipsis = false;
    for (std::size_t i = 0; i < term.size(); ++i) {
        const char c = term[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            out.push_back(static_cast<unsigned char>(c));
        } else if (c == '.' && term.compare(i, 3, "...") == 0) {
            if (ellipsis) throw ShapeError(where + ": the term '" + term + "' holds '...' twice");
            ellipsis = true;
            out.push_back(-1);
            i += 2;
        } else {
            throw ShapeError(where + ": the term '" + term + "' holds '" + std::string(1, c) +
                             "': an einsum term is letters a-z, A-Z and at most one '...'");
        }
    }
    return out;
}

class Lowering {
public:
    Lowering(const std::string& name, const EinsumSink& sink, const std::string& where)
        : m_name(name), m_sink(sink), m_where(where) {}

    Shape run(const std::string& equation, const std::vector<EinsumOperand>& in) {
        std::string eq;
        for (char c : equation)
            if (c != ' ' && c != '\t' && c != '\n') eq += c;
        const auto arrow = eq.find("->");
        const std::string lhs = eq.substr(0, arrow);
        std::vector<std::string> terms;
        for (std::size_t b = 0;;) {
            const auto e = lhs.find(',', b);
            terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
            if (e == std::string::npos) break;
            b = e + 1;
        }
        if (terms.size() != in.size())
            throw ShapeError(m_where + ": the equation '" + equation + "' has " + std::to_string(terms.size()) +
                             " operand(s), the node " + std::to_string(in.size()) + " input(s)");

        // the operands' labels, "..." expanded right-aligned over E axes
        std::vector<std::vector<Label>> parsed;
        std::vector<std::size_t> covered;  // the axes each operand's "..." stands for
        std::size_t E = 0;
        for (std::size_t k = 0; k < in.size(); ++k) {
            parsed.push_back(parse_term(terms[k], m_where));
            const auto& p = parsed.back();
            const bool has_ellipsis = std::count(p.begin(), p.end(), -1) > 0;
            const std::size_t letters = p.size() - (has_ellipsis ? 1 : 0);
            const std::size_t rank = in[k].shape.size();
            if (has_ellipsis ? rank < letters : rank != letters)
                throw ShapeError(m_where + ": operand " + std::to_string(k) + " of shape " + shape_text(in[k].shape) +
                                 " has " + std::to_string(rank) + " axes, its term '" + terms[k] + "' names " +
                                 std::to_string(letters) + (has_ellipsis ? " and '...'" : ""));
            covered.push_back(rank - letters);
            E = std::max(E, covered.back());
        }
        std::vector<Term> ops;
        std::map<Label, int> count;  // occurrences over every operand, for the implicit output
        for (std::size_t k = 0; k < in.size(); ++k) {
            Term t{in[k].name, {}, in[k].shape};
            const std::size_t e = covered[k];
            for (Label l : parsed[k]) {
                if (l != -1) {
                    t.labels.push_back(l);
                    ++count[l];
                    continue;
                }
                for (std::size_t j = 0; j < e; ++j) t.labels.push_back(ellipsis_base + static_cast<Label>(E - e + j));
            }
            ops.push_back(std::move(t));
        }

        // the output's labels
        std::vector<Label> out;
        if (arrow == std::string::npos) {
            for (std::size_t j = 0; j < E; ++j) out.push_back(ellipsis_base + static_cast<Label>(j));
            for (const auto& [l, c] : count)
                if (c == 1) out.push_back(l);
        } else {
            const std::string rhs = eq.substr(arrow + 2);
            bool has_ellipsis = false;
            for (Label l : parse_term(rhs, m_where)) {
                if (l == -1) {
                    has_ellipsis = true;
                    for (std::size_t j = 0; j < E; ++j) out.push_back(ellipsis_base + static_cast<Label>(j));
                    continue;
                }
                if (std::count(out.begin(), out.end(), l))
                    throw ShapeError(m_where + ": the output '" + rhs + "' names '" + label_text(l) + "' twice");
                if (!count.count(l))
                    throw ShapeError(m_where + ": the output '" + rhs + "' names '" + label_text(l) +
                                     "', which no operand has");
                out.push_back(l);
            }
            if (E > 0 && !has_ellipsis)
                throw ShapeError(m_where + ": the operands' '...' covers " + std::to_string(E) +
                                 " axes, which the output '" + rhs + "' leaves out (write '...' in it)");
        }
        m_out = out;

        // every label's size: equal within an operand (a diagonal), across operands equal or 1
        // broadcasting against it
        std::map<Label, std::size_t> size, first;  // a label's size, and the operand that gave it
        for (std::size_t k = 0; k < ops.size(); ++k) {
            std::map<Label, std::size_t> own;
            for (std::size_t a = 0; a < ops[k].labels.size(); ++a) {
                const Label l = ops[k].labels[a];
                const std::size_t n = ops[k].shape[a];
                const auto [o, fresh] = own.emplace(l, n);
                if (!fresh && o->second != n)
                    throw ShapeError(m_where + ": operand " + std::to_string(k) + " of shape " +
                                     shape_text(ops[k].shape) + " repeats '" + label_text(l) + "' over axes of " +
                                     std::to_string(o->second) + " and " + std::to_string(n) +
                                     ": a diagonal needs equal sizes");
            }
            for (const auto& [l, n] : own) {
                const auto [it, added] = size.emplace(l, n);
                if (added || it->second == n || n == 1) {
                    if (added) first[l] = k;
                    continue;
                }
                if (it->second != 1)
                    throw ShapeError(m_where + ": '" + label_text(l) + "' is " + std::to_string(it->second) +
                                     " in operand " + std::to_string(first[l]) + " of shape " +
                                     shape_text(ops[first[l]].shape) + " and " + std::to_string(n) + " in operand " +
                                     std::to_string(k) + " of shape " + shape_text(ops[k].shape));
                it->second = n;
                first[l] = k;
            }
        }

        // 1. diagonals, then the letters only this operand holds and the output does not
        for (std::size_t k = 0; k < ops.size(); ++k) {
            take_diagonals(ops[k], k);
            std::vector<std::int64_t> axes;
            std::vector<Label> kept;
            Shape shape;
            for (std::size_t a = 0; a < ops[k].labels.size(); ++a) {
                const Label l = ops[k].labels[a];
                bool elsewhere = std::count(m_out.begin(), m_out.end(), l) > 0;
                for (std::size_t j = 0; j < ops.size() && !elsewhere; ++j)
                    elsewhere = j != k && std::count(ops[j].labels.begin(), ops[j].labels.end(), l) > 0;
                if (elsewhere) {
                    kept.push_back(l);
                    shape.push_back(ops[k].shape[a]);
                } else {
                    axes.push_back(static_cast<std::int64_t>(a));
                }
            }
            if (!axes.empty()) {
                ops[k].name = node("ReduceSum", ".sum" + std::to_string(k), {ops[k].name},
                                   {{"axes", axes}, {"keepdims", 0}, {"noop_with_empty_axes", 0}});
                ops[k].labels = kept;
                ops[k].shape = shape;
            }
        }

        // 2. fold the operands left to right
        Term acc = ops[0];
        for (std::size_t k = 1; k < ops.size(); ++k) {
            std::set<Label> later(m_out.begin(), m_out.end());
            for (std::size_t j = k + 1; j < ops.size(); ++j) later.insert(ops[j].labels.begin(), ops[j].labels.end());
            acc = product(acc, ops[k], later, k);
        }

        // 3. the output's order
        Shape shape;
        for (Label l : m_out)
            shape.push_back(acc.shape[static_cast<std::size_t>(std::find(acc.labels.begin(), acc.labels.end(), l) -
                                                               acc.labels.begin())]);
        acc.name = arrange(acc, m_out, shape, "out");
        // the last node carries the node's own name; an einsum that changes nothing is a Reshape
        if (m_nodes.empty() || m_nodes.back()["name"] != acc.name)
            node("Reshape", ".same", {acc.name}, {{"shape", to_ints(shape)}});
        m_nodes.back()["name"] = m_name;
        for (const auto& n : m_nodes)
            m_sink.emit(n["op"].get<std::string>(), n["name"].get<std::string>(),
                        n["inputs"].get<std::vector<std::string>>(), n["attrs"]);
        return shape;
    }

private:
    static std::vector<std::int64_t> to_ints(const Shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }

    // a node of the expansion (emitted at the end, so that the last one can take the node's name)
    std::string node(const std::string& op, const std::string& suffix, const std::vector<std::string>& inputs,
                     const nlohmann::json& attrs) {
        const std::string n = m_sink.unique(m_name + suffix);
        m_nodes.push_back({{"op", op}, {"name", n}, {"inputs", inputs}, {"attrs", attrs}});
        return n;
    }

    // `name` transposed by `perm` (giving `permuted`) and reshaped to `shape`, each step only
    // where it changes something
    std::string permute_reshape(std::string name, const std::vector<std::int64_t>& perm, const Shape& permuted,
                                const Shape& shape, const std::string& tag) {
        bool identity = true;
        for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
        if (!identity) name = node("Transpose", "." + tag + "T", {name}, {{"perm", perm}});
        if (permuted != shape) name = node("Reshape", "." + tag, {name}, {{"shape", to_ints(shape)}});
        return name;
    }

    // t's axes in the order of `labels` (each of t's labels, which are distinct, once), reshaped to `shape`
    std::string arrange(const Term& t, const std::vector<Label>& labels, const Shape& shape, const std::string& tag) {
        std::vector<std::int64_t> perm;
        Shape permuted;
        for (Label l : labels) {
            const auto it = std::find(t.labels.begin(), t.labels.end(), l);
            perm.push_back(it - t.labels.begin());
            permuted.push_back(t.shape[static_cast<std::size_t>(perm.back())]);
        }
        return permute_reshape(t.name, perm, permuted, shape, tag);
    }

    void take_diagonals(Term& t, std::size_t k) {
        for (;;) {
            std::size_t p = 0, q = 0;
            for (std::size_t i = 0; i < t.labels.size() && !q; ++i)
                for (std::size_t j = i + 1; j < t.labels.size(); ++j)
                    if (t.labels[i] == t.labels[j]) {
                        p = i;
                        q = j;
                        break;
                    }
            if (!q) return;
            const std::size_t n = t.shape[p];  // t.shape[q] too (checked in run)
            // the other axes, then p and q as one axis of n·n, of which every (n+1)-th is the diagonal
            std::vector<std::int64_t> perm;
            std::vector<Label> rest;
            Shape permuted, shape;
            for (std::size_t i = 0; i < t.labels.size(); ++i)
                if (i != p && i != q) {
                    perm.push_back(static_cast<std::int64_t>(i));
                    rest.push_back(t.labels[i]);
                    shape.push_back(t.shape[i]);
                }
            perm.push_back(static_cast<std::int64_t>(p));
            perm.push_back(static_cast<std::int64_t>(q));
            for (auto i : perm) permuted.push_back(t.shape[static_cast<std::size_t>(i)]);
            shape.push_back(n * n);
            const std::string tag = "diag" + std::to_string(k) + "_" + std::to_string(m_diagonals++);
            const std::string flat = permute_reshape(t.name, perm, permuted, shape, tag);
            std::vector<double> indices;
            for (std::size_t i = 0; i < n; ++i) indices.push_back(static_cast<double>(i * (n + 1)));
            const std::string idx = m_sink.constant(m_name + "." + tag + "_index", {n}, indices);
            t.name = node("Gather", "." + tag + "G", {flat, idx}, {{"axis", static_cast<std::int64_t>(rest.size())}});
            const Label l = t.labels[p];
            t.labels = rest;
            t.labels.push_back(l);
            t.shape = Shape(shape.begin(), shape.end() - 1);
            t.shape.push_back(n);
        }
    }

    // a·b with the labels `later` still needs kept; k: b's operand index, for names
    Term product(const Term& a, const Term& b, const std::set<Label>& later, std::size_t k) {
        auto holds = [](const Term& t, Label l) { return std::count(t.labels.begin(), t.labels.end(), l) > 0; };
        auto size_in = [](const Term& t, Label l) {
            return t.shape[static_cast<std::size_t>(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin())];
        };
        std::vector<Label> batch, rows, inner, cols;
        for (Label l : a.labels) {
            if (!holds(b, l))
                rows.push_back(l);
            else if (later.count(l))
                batch.push_back(l);
            else
                inner.push_back(l);
        }
        for (Label l : b.labels)
            if (!holds(a, l)) cols.push_back(l);
        Term x = a, y = b;
        // a contracted letter of size 1 on one side and n on the other: the n side summed first
        for (Label l : inner) {
            const std::size_t na = size_in(a, l), nb = size_in(b, l);
            if (na == nb) continue;
            Term& big = na == 1 ? y : x;
            const auto axis = std::find(big.labels.begin(), big.labels.end(), l) - big.labels.begin();
            big.name =
                node("ReduceSum", ".k" + std::to_string(k) + label_tag(l), {big.name},
                     {{"axes", {static_cast<std::int64_t>(axis)}}, {"keepdims", 1}, {"noop_with_empty_axes", 0}});
            big.shape[static_cast<std::size_t>(axis)] = 1;
        }
        auto sizes = [&](const Term& t, const std::vector<Label>& ls) {
            Shape s;
            for (Label l : ls) s.push_back(size_in(t, l));
            return s;
        };
        auto product_of = [](const Shape& s) {
            return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>());
        };
        const Shape bx = sizes(x, batch), by = sizes(y, batch);
        const Shape rs = sizes(x, rows), cs = sizes(y, cols);
        Term r;
        r.labels = batch;
        r.labels.insert(r.labels.end(), rows.begin(), rows.end());
        r.labels.insert(r.labels.end(), cols.begin(), cols.end());
        for (std::size_t i = 0; i < batch.size(); ++i) r.shape.push_back(std::max(bx[i], by[i]));
        r.shape.insert(r.shape.end(), rs.begin(), rs.end());
        r.shape.insert(r.shape.end(), cs.begin(), cs.end());
        std::string tag = "p";
        tag += std::to_string(k);
        if (inner.empty()) {
            // nothing to contract: [batch, rows, 1...] * [batch, 1..., cols]
            std::vector<Label> lx = batch, ly = batch;
            lx.insert(lx.end(), rows.begin(), rows.end());
            ly.insert(ly.end(), cols.begin(), cols.end());
            Shape sx = bx, sy = by;
            sx.insert(sx.end(), rs.begin(), rs.end());
            sx.insert(sx.end(), cols.size(), 1);
            sy.insert(sy.end(), rows.size(), 1);
            sy.insert(sy.end(), cs.begin(), cs.end());
            const std::string nx = arrange(x, lx, sx, tag + "a"), ny = arrange(y, ly, sy, tag + "b");
            r.name = node("Mul", "." + tag, {nx, ny}, nlohmann::json::object());
            return r;
        }
        const std::size_t K = product_of(sizes(x, inner));
        std::vector<Label> lx = batch, ly = batch;
        lx.insert(lx.end(), rows.begin(), rows.end());
        lx.insert(lx.end(), inner.begin(), inner.end());
        ly.insert(ly.end(), inner.begin(), inner.end());
        ly.insert(ly.end(), cols.begin(), cols.end());
        Shape sx = bx, sy = by;
        sx.push_back(product_of(rs));
        sx.push_back(K);
        sy.push_back(K);
        sy.push_back(product_of(cs));
        const std::string nx = arrange(x, lx, sx, tag + "a"), ny = arrange(y, ly, sy, tag + "b");
        Shape mm = batch.empty() ? Shape{} : r.shape;
        mm.resize(batch.size());
        mm.push_back(product_of(rs));
        mm.push_back(product_of(cs));
        r.name = node("MatMul", "." + tag, {nx, ny}, nlohmann::json::object());
        if (mm != r.shape) r.name = node("Reshape", "." + tag + "r", {r.name}, {{"shape", to_ints(r.shape)}});
        return r;
    }

    std::string m_name;
    const EinsumSink& m_sink;
    std::string m_where;
    std::vector<Label> m_out;
    std::vector<nlohmann::json> m_nodes;
    int m_diagonals = 0;
};

}  // namespace

Shape expand_einsum(const std::string& name, const std::string& equation, const std::vector<EinsumOperand>& in,
                    const EinsumSink& sink, const std::string& where) {
    if (in.empty()) throw ShapeError(where + ": Einsum needs at least one input");
    return Lowering(name, sink, where).run(equation, in);
}

}  // namespace attngraph::onnx_import
