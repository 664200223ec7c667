#include "engine/optimize.hpp"

#include <algorithm>
#include <cstdint>

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

    /// As foldable, but the value may be kept: the step that folds its node writes it. `uses`:
    /// the reads the step accounts for (S_raw read by the chain and by the sinks' S_first).
    template <class Op>
    int link(int id, const std::vector<bool>& folded, int uses = 1) const {
        const ValueInfo& v = m_graph.value(id);
        const auto u = static_cast<std::size_t>(id);
        if (v.producer < 0 || m_uses[u] != uses) return -1;
        const Node& n = m_graph.nodes()[static_cast<std::size_t>(v.producer)];
        if (!n.is<Op>() || n.outputs.size() != 1 || folded[static_cast<std::size_t>(v.producer)]) return -1;
        return v.producer;
    }

    bool kept(int id) const { return m_keep[static_cast<std::size_t>(id)]; }
    int uses(int id) const { return m_uses[static_cast<std::size_t>(id)]; }
    const Node& node(int i) const { return m_graph.nodes()[static_cast<std::size_t>(i)]; }
    const Shape& shape(int id) const { return m_graph.value(id).shape; }
    /// The node producing value `id`, -1 for a graph tensor.
    int producer(int id) const { return m_graph.value(id).producer; }

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

// A Reshape that regroups batch axes only: the same matrices, in the same order.
bool keeps_matrices(const Matcher& m, int node) {
    const Shape& x = m.shape(m.node(node).inputs[0]);
    const Shape& y = m.shape(m.node(node).outputs[0]);
    return x.size() >= 2 && y.size() >= 2 && x.end()[-1] == y.end()[-1] && x.end()[-2] == y.end()[-2];
}

// The value under any such Reshapes of value `id` (each read once), and the values on the
// way: {the value, its Reshape, the Reshape of that, ...}, in graph order. Their nodes go to
// `nodes`.
std::vector<int> through_reshapes(const Matcher& m, int id, const std::vector<bool>& folded, std::vector<int>& nodes) {
    std::vector<int> outer;
    for (int r; (r = m.link<ops::Reshape>(id, folded)) >= 0 && keeps_matrices(m, r); id = m.node(r).inputs[0]) {
        outer.push_back(id);
        nodes.push_back(r);
    }
    std::vector<int> ids{id};
    ids.insert(ids.end(), outer.rbegin(), outer.rend());
    return ids;
}

// Whether value `id` (read once) comes from the score chain: a chain node or the S_raw MatMul,
// under Reshapes.
bool chain_value(const Matcher& m, int id, const std::vector<bool>& folded) {
    std::vector<int> nodes;
    id = through_reshapes(m, id, folded, nodes)[0];
    return m.link<ops::Scale>(id, folded) >= 0 || m.link<ops::Tanh>(id, folded) >= 0 ||
           m.link<ops::Alibi>(id, folded) >= 0 || m.link<ops::Mask>(id, folded) >= 0 ||
           m.link<ops::Add>(id, folded) >= 0 || m.link<ops::MatMul>(id, folded) >= 0;
}

