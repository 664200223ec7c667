#include "engine/optimize.hpp"

#include <algorithm>

#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "engine/softmax_kernel.hpp"

namespace attngraph {

// ---- matching -------------------------------------------------------------------------

namespace {

class Matcher {
public:
    Matcher(const Graph& g, const std::vector<bool>& keep) : m_graph(g), m_keep(keep), m_uses(g.values().size(), 0) {
        for (const Node& n : g.nodes())
            for (int id : n.inputs) ++m_uses[static_cast<std::size_t>(id)];
    }

    /// The node producing value `id` with op `op`, when the value can vanish: not kept, read
    /// once, the node's only output and the node not yet folded elsewhere; else -1.
    int foldable(int id, const char* op, const std::vector<bool>& folded) const {
        const ValueInfo& v = m_graph.value(id);
        const auto u = static_cast<std::size_t>(id);
        if (v.producer < 0 || m_keep[u] || m_uses[u] != 1) return -1;
        const Node& n = m_graph.nodes()[static_cast<std::size_t>(v.producer)];
        if (n.op->name != op || n.outputs.size() != 1 || folded[static_cast<std::size_t>(v.producer)]) return -1;
        return v.producer;
    }

    const Node& node(int i) const { return m_graph.nodes()[static_cast<std::size_t>(i)]; }
    const Shape& shape(int id) const { return m_graph.value(id).shape; }

    nlohmann::json attrs(int i) const { return node(i).op->attrs_to_json(node(i).attrs); }

    /// A Transpose that swaps the last two axes (and no other).
    bool swaps_last_two(int i) const {
        const nlohmann::json a = attrs(i);
        if (!a.contains("perm") || a["perm"].is_null()) return true;
        const std::size_t rank = shape(node(i).inputs[0]).size();
        const auto perm = a["perm"].get<std::vector<int>>();
        if (perm.size() != rank || rank < 2) return false;
        for (std::size_t k = 0; k < rank; ++k) {
            const long p = perm[k] < 0 ? perm[k] + static_cast<long>(rank) : perm[k];
            const long want = k + 2 < rank ? static_cast<long>(k) : static_cast<long>(rank - 1 - (k - (rank - 2)));
            if (p != want) return false;
        }
        return true;
    }

    /// A Softmax along the last axis.
    bool softmax_on_last_axis(int i) const {
        const nlohmann::json a = attrs(i);
        const int axis = a.contains("axis") ? a["axis"].get<int>() : -1;
        const int rank = static_cast<int>(shape(node(i).inputs[0]).size());
        return axis == -1 || axis == rank - 1;
    }

