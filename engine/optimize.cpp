#include "engine/optimize.hpp"

#include <algorithm>

#include "engine/attention_kernel.hpp"
#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "engine/softmax_kernel.hpp"
#include "ops/ops.hpp"

namespace attngraph {

// ---- matching -------------------------------------------------------------------------

namespace {

class Matcher {
public:
    Matcher(const Graph& g, const std::vector<bool>& keep) : m_graph(g), m_keep(keep), m_uses(g.values().size(), 0) {
        for (const Node& n : g.nodes())
            for (int id : n.inputs) ++m_uses[static_cast<std::size_t>(id)];
    }

    /// The node producing value `id` with op type Op, when the value can vanish: not kept,
    /// read once, the node's only output and the node not yet folded elsewhere; else -1.
    template <class Op>
    int foldable(int id, const std::vector<bool>& folded) const {
        return m_keep[static_cast<std::size_t>(id)] ? -1 : link<Op>(id, folded);
    }

    /// As foldable, but the value may be kept: the step that folds its node writes it.
    template <class Op>
    int link(int id, const std::vector<bool>& folded) const {
        const ValueInfo& v = m_graph.value(id);
        const auto u = static_cast<std::size_t>(id);
        if (v.producer < 0 || m_uses[u] != 1) return -1;
        const Node& n = m_graph.nodes()[static_cast<std::size_t>(v.producer)];
        if (!n.is<Op>() || n.outputs.size() != 1 || folded[static_cast<std::size_t>(v.producer)]) return -1;
        return v.producer;
    }

    bool kept(int id) const { return m_keep[static_cast<std::size_t>(id)]; }
    const Node& node(int i) const { return m_graph.nodes()[static_cast<std::size_t>(i)]; }
    const Shape& shape(int id) const { return m_graph.value(id).shape; }

    /// A Transpose that swaps the last two axes (and no other).
    bool swaps_last_two(int i) const {
        const auto& a = *node(i).attrs_if<ops::Transpose>();
        if (!a.perm) return true;
        const std::size_t rank = shape(node(i).inputs[0]).size();
        const std::vector<int>& perm = *a.perm;
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
        const int axis = node(i).attrs_if<ops::Softmax>()->axis;
        const int rank = static_cast<int>(shape(node(i).inputs[0]).size());
        return axis == -1 || axis == rank - 1;
    }