// The chain node producing value `id` as a stage; its input along the chain in `next` and
// its other input (a tensor) in `operand`. False if the producer is not a chain node.
bool chain_stage(const Matcher& m, int id, const std::vector<bool>& folded, ScoreStage& st, int& node, int& next,
                 int& operand) {
    operand = -1;
    if ((node = m.link<ops::Scale>(id, folded)) >= 0) {
        st.kind = ScoreStage::Kind::scale;
        st.factor = m.scale_factor(node);
    } else if ((node = m.link<ops::Tanh>(id, folded)) >= 0) {
        st.kind = ScoreStage::Kind::tanh;
    } else if ((node = m.link<ops::Alibi>(id, folded)) >= 0) {
        st.kind = ScoreStage::Kind::alibi;
        st.offset = m.node(node).attrs_if<ops::Alibi>()->offset;
        operand = m.node(node).inputs[1];
    } else if ((node = m.link<ops::Mask>(id, folded)) >= 0) {
        const ops::MaskAttrs& a = *m.node(node).attrs_if<ops::Mask>();
        st.kind = ScoreStage::Kind::mask;
        const std::string p = a.pattern.value_or("");
        st.pattern = p == "causal"    ? ScoreStage::Pattern::causal
                     : p == "window"  ? ScoreStage::Pattern::window
                     : p == "padding" ? ScoreStage::Pattern::padding
                                      : ScoreStage::Pattern::none;
        st.offset = a.offset.value_or(0);
        st.offset_from_end = a.offset_from_end.value_or(false);
        st.window = a.window.value_or(0);
        st.window_causal = a.causal.value_or(false);
        st.lengths = a.lengths.value_or(std::vector<int>{});
        if (m.node(node).inputs.size() == 2) {
            operand = m.node(node).inputs[1];
            st.mask_tensor = a.mask_type.value_or("boolean") == "additive" ? ScoreStage::MaskTensor::additive
                                                                           : ScoreStage::MaskTensor::boolean;
        }
    } else if ((node = m.link<ops::Add>(id, folded)) >= 0) {
        st.kind = ScoreStage::Kind::add;
        const Node& add = m.node(node);
        // the chain is the operand of the output's shape that comes from the chain; the other
        // one is a bias broadcast to it
        const int along = m.shape(add.inputs[0]) == m.shape(id) && chain_value(m, add.inputs[0], folded)   ? 0
                          : m.shape(add.inputs[1]) == m.shape(id) && chain_value(m, add.inputs[1], folded) ? 1
                                                                                                           : -1;
        if (along < 0) return false;
        next = add.inputs[static_cast<std::size_t>(along)];
        operand = add.inputs[static_cast<std::size_t>(1 - along)];
        return true;
    } else {
        return false;
    }
    next = m.node(node).inputs[0];
    return true;
}

// The Gather node making an Add's bias `id` when the step can read the bias through it
// (ScoreStage::index): along its data's last axis, indices of rank >= 1 (so a row of the bias
// is one row of the table), the bias read only by the Add and not kept; else -1.
int gathered_bias(const Matcher& m, int id, const std::vector<bool>& folded) {
    if (id < 0) return -1;
    const int gather = m.foldable<ops::Gather>(id, folded);
    if (gather < 0) return -1;
    const Node& gn = m.node(gather);
    const Shape &data = m.shape(gn.inputs[0]), &index = m.shape(gn.inputs[1]);
    const int axis = gn.attrs_if<ops::Gather>()->axis;
    if (data.empty() || index.empty() || element_count(index) == 0 || data.back() > UINT32_MAX) return -1;
    if (axis != -1 && axis != static_cast<int>(data.size()) - 1) return -1;
    return gather;
}

// The Mul node making an Add's bias `id` when the step can form each product itself
// (ScoreStage::multiplier): the bias read only by the Add and not kept; else -1.
int product_bias(const Matcher& m, int id, const std::vector<bool>& folded) {
    return id < 0 ? -1 : m.foldable<ops::Mul>(id, folded);
}

// Whether Slice `node` takes [begin, end) of its input's last axis.
bool slices_last_axis(const Matcher& m, int node, long begin, long end) {
    const Shape& x = m.shape(m.node(node).inputs[0]);
    const ops::Slice::Range r = ops::Slice::range(*m.node(node).attrs_if<ops::Slice>(), x);
    return r.axis + 1 == x.size() && static_cast<long>(r.begin) == begin && static_cast<long>(r.end) == end;
}

// gpt-oss's sinks between the chain and A (engine/fused_attention.hpp, SinkColumn):
// A = Slice(A_sinks) of the first m columns, A_sinks = Softmax(S_sinks) on the last axis,
// S_sinks = Concat(S, S_sink) on the last axis, S_sink = Add(S_zero, bias) (either order),
// S_zero = Scale(S_first), S_first = Slice(S_raw) of column 0. Each value read once (but
// S_raw) and perhaps kept. Gives the column (its factor, its bias's shape), the bias's value
// id, S (the chain's output), S_raw (S_first's input) and the values' ids; the nodes go to
// `nodes`.
struct SinkMatch {
    SinkColumn column;
    int s = -1, s_raw = -1, bias = -1;
    int s_first = -1, s_zero = -1, s_sink = -1, s_sinks = -1, a_sinks = -1;
};