    double scale_factor(int i) const { return attrs(i)["factor"].get<double>(); }

private:
    const Graph& m_graph;
    const std::vector<bool>& m_keep;
    std::vector<int> m_uses;
};

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// O = MatMul(A, V), A = Softmax(S), S = Scale(S_raw) (optional), S_raw = MatMul(Q, KT),
// KT = Transpose(K); Q (..., n, dk), K (..., m, dk), V (..., m, dv) with the same batch axes.
bool match_attention(const Matcher& m, int o_node, std::vector<bool>& folded, Step& step) {
    const Node& o = m.node(o_node);
    if (o.op->name != std::string("MatMul")) return false;
    const int a_node = m.foldable(o.inputs[0], "Softmax", folded);
    if (a_node < 0 || !m.softmax_on_last_axis(a_node)) return false;
    int s_value = m.node(a_node).inputs[0];
    const int scale_node = m.foldable(s_value, "Scale", folded);
    if (scale_node >= 0) s_value = m.node(scale_node).inputs[0];
    const int sraw_node = m.foldable(s_value, "MatMul", folded);
    if (sraw_node < 0) return false;
    const int kt_node = m.foldable(m.node(sraw_node).inputs[1], "Transpose", folded);
    if (kt_node < 0 || !m.swaps_last_two(kt_node)) return false;
    const int q = m.node(sraw_node).inputs[0], k = m.node(kt_node).inputs[0], v = o.inputs[1];
    const Shape &qs = m.shape(q), &ks = m.shape(k), &vs = m.shape(v);
    if (qs.size() < 2 || ks.size() != qs.size() || vs.size() != qs.size()) return false;
    if (batch_of(qs) != batch_of(ks) || batch_of(qs) != batch_of(vs)) return false;
    if (ks.back() != qs.back() || vs.end()[-2] != ks.end()[-2]) return false;

    step.kind = StepKind::attention;
    step.inputs = {q, k, v};
    step.folded = {kt_node, sraw_node, a_node};
    if (scale_node >= 0) {
        step.folded.insert(step.folded.begin() + 2, scale_node);
        step.factor = m.scale_factor(scale_node);
        step.scaled = true;
    }
    return true;
}

bool match_matmul_tb(const Matcher& m, int mm_node, std::vector<bool>& folded, Step& step) {
    const Node& mm = m.node(mm_node);
    if (mm.op->name != std::string("MatMul")) return false;
    const int t_node = m.foldable(mm.inputs[1], "Transpose", folded);
    if (t_node < 0 || !m.swaps_last_two(t_node)) return false;
    step.kind = StepKind::matmul_tb;
    step.inputs = {mm.inputs[0], m.node(t_node).inputs[0]};
    step.folded = {t_node};
    return true;
}

bool match_scaled_softmax(const Matcher& m, int sm_node, std::vector<bool>& folded, Step& step) {
    const Node& sm = m.node(sm_node);
    if (sm.op->name != std::string("Softmax") || !m.softmax_on_last_axis(sm_node)) return false;
    const int scale_node = m.foldable(sm.inputs[0], "Scale", folded);
    if (scale_node < 0) return false;
    step.kind = StepKind::scaled_softmax;
    step.inputs = {m.node(scale_node).inputs[0]};
    step.folded = {scale_node};
    step.factor = m.scale_factor(scale_node);
    step.scaled = true;
    return true;
}

}  // namespace

Plan make_plan(const Graph& graph, const std::vector<bool>& keep, bool optimize) {
    const auto& nodes = graph.nodes();
    Plan plan;
    std::vector<Step> fused(nodes.size());
    std::vector<bool> folded(nodes.size(), false);
    if (optimize) {
        const Matcher m(graph, keep);
        // consumers come after their producers: walking backwards, the widest fusion claims
        // the nodes first
        for (std::size_t i = nodes.size(); i-- > 0;) {
            const int n = static_cast<int>(i);
            if (folded[i]) continue;
            Step s;
            if (match_attention(m, n, folded, s) || match_matmul_tb(m, n, folded, s) ||
                match_scaled_softmax(m, n, folded, s)) {
                for (int f : s.folded) folded[static_cast<std::size_t>(f)] = true;
                fused[i] = std::move(s);
            }
        }
    }
    plan.steps.reserve(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (folded[i]) continue;
        Step s = std::move(fused[i]);
        if (s.kind == StepKind::node) s.inputs = nodes[i].inputs;
        s.node = static_cast<int>(i);
        s.outputs = nodes[i].outputs;
        plan.steps.push_back(std::move(s));
    }
    return plan;
}

std::string Plan::describe(const Graph& graph) const {
    static const char* kinds[] = {"node", "matmul_tb", "scaled_softmax", "attention"};
    std::string text;
    for (const Step& s : steps) {
        if (s.kind == StepKind::node) continue;
        text += std::string(kinds[static_cast<int>(s.kind)]) + "(" + graph.nodes()[static_cast<std::size_t>(s.node)].name +
                " <-";
        for (std::size_t k = 0; k < s.folded.size(); ++k)
            text += (k ? ", " : " ") + graph.nodes()[static_cast<std::size_t>(s.folded[k])].name;
        text += ")\n";
    }
    return text;
}

// ---- kernels --------------------------------------------------------------------------

namespace {

Shape shape_of(const auto& a) { return Shape(a.shape().begin(), a.shape().end()); }

// c = a · bᵀ batched with broadcasting: a (..., m, k), b (..., n, k), c (batch..., m, n).
// The MatMul op's loop, with the GEMM reading b transposed.
template <class T>
void matmul_tb_forward(const Array<T>& a, const Array<T>& b, Array<T>& c) {
    const Shape as = shape_of(a), bs = shape_of(b), cs = shape_of(c);
    const std::size_t m = as.end()[-2], k = as.back(), n = bs.end()[-2];
    const Shape batch = batch_of(cs);
    const std::size_t batches = element_count(batch);
    auto strides = [&](const Shape& s) {
        std::vector<std::size_t> st(batch.size(), 0);
        const Shape bs_ = batch_of(s);
        std::size_t stride = 1;
        for (std::size_t i = bs_.size(); i-- > 0;) {
            st[i + batch.size() - bs_.size()] = bs_[i] == 1 ? 0 : stride;
            stride *= bs_[i];
        }
        return st;
    };
    const auto sa = strides(as), sb = strides(bs);
    auto offset = [&](std::size_t flat, const std::vector<std::size_t>& st) {
        std::size_t off = 0;
        for (std::size_t i = batch.size(); i-- > 0;) {
            off += (flat % batch[i]) * st[i];
            flat /= batch[i];
        }
        return off;
    };
    parallel_chunks(batches, 1, [&](std::size_t b0, std::size_t b1) {
        for (std::size_t i = b0; i < b1; ++i)
            gemm<T>(false, true, m, n, k, T(1), a.data() + offset(i, sa) * m * k, k, b.data() + offset(i, sb) * n * k,
                    k, T(0), c.data() + i * m * n, n);
    });
}

// O = softmax(c · Q·Kᵀ)·V by blocks of gemm_row_block query rows, exactly the blocks the
// plain GEMMs run: per block, S = Q_blk·Kᵀ (rows x m), softmax in place, O_blk = S·V.
template <class T>
void attention_forward(const Array<T>& q, const Array<T>& k, const Array<T>& v, Array<T>& o, T factor, bool scaled) {
    const Shape qs = shape_of(q), ks = shape_of(k), vs = shape_of(v);
    const std::size_t n = qs.end()[-2], dk = qs.back(), m = ks.end()[-2], dv = vs.back();
    const std::size_t batches = element_count(batch_of(qs));
    const std::size_t blocks = (n + gemm_row_block - 1) / gemm_row_block;
    parallel_chunks(batches * blocks, 1, [&](std::size_t c0, std::size_t c1) {
        std::vector<T> s(std::min(n, gemm_row_block) * m);
        for (std::size_t c = c0; c < c1; ++c) {
            const std::size_t b = c / blocks, r0 = (c % blocks) * gemm_row_block;
            const std::size_t rows = std::min(gemm_row_block, n - r0);
            gemm<T>(false, true, rows, m, dk, T(1), q.data() + (b * n + r0) * dk, dk, k.data() + b * m * dk, dk, T(0),
                    s.data(), m);
            softmax_rows<T>(s.data(), s.data(), rows, m, factor, scaled);
            gemm<T>(false, false, rows, dv, m, T(1), s.data(), m, v.data() + b * m * dv, dv, T(0),
                    o.data() + (b * n + r0) * dv, dv);
        }
    });
}

template <class T>
void scaled_softmax_forward(const Array<T>& x, Array<T>& y, T factor) {
    const Shape xs = shape_of(x);
    const std::size_t len = xs.back(), rows = len ? x.size() / len : 0;
    parallel_chunks(rows, grain_for(len * 8), [&](std::size_t r0, std::size_t r1) {
        softmax_rows<T>(x.data() + r0 * len, y.data() + r0 * len, r1 - r0, len, factor, true);
    });
}

}  // namespace

template <class T>
void run_step(const Graph& graph, const Step& step, In<T> in, Out<T> out) {
    const T factor = static_cast<T>(step.factor);
    switch (step.kind) {
    case StepKind::node: {
        const Node& node = graph.nodes()[static_cast<std::size_t>(step.node)];
        node.op->forward<T>()(node.attrs, in, out);
        return;
    }
    case StepKind::matmul_tb: matmul_tb_forward<T>(*in[0], *in[1], *out[0]); return;
    case StepKind::scaled_softmax: scaled_softmax_forward<T>(*in[0], *out[0], factor); return;
    case StepKind::attention: attention_forward<T>(*in[0], *in[1], *in[2], *out[0], factor, step.scaled); return;
    }
}

template void run_step<float>(const Graph&, const Step&, In<float>, Out<float>);
template void run_step<double>(const Graph&, const Step&, In<double>, Out<double>);

}  // namespace attngraph