    double scale_factor(int i) const { return node(i).attrs_if<ops::Scale>()->factor.value; }

private:
    const Graph& m_graph;
    const std::vector<bool>& m_keep;
    std::vector<int> m_uses;
};

Shape batch_of(const Shape& s) {
    return Shape(s.begin(), s.end() - 2);
}

// Whether batch axes `from` repeat to `to` by numpy broadcasting (size-1 axes, missing axes).
bool broadcasts_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (std::size_t i = 0; i < from.size(); ++i) {
        const std::size_t d = from[from.size() - 1 - i];
        if (d != 1 && d != to[to.size() - 1 - i]) return false;
    }
    return true;
}

// O = MatMul(A, V), A = Softmax(S), S = Scale(S_raw) (optional), S_raw = MatMul(Q, KT),
// KT = Transpose(K); Q (..., n, dk), K (..., m, dk), V (..., m, dv), the batch axes of K and V
// broadcasting to Q's.
// Each intermediate is read only by the next node; S_raw, S and A may be kept (the step
// writes them, block by block), KT too (its Transpose then runs on its own).
bool match_attention(const Matcher& m, int o_node, std::vector<bool>& folded, Step& step) {
    const Node& o = m.node(o_node);
    if (!o.is<ops::MatMul>()) return false;
    const int a_node = m.link<ops::Softmax>(o.inputs[0], folded);
    if (a_node < 0 || !m.softmax_on_last_axis(a_node)) return false;
    int s_value = m.node(a_node).inputs[0];
    const int scale_node = m.link<ops::Scale>(s_value, folded);
    if (scale_node >= 0) s_value = m.node(scale_node).inputs[0];
    const int sraw_node = m.link<ops::MatMul>(s_value, folded);
    if (sraw_node < 0) return false;
    const int kt = m.node(sraw_node).inputs[1];
    const int kt_node = m.link<ops::Transpose>(kt, folded);
    if (kt_node < 0 || !m.swaps_last_two(kt_node)) return false;
    const int q = m.node(sraw_node).inputs[0], k = m.node(kt_node).inputs[0], v = o.inputs[1];
    const Shape &qs = m.shape(q), &ks = m.shape(k), &vs = m.shape(v);
    if (qs.size() < 2 || ks.size() < 2 || vs.size() < 2) return false;
    // K and V may be shared across query heads (MQA, GQA): their batch axes repeat to Q's
    if (!broadcasts_to(batch_of(ks), batch_of(qs)) || !broadcasts_to(batch_of(vs), batch_of(qs))) return false;
    if (ks.back() != qs.back() || vs.end()[-2] != ks.end()[-2]) return false;

    step.kind = StepKind::attention;
    step.inputs = {q, k, v};
    step.outputs = o.outputs;
    if (!m.kept(kt)) step.folded.push_back(kt_node);
    const int sraw = m.node(sraw_node).outputs[0], a = m.node(a_node).outputs[0];
    step.folded.push_back(sraw_node);
    if (m.kept(sraw)) step.outputs.push_back(sraw);
    if (scale_node >= 0) {
        step.folded.push_back(scale_node);
        step.factor = m.scale_factor(scale_node);
        step.scaled = true;
        const int sv = m.node(scale_node).outputs[0];
        if (m.kept(sv)) step.outputs.push_back(sv);
        step.keep_s = m.kept(sv);
    }
    step.folded.push_back(a_node);
    if (m.kept(a)) step.outputs.push_back(a);
    step.keep_s_raw = m.kept(sraw);
    step.keep_a = m.kept(a);
    return true;
}

bool match_matmul_tb(const Matcher& m, int mm_node, std::vector<bool>& folded, Step& step) {
    const Node& mm = m.node(mm_node);
    if (!mm.is<ops::MatMul>()) return false;
    const int t_node = m.foldable<ops::Transpose>(mm.inputs[1], folded);
    if (t_node < 0 || !m.swaps_last_two(t_node)) return false;
    step.kind = StepKind::matmul_tb;
    step.inputs = {mm.inputs[0], m.node(t_node).inputs[0]};
    step.folded = {t_node};
    return true;
}

bool match_scaled_softmax(const Matcher& m, int sm_node, std::vector<bool>& folded, Step& step) {
    const Node& sm = m.node(sm_node);
    if (!sm.is<ops::Softmax>() || !m.softmax_on_last_axis(sm_node)) return false;
    const int scale_node = m.foldable<ops::Scale>(sm.inputs[0], folded);
    if (scale_node < 0) return false;
    step.kind = StepKind::scaled_softmax;
    step.inputs = {m.node(scale_node).inputs[0]};
    step.folded = {scale_node};
    step.factor = m.scale_factor(scale_node);
    step.scaled = true;
    return true;
}

// Linear nodes not folded elsewhere that read the same x, with W (and b) graph tensors and
// the same number of inputs: groups of two or more, by x.
std::vector<std::vector<int>> linear_groups(const Graph& g, const std::vector<bool>& folded) {
    std::vector<std::vector<int>> groups;
    std::vector<int> group_of(g.values().size(), -1);  // x value id -> group
    for (std::size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        if (folded[i] || !n.is<ops::Linear>() || n.outputs.size() != 1) continue;
        bool constant = true;
        for (std::size_t k = 1; k < n.inputs.size(); ++k) constant = constant && g.value(n.inputs[k]).producer < 0;
        if (!constant) continue;
        int& gi = group_of[static_cast<std::size_t>(n.inputs[0])];
        if (gi >= 0 && g.nodes()[static_cast<std::size_t>(groups[static_cast<std::size_t>(gi)][0])].inputs.size() !=
                           n.inputs.size())
            continue;
        if (gi < 0) {
            gi = static_cast<int>(groups.size());
            groups.emplace_back();
        }
        groups[static_cast<std::size_t>(gi)].push_back(static_cast<int>(i));
    }
    std::erase_if(groups, [](const std::vector<int>& grp) { return grp.size() < 2; });
    return groups;
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
    if (optimize) {
        // a group runs where its first node stood: its inputs are x and graph tensors
        for (const auto& grp : linear_groups(graph, folded)) {
            Step s;
            s.kind = StepKind::linear_group;
            s.nodes = grp;
            s.member_inputs = nodes[static_cast<std::size_t>(grp[0])].inputs.size() - 1;
            s.inputs = {nodes[static_cast<std::size_t>(grp[0])].inputs[0]};
            for (int n : grp) {
                const Node& node = nodes[static_cast<std::size_t>(n)];
                s.inputs.insert(s.inputs.end(), node.inputs.begin() + 1, node.inputs.end());
                s.outputs.push_back(node.outputs[0]);
                if (n != grp[0]) {
                    s.folded.push_back(n);
                    folded[static_cast<std::size_t>(n)] = true;
                }
            }
            fused[static_cast<std::size_t>(grp[0])] = std::move(s);
        }
    }
    plan.steps.reserve(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (folded[i]) continue;
        Step s = std::move(fused[i]);
        if (s.kind == StepKind::node) s.inputs = nodes[i].inputs;
        s.node = static_cast<int>(i);
        if (s.outputs.empty()) s.outputs = nodes[i].outputs;
        plan.steps.push_back(std::move(s));
    }
    return plan;
}

std::string Plan::describe(const Graph& graph) const {
    static const char* kinds[] = {"node", "matmul_tb", "scaled_softmax", "attention", "linear_group"};
    std::string text;
    for (const Step& s : steps) {
        if (s.kind == StepKind::node) continue;
        text += std::string(kinds[static_cast<int>(s.kind)]) + "(" +
                graph.nodes()[static_cast<std::size_t>(s.node)].name + " <-";
        for (std::size_t k = 0; k < s.folded.size(); ++k)
            text += (k ? ", " : " ") + graph.nodes()[static_cast<std::size_t>(s.folded[k])].name;
        text += ")\n";
    }
    return text;
}

// ---- kernels --------------------------------------------------------------------------

namespace {

// Matrix index, in an operand whose batch axes broadcast to `target`, of every batch index of
// `target` (row-major).
std::vector<std::size_t> batch_offsets(const Shape& target, const Shape& operand) {
    std::vector<std::size_t> strides(target.size(), 0);
    std::size_t stride = 1;
    for (std::size_t i = operand.size(); i-- > 0;) {
        strides[i + target.size() - operand.size()] = operand[i] == 1 ? 0 : stride;
        stride *= operand[i];
    }
    std::vector<std::size_t> offsets(element_count(target));
    for (std::size_t flat = 0; flat < offsets.size(); ++flat) {
        std::size_t rem = flat, off = 0;
        for (std::size_t i = target.size(); i-- > 0;) {
            off += (rem % target[i]) * strides[i];
            rem /= target[i];
        }
        offsets[flat] = off;
    }
    return offsets;
}

Shape shape_of(const auto& a) {
    return Shape(a.shape().begin(), a.shape().end());
}

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
// plain GEMMs run: per block, attention_weights_block computes S_raw, S and A (rows x m),
// then O_blk = A·V. A block of S_raw, S or A goes to its own array when kept, else to a
// scratch block reused in place, so an untraced run never holds the n×m scores.
template <class T>
void attention_forward(const Step& step, In<T> in, Out<T> out) {
    std::size_t slot = 1;
    T* s_raw_out = step.keep_s_raw ? out[slot++]->data() : nullptr;
    T* s_out = step.keep_s ? out[slot++]->data() : nullptr;
    T* a_out = step.keep_a ? out[slot++]->data() : nullptr;
    const AttentionOperands<T> op =
        attention_operands<T>(*in[0], *in[1], *in[2], static_cast<T>(step.factor), step.scaled);
    const std::size_t n = op.n, m = op.m, dv = op.dv;
    const std::size_t blocks = (n + gemm_row_block - 1) / gemm_row_block;
    const bool need_scratch = !s_raw_out || (step.scaled && !s_out) || !a_out;
    parallel_chunks(op.batches * blocks, 1, [&](std::size_t c0, std::size_t c1) {
        std::vector<T> scratch(need_scratch ? std::min(n, gemm_row_block) * m : 0);
        for (std::size_t c = c0; c < c1; ++c) {
            const std::size_t b = c / blocks, r0 = (c % blocks) * gemm_row_block;
            const std::size_t rows = std::min(gemm_row_block, n - r0), at = (b * n + r0) * m;
            T* sr = s_raw_out ? s_raw_out + at : scratch.data();
            T* a = a_out ? a_out + at : scratch.data();
            attention_weights_block<T>(op, b, r0, rows, sr, s_out ? s_out + at : nullptr, a);
            gemm<T>(false, false, rows, dv, m, T(1), a, m, op.v + op.vb[b] * m * dv, dv, T(0),
                    out[0]->data() + (b * n + r0) * dv, dv);
        }
    });
}

// y_i = x·W_i + b_i for every node of a group: one GEMM per member, straight into its
// output (the GEMM's column blocks keep both cores busy even when x has few rows), the bias
// added after the product as the Linear op adds it. Each member's GEMM is the plain Linear
// op's call, so a group's outputs have the Linear nodes' bits.
template <class T>
void linear_group_forward(In<T> in, Out<T> out, std::size_t member_inputs) {
    const Array<T>& x = *in[0];
    const std::size_t k = in[1]->shape()[0],
                      m = k ? x.size() / k : out[0]->size() / std::max<std::size_t>(in[1]->shape()[1], 1);
    // the members in parallel too: a per-head projection (n x 64) is a single GEMM block
    // (tiny members, as the seed's, run inline: a task would cost more than the product)
    parallel_chunks(out.size(), grain_for(m * in[1]->shape()[1] * k), [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) {
            const std::size_t ni = in[1 + i * member_inputs]->shape()[1];
            gemm<T>(false, false, m, ni, k, T(1), x.data(), k, in[1 + i * member_inputs]->data(), ni, T(0),
                    out[i]->data(), ni);
        }
    });
    if (member_inputs != 2) return;
    parallel_chunks(m, grain_for(out.size() * in[1]->shape()[1]), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t i = 0; i < out.size(); ++i) {
            const std::size_t ni = in[1 + i * member_inputs]->shape()[1];
            const T* b = in[2 + i * member_inputs]->data();
            T* y = out[i]->data();
            for (std::size_t r = r0; r < r1; ++r)
                for (std::size_t j = 0; j < ni; ++j) y[r * ni + j] += b[j];
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
AttentionOperands<T> attention_operands(const Array<T>& q, const Array<T>& k, const Array<T>& v, T factor,
                                        bool scaled) {
    const Shape qs = shape_of(q), ks = shape_of(k), vs = shape_of(v);
    AttentionOperands<T> op;
    op.q = q.data();
    op.k = k.data();
    op.v = v.data();
    op.n = qs.end()[-2];
    op.dk = qs.back();
    op.m = ks.end()[-2];
    op.dv = vs.back();
    op.batches = element_count(batch_of(qs));
    op.k_batches = element_count(batch_of(ks));
    op.v_batches = element_count(batch_of(vs));
    op.kb = batch_offsets(batch_of(qs), batch_of(ks));
    op.vb = batch_offsets(batch_of(qs), batch_of(vs));
    op.factor = factor;
    op.scaled = scaled;
    return op;
}

template <class T>
void attention_weights_block(const AttentionOperands<T>& op, std::size_t b, std::size_t r0, std::size_t rows, T* s_raw,
                             T* s, T* a) {
    const std::size_t m = op.m, dk = op.dk;
    gemm<T>(false, true, rows, m, dk, T(1), op.q + (b * op.n + r0) * dk, dk, op.k + op.kb[b] * m * dk, dk, T(0), s_raw,
            m);
    if (s) {  // S kept: the Scale op's arithmetic, then softmax of S
        for (std::size_t i = 0; i < rows * m; ++i) s[i] = op.factor * s_raw[i];
        softmax_rows<T>(s, a, rows, m, T(1), false);
    } else {
        softmax_rows<T>(s_raw, a, rows, m, op.factor, op.scaled);
    }
}

template AttentionOperands<float> attention_operands<float>(const Array<float>&, const Array<float>&,
                                                            const Array<float>&, float, bool);
template AttentionOperands<double> attention_operands<double>(const Array<double>&, const Array<double>&,
                                                              const Array<double>&, double, bool);
template void attention_weights_block<float>(const AttentionOperands<float>&, std::size_t, std::size_t, std::size_t,
                                             float*, float*, float*);
template void attention_weights_block<double>(const AttentionOperands<double>&, std::size_t, std::size_t, std::size_t,
                                              double*, double*, double*);

template <class T>
void run_step(const Graph& graph, const Step& step, In<T> in, Out<T> out) {
    const T factor = static_cast<T>(step.factor);
    switch (step.kind) {
        case StepKind::node: {
            const Node& node = graph.nodes()[static_cast<std::size_t>(step.node)];
            node.op->forward<T>()(node.attrs, in, out);
            return;
        }
        case StepKind::matmul_tb:
            matmul_tb_forward<T>(*in[0], *in[1], *out[0]);
            return;
        case StepKind::scaled_softmax:
            scaled_softmax_forward<T>(*in[0], *out[0], factor);
            return;
        case StepKind::attention:
            attention_forward<T>(step, in, out);
            return;
        case StepKind::linear_group:
            linear_group_forward<T>(in, out, step.member_inputs);
            return;
    }
}

template void run_step<float>(const Graph&, const Step&, In<float>, Out<float>);
template void run_step<double>(const Graph&, const Step&, In<double>, Out<double>);

template <class T>
void fused_matmul_tb(const Array<T>& a, const Array<T>& b, Array<T>& c) {
    matmul_tb_forward<T>(a, b, c);
}

template <class T>
void fused_scaled_softmax(const Array<T>& x, Array<T>& y, T factor) {
    scaled_softmax_forward<T>(x, y, factor);
}

template <class T>
void fused_attention(const Array<T>& q, const Array<T>& k, const Array<T>& v, Array<T>& o, T factor, bool scaled) {
    Step step;
    step.kind = StepKind::attention;
    step.factor = static_cast<double>(factor);
    step.scaled = scaled;
    const Array<T>* in[] = {&q, &k, &v};
    Array<T>* out[] = {&o};
    attention_forward<T>(step, In<T>(in, 3), Out<T>(out, 1));
}

template void fused_matmul_tb<float>(const Array<float>&, const Array<float>&, Array<float>&);
template void fused_matmul_tb<double>(const Array<double>&, const Array<double>&, Array<double>&);
template void fused_scaled_softmax<float>(const Array<float>&, Array<float>&, float);
template void fused_scaled_softmax<double>(const Array<double>&, Array<double>&, double);
template void fused_attention<float>(const Array<float>&, const Array<float>&, const Array<float>&, Array<float>&,
                                     float, bool);
template void fused_attention<double>(const Array<double>&, const Array<double>&, const Array<double>&, Array<double>&,
                                      double, bool);

}  // namespace attngraph