bool match_sinks(const Matcher& m, int a, const std::vector<bool>& folded, std::vector<int>& nodes, SinkMatch& sm) {
    const int a_slice = m.link<ops::Slice>(a, folded);
    if (a_slice < 0) return false;
    sm.a_sinks = m.node(a_slice).inputs[0];
    const std::size_t keys = m.shape(sm.a_sinks).back();
    if (keys < 2 || !slices_last_axis(m, a_slice, 0, static_cast<long>(keys) - 1)) return false;
    const int softmax = m.link<ops::Softmax>(sm.a_sinks, folded);
    if (softmax < 0 || !m.softmax_on_last_axis(softmax)) return false;
    sm.s_sinks = m.node(softmax).inputs[0];
    const int concat = m.link<ops::Concat>(sm.s_sinks, folded);
    if (concat < 0 || m.node(concat).inputs.size() != 2) return false;
    const Shape& cs = m.shape(sm.s_sinks);
    const int axis = m.node(concat).attrs_if<ops::Concat>()->axis;
    if (axis != -1 && axis != static_cast<int>(cs.size()) - 1) return false;
    sm.s = m.node(concat).inputs[0];
    sm.s_sink = m.node(concat).inputs[1];
    if (m.shape(sm.s_sink).back() != 1) return false;
    const int add = m.link<ops::Add>(sm.s_sink, folded);
    if (add < 0) return false;
    const Node& an = m.node(add);
    int scale = m.link<ops::Scale>(an.inputs[0], folded);
    sm.column.bias_first = scale < 0;
    if (scale < 0) scale = m.link<ops::Scale>(an.inputs[1], folded);
    if (scale < 0) return false;
    sm.s_zero = m.node(scale).outputs[0];
    sm.bias = an.inputs[sm.column.bias_first ? 0 : 1];
    if (m.shape(sm.s_zero) != m.shape(sm.s_sink)) return false;  // the bias broadcasts to it
    sm.s_first = m.node(scale).inputs[0];
    const int first_slice = m.link<ops::Slice>(sm.s_first, folded);
    if (first_slice < 0 || !slices_last_axis(m, first_slice, 0, 1)) return false;
    sm.s_raw = m.node(first_slice).inputs[0];
    sm.column.factor = m.scale_factor(scale);
    sm.column.operand_shape = m.shape(sm.bias);
    sm.column.shape = m.shape(sm.s_sink);
    nodes.insert(nodes.end(), {a_slice, softmax, concat, add, scale, first_slice});
    return true;
}

// The Differential Transformer between A and O's MatMul (engine/fused_attention.hpp,
// DiffPair): A_diff = Sub(A_split:0, A_2_weighted), A_2_weighted = Mul(A_split:1, lambda)
// (either order), A_split = Split(A) into two along A's last batch axis (rank - 3, of size 2),
// lambda broadcasting to A_2_weighted without widening it. Each value read once and perhaps
// kept. Gives the pair (lambda's shape, A_diff's shape and batch axes), A, lambda and the
// values' ids; the nodes go to `nodes`.
struct DiffMatch {
    DiffPair pair;
    int a = -1, lambda = -1;
    int first = -1, second = -1, weighted = -1;
};

bool match_diff(const Matcher& m, int a_diff, const std::vector<bool>& folded, std::vector<int>& nodes,
                DiffMatch& dm) {
    const int sub = m.link<ops::Sub>(a_diff, folded);
    if (sub < 0) return false;
    dm.first = m.node(sub).inputs[0];
    dm.weighted = m.node(sub).inputs[1];
    const int mul = m.link<ops::Mul>(dm.weighted, folded);
    if (mul < 0) return false;
    const int split = m.producer(dm.first);
    if (split < 0 || folded[static_cast<std::size_t>(split)] || !m.node(split).is<ops::Split>()) return false;
    const Node& sn = m.node(split);
    if (sn.outputs.size() != 2 || sn.outputs[0] != dm.first || m.uses(dm.first) != 1) return false;
    dm.second = sn.outputs[1];
    if (m.uses(dm.second) != 1) return false;
    const Node& mn = m.node(mul);
    if (mn.inputs[0] == dm.second)
        dm.lambda = mn.inputs[1];
    else if (mn.inputs[1] == dm.second)
        dm.lambda = mn.inputs[0];
    else
        return false;
    dm.a = sn.inputs[0];
    if (m.uses(dm.a) != 1) return false;
    const Shape& as = m.shape(dm.a);
    if (as.size() < 3 || as.end()[-3] != 2) return false;
    const int axis = sn.attrs_if<ops::Split>()->axis, rank = static_cast<int>(as.size());
    if (axis != -3 && axis != rank - 3) return false;
    const Shape& ds = m.shape(a_diff);
    for (int id : {dm.first, dm.second, dm.weighted})
        if (m.shape(id) != ds) return false;
    dm.pair.operand_shape = m.shape(dm.lambda);
    dm.pair.shape = ds;
    dm.pair.batch = batch_of(ds);
    nodes.insert(nodes.end(), {sub, mul, split});
    return true;
}

// O = MatMul(A, V), A = Softmax(S) on the last axis, S = chain(S_raw), S_raw = MatMul(Q, KT),
// KT = Transpose(K) swapping the last two axes; Q (..., n, dk), K (..., m, dk), V (..., m, dv),
// the batch axes of K and V broadcasting to Q's, which are O's. The chain is Scale, Tanh,
// Alibi, Mask and Add nodes (engine/fused_attention.hpp), and Reshapes that regroup batch
// axes may sit anywhere between S_raw and O's MatMul and between KT and S_raw's MatMul (the
// composite's GQA form: S_raw_groups (B, G, r, n, m) → S_raw (B, H, n, m), KT → KT_groups
// (B, G, 1, dk, m)).
// Every value from S_raw to A is read only by the next node and may be kept (the step writes
// it, block by block); KT may be kept too (its Transpose then runs on its own). With gpt-oss's
// sinks, A is the slice of a softmax with one more column (match_sinks). With the Differential
// Transformer, O's MatMul reads A_diff, made of A's two halves (match_diff): O's batch axes are
// A_diff's, V's broadcast to them.
bool match_attention(const Matcher& m, int o_node, std::vector<bool>& folded, Step& step) {
    const Node& o = m.node(o_node);
    if (!o.is<ops::MatMul>()) return false;
    std::vector<int> nodes;  // folded into the step
    const std::vector<int> a_ids = through_reshapes(m, o.inputs[0], folded, nodes);
    SinkMatch sinks;
    const bool with_sinks = match_sinks(m, a_ids[0], folded, nodes, sinks);
    DiffMatch diff;
    const bool with_diff = !with_sinks && match_diff(m, a_ids[0], folded, nodes, diff);
    int softmax_input = sinks.s;
    if (!with_sinks) {
        const int a_node = m.link<ops::Softmax>(with_diff ? diff.a : a_ids[0], folded);
        if (a_node < 0 || !m.softmax_on_last_axis(a_node)) return false;
        nodes.push_back(a_node);
        softmax_input = m.node(a_node).inputs[0];
    }

    // the chain, from the softmax back to S_raw
    struct Link {
        ScoreStage stage;
        std::vector<int> ids;
        int operand;
    };
    std::vector<Link> chain;
    std::vector<int> sraw_ids;
    int sraw_node = -1;
    for (int id = softmax_input;;) {
        std::vector<int> ids = through_reshapes(m, id, folded, nodes);
        const int uses = with_sinks && ids[0] == sinks.s_raw ? 2 : 1;  // and S_first
        if ((sraw_node = m.link<ops::MatMul>(ids[0], folded, uses)) >= 0) {
            sraw_ids = std::move(ids);
            break;
        }
        Link l;
        int node = -1, next = -1;
        if (!chain_stage(m, ids[0], folded, l.stage, node, next, l.operand)) return false;
        l.stage.shape = m.shape(ids[0]);
        if (l.operand >= 0) l.stage.operand_shape = m.shape(l.operand);
        l.ids = std::move(ids);
        nodes.push_back(node);
        chain.push_back(std::move(l));
        id = next;
    }
    std::reverse(chain.begin(), chain.end());

    // KT, perhaps regrouped (KT_groups), from K
    const int kt_in = m.node(sraw_node).inputs[1];
    int kt = kt_in;
    const int kt_reshape = m.link<ops::Reshape>(kt_in, folded);
    if (kt_reshape >= 0 && keeps_matrices(m, kt_reshape)) kt = m.node(kt_reshape).inputs[0];
    const int kt_node = m.link<ops::Transpose>(kt, folded);
    if (kt_node < 0 || !m.swaps_last_two(kt_node)) return false;
    const int q = m.node(sraw_node).inputs[0], k = m.node(kt_node).inputs[0], v = o.inputs[1];

    const Shape &qs = m.shape(q), &ks = m.shape(k), &vs = m.shape(v), &kts = m.shape(kt_in), &os = m.shape(o.outputs[0]);
    if (qs.size() < 2 || ks.size() < 2 || vs.size() < 2 || kts.size() < 2) return false;
    const std::size_t n = qs.end()[-2], dk = qs.back(), keys = ks.end()[-2], dv = vs.back();
    const Shape batch = batch_of(qs);
    const Shape out_batch = with_diff ? diff.pair.batch : batch;  // O's
    // K and V may be shared across query heads (MQA, GQA): their batch axes repeat to Q's
    if (ks.back() != dk || kts.end()[-2] != dk || kts.back() != keys || element_count(kts) != element_count(ks))
        return false;
    if (vs.end()[-2] != keys || !broadcasts_to(batch_of(kts), batch) || !broadcasts_to(batch_of(vs), out_batch))
        return false;
    if (batch_of(os) != out_batch || os.end()[-2] != n || os.back() != dv) return false;
    auto one_per_matrix = [&](const std::vector<int>& ids, const Shape& of) {
        return std::ranges::all_of(ids, [&](int id) {
            const Shape& s = m.shape(id);
            return s.size() >= 2 && s.end()[-2] == n && s.back() == keys &&
                   element_count(batch_of(s)) == element_count(of);
        });
    };
    auto one_per_query_matrix = [&](const std::vector<int>& ids) { return one_per_matrix(ids, batch); };
    if (!one_per_query_matrix(sraw_ids) || !one_per_matrix(a_ids, out_batch)) return false;
    // A's batch axes (..., 2) are Q's, in Q's order: O's matrix b reads Q's 2b and 2b + 1
    if (with_diff && (!one_per_query_matrix({diff.a}) || 2 * element_count(out_batch) != element_count(batch)))
        return false;
    if (with_sinks) {
        if (sraw_ids[0] != sinks.s_raw) return false;
        auto per_row = [&](int id, std::size_t width) {
            const Shape& s = m.shape(id);
            return s.size() >= 2 && s.end()[-2] == n && s.back() == width &&
                   element_count(batch_of(s)) == element_count(batch);
        };
        for (int id : {sinks.s_first, sinks.s_zero, sinks.s_sink})
            if (!per_row(id, 1)) return false;
        if (!per_row(sinks.s_sinks, keys + 1) || !per_row(sinks.a_sinks, keys + 1)) return false;
    }
    // a Mask pattern is a span of keys when every node after it keeps -inf at -inf
    auto keeps_inf_at_inf = [](const ScoreStage& st) {
        return st.kind != ScoreStage::Kind::tanh && !(st.kind == ScoreStage::Kind::scale && !(st.factor > 0));
    };
    bool masked = false;
    for (const Link& l : chain) {
        if (!one_per_query_matrix(l.ids)) return false;
        if (masked && !keeps_inf_at_inf(l.stage)) return false;
        masked = masked || (l.stage.kind == ScoreStage::Kind::mask && l.stage.pattern != ScoreStage::Pattern::none);
    }
    // so is a boolean mask tensor, when every node after it does (else its mask is applied
    // element by element over all keys)
    bool keeps_inf = true;
    for (auto l = chain.rbegin(); l != chain.rend(); ++l) {
        ScoreStage& st = l->stage;
        if (st.kind == ScoreStage::Kind::mask && st.mask_tensor == ScoreStage::MaskTensor::boolean)
            st.tensor_span = keeps_inf;
        keeps_inf = keeps_inf && keeps_inf_at_inf(st);
    }

    auto spec = std::make_shared<AttentionSpec>();
    spec->batch = batch;
    spec->k_batch = batch_of(kts);
    spec->v_batch = batch_of(vs);
    spec->n = n, spec->m = keys, spec->dk = dk, spec->dv = dv;
    step.kind = StepKind::attention;
    step.inputs = {q, k, v};
    step.outputs = o.outputs;
    auto slots = [&](const std::vector<int>& ids) {
        std::vector<int> s;
        for (int id : ids)
            if (m.kept(id)) {
                s.push_back(static_cast<int>(step.outputs.size()));
                step.outputs.push_back(id);
            }
        return s;
    };
    spec->s_raw_outputs = slots(sraw_ids);
    for (Link& l : chain) {
        const int gather = l.stage.kind == ScoreStage::Kind::add ? gathered_bias(m, l.operand, folded) : -1;
        if (gather >= 0) {  // the step reads the table and the indices instead of the bias
            const Node& gn = m.node(gather);
            l.stage.operand = static_cast<int>(step.inputs.size());
            l.stage.index = l.stage.operand + 1;
            l.stage.table_len = m.shape(gn.inputs[0]).back();
            l.stage.index_count = element_count(m.shape(gn.inputs[1]));
            l.stage.gather_node = gn.name;
            step.inputs.insert(step.inputs.end(), {gn.inputs[0], gn.inputs[1]});
            nodes.push_back(gather);
        } else if (const int mul = l.stage.kind == ScoreStage::Kind::add ? product_bias(m, l.operand, folded) : -1;
                   mul >= 0) {  // the step reads the product's operands instead of the bias
            const Node& mn = m.node(mul);
            l.stage.operand = static_cast<int>(step.inputs.size());
            l.stage.multiplier = l.stage.operand + 1;
            l.stage.operand_shape = m.shape(mn.inputs[0]);
            l.stage.multiplier_shape = m.shape(mn.inputs[1]);
            step.inputs.insert(step.inputs.end(), {mn.inputs[0], mn.inputs[1]});
            nodes.push_back(mul);
        } else if (l.operand >= 0) {
            l.stage.operand = static_cast<int>(step.inputs.size());
            step.inputs.push_back(l.operand);
        }
        l.stage.outputs = slots(l.ids);
        spec->stages.push_back(std::move(l.stage));
    }
    spec->a_outputs = slots(with_diff ? std::vector<int>{diff.a} : a_ids);
    if (with_sinks) {
        SinkColumn& sc = sinks.column;
        sc.operand = static_cast<int>(step.inputs.size());
        step.inputs.push_back(sinks.bias);
        sc.first_outputs = slots({sinks.s_first});
        sc.zero_outputs = slots({sinks.s_zero});
        sc.column_outputs = slots({sinks.s_sink});
        sc.scores_outputs = slots({sinks.s_sinks});
        sc.weights_outputs = slots({sinks.a_sinks});
        spec->sink = std::move(sc);
    }
    if (with_diff) {
        DiffPair& dp = diff.pair;
        dp.operand = static_cast<int>(step.inputs.size());
        step.inputs.push_back(diff.lambda);
        dp.first_outputs = slots({diff.first});
        dp.second_outputs = slots({diff.second});
        dp.weighted_outputs = slots({diff.weighted});
        dp.diff_outputs = slots(a_ids);
        spec->diff = std::move(dp);
    }
    spec->finish();
    step.attention = std::move(spec);

    nodes.push_back(sraw_node);
    const bool reshape_folds = kt_reshape >= 0 && kt != kt_in && !m.kept(kt_in);
    if (reshape_folds) nodes.push_back(kt_reshape);
    if (!m.kept(kt) && (kt == kt_in || reshape_folds)) nodes.push_back(kt_node);
    std::sort(nodes.begin(), nodes.end());
    step.folded = std::move(nodes);
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

// ---- layout chains: Reshape, Permute, Transpose (and a Split's outputs) as one copy -----

bool is_layout(const Node& n) {
    return (n.is<ops::Reshape>() || n.is<ops::Permute>() || n.is<ops::Transpose>()) && n.inputs.size() == 1 &&
           n.outputs.size() == 1;
}

StridedView contiguous_view(const Shape& shape) {
    return {shape, ops::broadcast_strides(shape, shape), 0};  // (0 on axes of length 1: never stepped)
}

// v with its axes permuted: axis i of the result is axis p[i] of v.
void permute_view(StridedView& v, const std::vector<std::size_t>& p) {
    StridedView to = v;
    for (std::size_t i = 0; i < p.size(); ++i) {
        to.shape[i] = v.shape[p[i]];
        to.strides[i] = v.strides[p[i]];
    }
    v = std::move(to);
}

// v reshaped to `to` (as many elements) without moving any, as numpy reshapes a view: each
// run of v's axes that becomes a run of new axes must be contiguous in itself. False when the
// strides cannot express it (the reshape needs a copy of its own).
bool reshape_view(StridedView& v, const Shape& to) {
    Shape old;
    std::vector<std::size_t> os;
    for (std::size_t a = 0; a < v.shape.size(); ++a)
        if (v.shape[a] != 1) old.push_back(v.shape[a]), os.push_back(v.strides[a]);
    std::vector<std::size_t> ns(to.size(), 1);
    const std::size_t on = old.size(), nn = to.size();
    std::size_t oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < nn && oi < on) {
        std::size_t np = to[ni], op = old[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= nn) return false;
                np *= to[nj++];
            } else {
                if (oj >= on) return false;
                op *= old[oj++];
            }
        }
        for (std::size_t ok = oi; ok + 1 < oj; ++ok)
            if (os[ok] != old[ok + 1] * os[ok + 1]) return false;
        ns[nj - 1] = os[oj - 1];
        for (std::size_t nk = nj - 1; nk > ni; --nk) ns[nk - 1] = ns[nk] * to[nk];
        ni = nj++;
        oi = oj++;
    }
    for (; ni < nn; ++ni)
        if (to[ni] != 1) return false;
    if (oi < on) return false;
    v.shape = to;
    v.strides = std::move(ns);
    return true;
}

// The same elements in the same order over fewer axes: axes of length 1 dropped, and an axis
// merged into the one before it where that one steps over it whole (longer inner rows).
void simplify_view(StridedView& v) {
    Shape shape;
    std::vector<std::size_t> strides;
    for (std::size_t a = 0; a < v.shape.size(); ++a) {
        if (v.shape[a] == 1) continue;
        if (!shape.empty() && strides.back() == v.strides[a] * v.shape[a]) {
            shape.back() *= v.shape[a];
            strides.back() = v.strides[a];
            continue;
        }
        shape.push_back(v.shape[a]);
        strides.push_back(v.strides[a]);
    }
    if (shape.empty()) shape = {1}, strides = {1};
    v.shape = std::move(shape);
    v.strides = std::move(strides);
}

// A chain of fewer elements stays as its nodes: its copies take a microsecond or so either
// way, and small graphs (the seed's, a decoding step's) keep the plan and the memory
// placement they had. (Decoding one token after 1024 (12 heads, d_model 768) took 10 %
// longer with its 768-element chains as layout steps, all of it in packing K; its run's
// allocations land elsewhere, and glibc's malloc settings change the sign.)
constexpr std::size_t layout_min_elements = std::size_t{1} << 14;

// The layout steps, over the nodes no other rewrite took. Walking backwards, a layout node
// not yet taken ends a chain that climbs through unseen values read once by layout nodes. A
// Split whose every output is unseen and read once by a layout node is dissolved: the chains
// from its outputs copy out of its input, each its own slice, and the Split never runs. A
// chain is a step when it saves a copy: two nodes or more, or one from a dissolved Split.
void plan_layouts(const Graph& graph, const Matcher& m, std::vector<bool>& folded, std::vector<Step>& fused) {
    const auto& nodes = graph.nodes();
    std::vector<int> reader(graph.values().size(), -1);
    for (std::size_t i = 0; i < nodes.size(); ++i)
        for (int id : nodes[i].inputs) reader[static_cast<std::size_t>(id)] = static_cast<int>(i);
    auto unseen_once = [&](int id) { return !m.kept(id) && m.uses(id) == 1; };
    auto large = [&](int id) { return element_count(m.shape(id)) >= layout_min_elements; };
    std::vector<bool> dissolved(nodes.size(), false);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        if (folded[i] || !n.is<ops::Split>() || n.inputs.size() != 1) continue;
        bool all = true;
        for (int out : n.outputs) {
            const int r = unseen_once(out) && large(out) ? reader[static_cast<std::size_t>(out)] : -1;
            all = all && r >= 0 && !folded[static_cast<std::size_t>(r)] &&
                  is_layout(nodes[static_cast<std::size_t>(r)]) &&
                  fused[static_cast<std::size_t>(r)].kind == StepKind::node;
        }
        dissolved[i] = all;
    }
    for (std::size_t e = nodes.size(); e-- > 0;) {
        if (folded[e] || !is_layout(nodes[e]) || fused[e].kind != StepKind::node) continue;
        std::vector<int> chain{static_cast<int>(e)};  // from the end up
        int top = nodes[e].inputs[0];
        for (int p = m.producer(top);
             p >= 0 && unseen_once(top) && !folded[static_cast<std::size_t>(p)] &&
             is_layout(nodes[static_cast<std::size_t>(p)]) && fused[static_cast<std::size_t>(p)].kind == StepKind::node;
             p = m.producer(top)) {
            chain.push_back(p);
            top = nodes[static_cast<std::size_t>(p)].inputs[0];
        }
        if (!large(top)) continue;
        // the view of the top's value in its source, then down the chain
        int source = top, split = -1;
        StridedView v = contiguous_view(m.shape(top));
        if (const int p = m.producer(top); p >= 0 && dissolved[static_cast<std::size_t>(p)]) {
            const Node& sn = nodes[static_cast<std::size_t>(p)];
            split = p;
            source = sn.inputs[0];
            const Shape& xs = m.shape(source);
            const auto& attrs = *sn.attrs_if<ops::Split>();
            const std::size_t axis = ops::normalize_axis(attrs.axis, xs.size());
            const auto sizes = ops::Split::sizes(attrs, xs);
            v = contiguous_view(xs);
            for (std::size_t j = 0; j < sn.outputs.size() && sn.outputs[j] != top; ++j)
                v.offset += sizes[j] * v.strides[axis];
            v.shape[axis] = m.shape(top)[axis];
        }
        std::size_t first = chain.size();  // chain[first - 1] is the first node the step runs
        for (std::size_t k = chain.size(); k-- > 0;) {
            const Node& n = nodes[static_cast<std::size_t>(chain[k])];
            if (n.is<ops::Reshape>()) {
                if (k == 0) break;  // the last reshape: the copy's order already is its order
                if (!reshape_view(v, m.shape(n.outputs[0]))) {  // a copy of its own: start after it
                    first = k, split = -1, source = n.outputs[0];
                    v = contiguous_view(m.shape(source));
                }
                continue;
            }
            const std::size_t rank = v.shape.size();
            permute_view(v, n.is<ops::Permute>()
                                ? ops::checked_permutation(n.attrs_if<ops::Permute>()->perm.value, rank)
                                : ops::Transpose::permutation(*n.attrs_if<ops::Transpose>(), rank));
        }
        if (first < 2 && split < 0) continue;  // one node from a value: the node's own copy
        Step s;
        s.kind = StepKind::layout;
        s.inputs = {source};
        for (std::size_t k = 1; k < first; ++k) {
            s.folded.push_back(chain[k]);
            folded[static_cast<std::size_t>(chain[k])] = true;
        }
        if (split >= 0 && !folded[static_cast<std::size_t>(split)]) {  // in the first of its chains' steps
            s.folded.push_back(split);
            folded[static_cast<std::size_t>(split)] = true;
        }
        simplify_view(v);
        s.view = std::make_shared<const StridedView>(std::move(v));
        fused[e] = std::move(s);
    }
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
        plan_layouts(graph, m, folded, fused);
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
    static const char* kinds[] = {"node", "matmul_tb", "scaled_softmax", "attention", "linear_group", "layout"};
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

// y's elements, in row-major order, out of x as `v` places them: rows of the view's last
// axis, in fixed chunks of about 16K elements.
template <class T>
void layout_copy(const Array<T>& x, const StridedView& v, Array<T>& y) {
    const T* src = x.data() + v.offset;
    T* dst = y.data();
    const std::size_t rank = v.shape.size(), inner = v.shape.back(), step = v.strides.back();
    const std::size_t rows = y.size() / inner;
    parallel_chunks(rows, grain_for(inner, std::size_t{1} << 14), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
            // the row's offset over the axes before the last (ops::broadcast_offset would also
            // divide by the last: one more division a row, measurable at n = 1024)
            std::size_t at = 0, rest = r;
            for (std::size_t a = rank - 1; a-- > 0;) {
                at += (rest % v.shape[a]) * v.strides[a];
                rest /= v.shape[a];
            }
            const T* from = src + at;
            T* to = dst + r * inner;
            if (step == 1)
                std::copy(from, from + inner, to);
            else
                for (std::size_t j = 0; j < inner; ++j) to[j] = from[j * step];
        }
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
        case StepKind::matmul_tb:
            matmul_tb_forward<T>(*in[0], *in[1], *out[0]);
            return;
        case StepKind::scaled_softmax:
            scaled_softmax_forward<T>(*in[0], *out[0], factor);
            return;
        case StepKind::attention:
            fused_attention_forward<T>(*step.attention, in, out);
            return;
        case StepKind::linear_group:
            linear_group_forward<T>(in, out, step.member_inputs);
            return;
        case StepKind::layout:
            layout_copy<T>(*in[0], *step.view, *out[0]);
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
    AttentionSpec spec;
    const Shape qs = shape_of(q), ks = shape_of(k), vs = shape_of(v);
    spec.batch = batch_of(qs);
    spec.k_batch = batch_of(ks);
    spec.v_batch = batch_of(vs);
    spec.n = qs.end()[-2], spec.dk = qs.back(), spec.m = ks.end()[-2], spec.dv = vs.back();
    if (scaled) {
        ScoreStage st;
        st.kind = ScoreStage::Kind::scale;
        st.factor = static_cast<double>(factor);
        st.shape = spec.batch;
        st.shape.insert(st.shape.end(), {spec.n, spec.m});
        spec.stages.push_back(st);
    }
    spec.finish();
    const Array<T>* in[] = {&q, &k, &v};
    Array<T>* out[] = {&o};
    fused_attention_forward<T>(spec, In<T>(in, 3), Out<T>(out, 1));
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
