#include "engine/autodiff.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <limits>
#include <utility>

#include "engine/attention_kernel.hpp"
#include "engine/error.hpp"
#include "engine/fused_attention.hpp"
#include "engine/gemm.hpp"
#include "engine/npy.hpp"
#include "engine/optimize.hpp"
#include "engine/parallel.hpp"
#include "ops/ops.hpp"

namespace attngraph {

namespace fs = std::filesystem;

const Tensor& Gradients::at(const std::string& name) const {
    auto it = m_by_name.find(name);
    if (it == m_by_name.end()) throw GraphError("no gradient was computed for '" + name + "' (not requested)");
    return *it->second;
}

void Gradients::add(const std::string& name, std::shared_ptr<const Tensor> grad) {
    if (!m_by_name.count(name)) m_names.push_back(name);
    m_by_name[name] = std::move(grad);
}

namespace {

template <class T>
Array<T> zeros_like_shape(const Shape& s) {
    Array<T> a = uninitialized<T>(s);
    std::fill(a.begin(), a.end(), T(0));
    return a;
}

// A fused attention step of the forward plan (engine/optimize.hpp), O = softmax(chain(Q·Kᵀ))·V
// with a chain of Scales, Alibis, Masks and a Tanh (and maybe gpt-oss's sink column, or the
// Differential Transformer's O = (A_1 − A_2·lambda)·V), whose
// backward runs as one task (engine/attention_kernel.hpp): the scores and weights are
// internal to it, and recomputed block by block when the forward did not keep A.
struct AttentionGroup {
    std::size_t o_node = 0;            // the MatMul writing O: the group's task stands there
    std::vector<std::size_t> members;  // the nodes it covers (the Transpose too when KT is folded)
    int q = -1, k = -1, v = -1, o = -1;  // value ids; k is K, the Transpose's input
    int kt = -1;                         // KT when the forward kept it (its Transpose runs on its own), else -1
    int kt_value = -1;                   // KT, kept or not
    // where dKT goes when KT is kept: the node reading KT (S_raw's MatMul, or a Reshape in the
    // step) and its slot; else the folded Transpose, whose input K gets dK
    std::size_t kt_reader = 0, kt_slot = 1, kt_transpose = 0;
    // Reshapes in the step that regroup batch axes (the Attention composite's GQA form): the
    // values between A and O's MatMul (A_groups) and between KT and S_raw's MatMul
    // (KT_groups), with A's and KT's elements in A's and KT's order
    std::vector<int> a_views, kt_views;
    int s_raw = -1, a = -1;
    // A or one of a_views when it is a graph output (its seed starts A's gradient), else -1
    int a_seeded = -1;
    struct Link {
        std::size_t node = 0;
        int value = -1;  // the node's output
        ChainLink<double> op;
        // an Add: its stage in the step's spec, the bias's input slot, and the Gather or Mul
        // making the bias when the step reads the bias through it (-1: the bias is a tensor)
        std::size_t stage = 0, bias_slot = 0;
        int bias_node = -1;
    };
    // the Scale, Alibi, Mask, Tanh and Add nodes (and Reshapes of the batch axes) from the
    // softmax's input back to S_raw's reader
    std::vector<Link> chain;
    std::shared_ptr<const AttentionSpec> spec;  // the forward step's, to recompute A with its kernel
    std::vector<int> inputs;                    // the forward step's inputs (Q, K, V, mask tensors)
    // gpt-oss's sinks (engine/fused_attention.hpp, SinkColumn): A = Slice(A_sinks), A_sinks =
    // Softmax(S_sinks), S_sinks = Concat(S, S_sink), S_sink = Add(S_zero, bias), S_zero =
    // Scale(S_first) by 0, S_first = Slice(S_raw); value ids, -1 without sinks
    int a_sinks = -1, s_sinks = -1, s_sink = -1, s_zero = -1, s_first = -1;
    std::size_t sink_add = 0, sink_slot = 0;  // the Add and the bias's input slot
    // the Differential Transformer (engine/fused_attention.hpp, DiffPair): a is then Split's
    // input, A_split:0 (a_first) and A_split:1 (a_second) its outputs, A_2_weighted =
    // Mul(A_split:1, lambda), A_diff = Sub(A_split:0, A_2_weighted) O's MatMul's input; value
    // ids, -1 without the pair
    int a_diff = -1, a_first = -1, a_second = -1, a_weighted = -1, lambda = -1;
    std::size_t diff_mul = 0, lambda_slot = 0;  // the Mul and lambda's input slot
};

// A linear_group step of the forward plan: Linear nodes reading the same x (the heads' Q, K,
// V projections). Its backward is one task: each member's dW and db, then dX += dY_i·W_iᵀ
// for each member in turn, straight into dX instead of into a part of dX's size per member
// and their sum.
struct LinearGroup {
    std::vector<std::size_t> members;  // the Linear nodes, in graph order
    std::size_t member_inputs = 1;     // inputs after x: W, or W and b
};

// The attention steps of the plan for `kept` whose internal values (S_raw, S, A, a folded KT)
// get no gradient from outside the step: none of them is a graph output, but A (or one view of
// it) may be, as a model that returns its attention weights has it. A's seed is 0 where A is
// (a masked key), so the step's keys stay the same.
std::vector<AttentionGroup> attention_groups(const Graph& g, const Plan& plan);

struct FusedSteps {
    std::vector<AttentionGroup> attention;
    std::vector<LinearGroup> linear;
};

FusedSteps fused_steps(const Graph& g, const std::vector<bool>& kept) {
    const Plan plan = make_plan(g, kept);
    FusedSteps f;
    f.attention = attention_groups(g, plan);
    for (const Step& step : plan.steps) {
        if (step.kind != StepKind::linear_group) continue;
        LinearGroup grp;
        for (int n : step.nodes) grp.members.push_back(static_cast<std::size_t>(n));
        std::sort(grp.members.begin(), grp.members.end());
        grp.member_inputs = step.member_inputs;
        f.linear.push_back(std::move(grp));
    }
    return f;
}

std::vector<AttentionGroup> attention_groups(const Graph& g, const Plan& plan) {
    const auto& nodes = g.nodes();
    std::vector<bool> is_output(g.values().size(), false);
    for (int id : g.outputs()) is_output[static_cast<std::size_t>(id)] = true;
    auto producer = [&](int id) -> const Node& {
        return nodes[static_cast<std::size_t>(g.value(id).producer)];
    };
    std::vector<AttentionGroup> groups;
    for (const Step& step : plan.steps) {
        if (step.kind != StepKind::attention || !step.attention) continue;
        const AttentionSpec& spec = *step.attention;
        // the backward fuses a chain of Scales, ALiBi biases, Masks (patterns and boolean
        // or additive tensors), Adds of a bias (a tensor, or made by a Gather or a Mul the step
        // reads through), one Tanh (softcapping) and Reshapes of the batch axes, with or without
        // gpt-oss's sinks (a sink logit per matrix, S_zero = 0·S_first) or the Differential
        // Transformer's two maps (a lambda per O matrix); other forms run their nodes' own backward
        // (the sink operand's stride along the rows of (..., n, 1) is 0, lambda's along the
        // rows and keys of (..., n, m): one per matrix)
        const bool sink_fuses = spec.sink && spec.sink->factor == 0.0 && spec.sink_strides.size() >= 2 &&
                                spec.sink_strides.end()[-2] == 0;
        const bool diff_fuses = spec.diff && spec.lambda_strides.size() >= 2 && spec.lambda_strides.end()[-1] == 0 &&
                                spec.lambda_strides.end()[-2] == 0;
        bool plain = (!spec.sink || sink_fuses) && (!spec.diff || diff_fuses);
        std::size_t tanhs = 0;
        for (const ScoreStage& st : spec.stages) {
            tanhs += st.kind == ScoreStage::Kind::tanh;
            plain = plain && (st.kind == ScoreStage::Kind::scale || st.kind == ScoreStage::Kind::alibi ||
                              st.kind == ScoreStage::Kind::tanh || st.kind == ScoreStage::Kind::add ||
                              st.kind == ScoreStage::Kind::mask);
        }
        plain = plain && tanhs <= 1;
        for (int f : step.folded) {
            const Node& fn = nodes[static_cast<std::size_t>(f)];
            plain = plain && (fn.is<ops::Transpose>() || fn.is<ops::MatMul>() || fn.is<ops::Scale>() ||
                              fn.is<ops::Alibi>() || fn.is<ops::Mask>() || fn.is<ops::Tanh>() || fn.is<ops::Softmax>() ||
                              fn.is<ops::Add>() || fn.is<ops::Gather>() || fn.is<ops::Mul>() || fn.is<ops::Reshape>() ||
                              (spec.sink && (fn.is<ops::Slice>() || fn.is<ops::Concat>())) ||
                              (spec.diff && (fn.is<ops::Split>() || fn.is<ops::Sub>())));
        }
        if (!plain) continue;
        AttentionGroup grp;
        grp.spec = step.attention;
        grp.inputs = step.inputs;
        grp.o_node = static_cast<std::size_t>(step.node);
        const Node& o = nodes[grp.o_node];
        grp.o = o.outputs[0];
        grp.a = o.inputs[0];
        grp.v = o.inputs[1];
        auto folded = [&](int id) {  // the node making value id is in the step
            const int p = g.value(id).producer;
            return p >= 0 && std::find(step.folded.begin(), step.folded.end(), p) != step.folded.end();
        };
        for (; !spec.diff && producer(grp.a).is<ops::Reshape>() && folded(grp.a); grp.a = producer(grp.a).inputs[0])
            grp.a_views.push_back(grp.a);
        if (spec.diff) {  // the forward matched these nodes (engine/optimize.cpp, match_diff)
            grp.a_diff = grp.a;
            const Node& sub = producer(grp.a_diff);
            grp.a_first = sub.inputs[0];
            grp.a_weighted = sub.inputs[1];
            grp.diff_mul = static_cast<std::size_t>(g.value(grp.a_weighted).producer);
            const Node& split = producer(grp.a_first);
            grp.a_second = split.outputs[1];
            grp.lambda_slot = nodes[grp.diff_mul].inputs[0] == grp.a_second ? 1 : 0;
            grp.lambda = nodes[grp.diff_mul].inputs[grp.lambda_slot];
            grp.a = split.inputs[0];
        }
        int s_in = producer(grp.a).inputs[0];  // the softmax's input, then back along the chain
        if (spec.sink) {  // the forward matched these nodes (engine/optimize.cpp, match_sinks)
            grp.a_sinks = s_in;
            grp.s_sinks = producer(grp.a_sinks).inputs[0];
            const Node& concat = producer(grp.s_sinks);
            s_in = concat.inputs[0];
            grp.s_sink = concat.inputs[1];
            grp.sink_add = static_cast<std::size_t>(g.value(grp.s_sink).producer);
            grp.sink_slot = spec.sink->bias_first ? 0 : 1;
            grp.s_zero = nodes[grp.sink_add].inputs[1 - grp.sink_slot];
            grp.s_first = producer(grp.s_zero).inputs[0];
        }
        std::size_t stages = 0;  // the chain's links that are the step's stages (not Reshapes)
        for (;; ++stages) {
            const Node& link = producer(s_in);
            const auto node = static_cast<std::size_t>(g.value(s_in).producer);
            using Kind = ChainKind;
            // the stage this link is, counted from the last (the chain runs back from the softmax)
            const std::size_t stage = stages < spec.stages.size() ? spec.stages.size() - 1 - stages : 0;
            if (link.is<ops::Reshape>() && folded(s_in)) {  // passes dS as it is (the same elements)
                grp.chain.push_back({node, s_in, {Kind::reshape}});
                s_in = link.inputs[0];
                --stages;
                continue;
            }
            if (const auto* scale = link.attrs_if<ops::Scale>()) {
                grp.chain.push_back({node, s_in, {Kind::scale, scale->factor.value}, stage});
            } else if (const auto* alibi = link.attrs_if<ops::Alibi>()) {
                const Shape& x = g.value(link.inputs[0]).shape;  // (..., h, n, m)
                grp.chain.push_back({node, s_in, {Kind::alibi, 1.0, alibi->offset, x.end()[-3]}, stage});
            } else if (link.is<ops::Mask>()) {
                grp.chain.push_back({node, s_in, {Kind::mask}, stage, 1});  // (an additive tensor: slot 1)
            } else if (link.is<ops::Tanh>()) {
                grp.chain.push_back({node, s_in, {Kind::tanh}, stage});
            } else if (link.is<ops::Add>() && stages < spec.stages.size()) {
                // the step's stage: its bias is its operand, or made by a folded Gather or Mul of it
                const ScoreStage& st = spec.stages[stage];
                if (st.kind != ScoreStage::Kind::add || st.operand < 0) break;
                const int operand = step.inputs[static_cast<std::size_t>(st.operand)];
                const bool through = st.index >= 0 || st.multiplier >= 0;
                std::size_t slot = 2;
                int bias_node = -1;
                for (std::size_t k = 0; k < 2; ++k) {
                    const int id = link.inputs[k], p = g.value(id).producer;
                    if (!through) {
                        if (id == operand) slot = k;
                    } else if (folded(id) &&
                               (nodes[static_cast<std::size_t>(p)].is<ops::Gather>() ||
                                nodes[static_cast<std::size_t>(p)].is<ops::Mul>()) &&
                               nodes[static_cast<std::size_t>(p)].inputs[0] == operand) {
                        slot = k;
                        bias_node = p;
                    }
                }
                if (slot > 1) break;
                grp.chain.push_back({node, s_in, {Kind::add}, stage, slot, bias_node});
                s_in = link.inputs[1 - slot];
                continue;
            } else {
                break;
            }
            s_in = link.inputs[0];
        }
        grp.s_raw = s_in;
        const Node& s_raw_node = producer(grp.s_raw);
        if (stages != spec.stages.size() || !s_raw_node.is<ops::MatMul>()) continue;  // not the step's chain
        grp.q = s_raw_node.inputs[0];
        // KT, under the step's Reshapes; K is the step's input (the Transpose's)
        int kt = s_raw_node.inputs[1];
        grp.kt_reader = static_cast<std::size_t>(g.value(grp.s_raw).producer);
        grp.kt_slot = 1;
        for (; producer(kt).is<ops::Reshape>() && folded(kt); kt = producer(kt).inputs[0]) {
            grp.kt_views.push_back(kt);
            grp.kt_reader = static_cast<std::size_t>(g.value(kt).producer);
            grp.kt_slot = 0;
        }
        grp.k = step.inputs[1];  // (the forward matched KT = Transpose(K), maybe under a Reshape)
        const bool kt_folded = folded(kt);
        if (kt_folded) grp.kt_transpose = static_cast<std::size_t>(g.value(kt).producer);
        grp.kt_value = kt;
        for (int f : step.folded) grp.members.push_back(static_cast<std::size_t>(f));
        grp.members.push_back(grp.o_node);
        if (!kt_folded) grp.kt = kt;
        bool seeded = is_output[static_cast<std::size_t>(grp.s_raw)] || (kt_folded && is_output[static_cast<std::size_t>(kt)]);
        for (const AttentionGroup::Link& link : grp.chain) seeded = seeded || is_output[static_cast<std::size_t>(link.value)];
        for (int id : grp.kt_views) seeded = seeded || is_output[static_cast<std::size_t>(id)];
        std::vector<int> a_and_views = grp.a_views;  // A's seed: from one of them, not with two maps
        a_and_views.push_back(grp.a);
        for (int id : a_and_views) {
            if (!is_output[static_cast<std::size_t>(id)]) continue;
            seeded = seeded || grp.a_seeded >= 0 || spec.diff;
            grp.a_seeded = id;
        }
        for (int id : {grp.a_sinks, grp.s_sinks, grp.s_sink, grp.s_zero, grp.s_first, grp.a_diff, grp.a_first,
                       grp.a_second, grp.a_weighted})
            seeded = seeded || (id >= 0 && is_output[static_cast<std::size_t>(id)]);
        if (!seeded) groups.push_back(std::move(grp));
    }
    return groups;
}

// What the backward pass of one graph does, decided before any arithmetic: which node
// backwards run, which consumers add into which gradient, and the task graph the executor
// runs. Where a value has several consumers, the first adds into its gradient and each other
// one into its own part; a sum task adds the parts in consumer order once they are all done
// (so the result does not depend on which consumer finished first). A fused attention step
// is one task covering its nodes; the edges of its inputs stand at their nodes' places, as
// without fusion.
struct BackwardPlan {
    std::vector<bool> requested;  // value id -> the caller wants its gradient
    std::vector<bool> runs;       // node index -> its backward runs (on its own or in a group)
    // value id -> the (node, input slot) pairs that add into its gradient, in node order
    std::vector<std::vector<std::pair<std::size_t, std::size_t>>> edges;
    // node index -> input slot -> position in edges[input], -1: no gradient for that slot
    std::vector<std::vector<int>> slot_edge;
    std::vector<AttentionGroup> groups;
    std::vector<int> group_of;  // node index -> the attention group covering it, -1: none
    std::vector<LinearGroup> linear;
    std::vector<int> linear_of;  // node index -> the linear group covering it, -1: none
    // the tasks: a node's backward, a group's, or the sum of a value's parts
    enum class Kind { node, sum, attention, linear };
    struct Task {
        Kind kind = Kind::node;
        std::size_t index = 0;  // node index, value id for a sum, group index (attention or linear)
    };
    std::vector<Task> tasks;
    TaskGraph graph;
};

BackwardPlan make_backward_plan(const Graph& g, const std::vector<bool>& requested, FusedSteps fused) {
    const auto& values = g.values();
    const auto& nodes = g.nodes();
    using Kind = BackwardPlan::Kind;
    BackwardPlan p;
    p.requested = requested;
    // needs[v]: v is requested or computed from a requested value (its gradient is on a path)
    std::vector<bool> needs = requested;
    for (const Node& n : nodes) {
        bool any = false;
        for (std::size_t k = 0; k < n.inputs.size(); ++k)
            any = any || (n.op->has_grad(k) && needs[static_cast<std::size_t>(n.inputs[k])]);
        if (any)
            for (int id : n.outputs) needs[static_cast<std::size_t>(id)] = true;
    }
    // reaches[v]: some output is computed from v (its gradient can be non-zero)
    std::vector<bool> reaches(values.size(), false);
    for (int id : g.outputs()) reaches[static_cast<std::size_t>(id)] = true;
    p.runs.assign(nodes.size(), false);
    for (std::size_t i = nodes.size(); i-- > 0;) {
        const Node& n = nodes[i];
        bool out_reaches = false, in_needs = false;
        for (int id : n.outputs) out_reaches = out_reaches || reaches[static_cast<std::size_t>(id)];
        for (std::size_t k = 0; k < n.inputs.size(); ++k)
            in_needs = in_needs || (n.op->has_grad(k) && needs[static_cast<std::size_t>(n.inputs[k])]);
        if (out_reaches)
            for (int id : n.inputs) reaches[static_cast<std::size_t>(id)] = true;
        p.runs[i] = out_reaches && in_needs;
    }
    // a group runs when its O node does; its members then run inside it, whatever they would alone
    std::erase_if(fused.attention, [&](const AttentionGroup& grp) { return !p.runs[grp.o_node]; });
    p.groups = std::move(fused.attention);
    // a linear group of the members that run, when two or more do
    for (LinearGroup& grp : fused.linear) std::erase_if(grp.members, [&](std::size_t i) { return !p.runs[i]; });
    std::erase_if(fused.linear, [](const LinearGroup& grp) { return grp.members.size() < 2; });
    p.linear = std::move(fused.linear);
    p.linear_of.assign(nodes.size(), -1);
    for (std::size_t gi = 0; gi < p.linear.size(); ++gi)
        for (std::size_t i : p.linear[gi].members) p.linear_of[i] = static_cast<int>(gi);
    p.group_of.assign(nodes.size(), -1);
    std::vector<int> made_by(values.size(), -1);  // value id -> the group whose member writes it
    for (std::size_t gi = 0; gi < p.groups.size(); ++gi)
        for (std::size_t i : p.groups[gi].members) {
            p.group_of[i] = static_cast<int>(gi);
            p.runs[i] = true;
            for (int id : nodes[i].outputs)
                if (id != p.groups[gi].o) made_by[static_cast<std::size_t>(id)] = static_cast<int>(gi);
        }
    p.edges.resize(values.size());
    p.slot_edge.resize(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        p.slot_edge[i].assign(n.inputs.size(), -1);
        if (!p.runs[i]) continue;
        const int group = p.group_of[i], linear = p.linear_of[i];
        if (group < 0 && linear < 0 && (!n.op->backward<float>() || !n.op->backward<double>()))
            throw GraphError("node '" + n.name + "' (" + n.op->name + ") has no backward: graph '" + g.name() +
                             "' cannot be differentiated through it");
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            const auto v = static_cast<std::size_t>(n.inputs[k]);
            if (!needs[v] || !n.op->has_grad(k)) continue;
            if (group >= 0 && made_by[v] == group) continue;  // internal: the group computes it
            // x: the linear group adds dX once, through its first member's slot
            if (linear >= 0 && k == 0 && p.linear[static_cast<std::size_t>(linear)].members[0] != i) continue;
            p.slot_edge[i][k] = static_cast<int>(p.edges[v].size());
            p.edges[v].emplace_back(i, k);
            p.graph.work += element_count(values[v].shape);
        }
        for (int id : n.outputs) p.graph.work += element_count(values[static_cast<std::size_t>(id)].shape);
    }

    // Tasks in reverse graph order: a value's sum after all its consumers, before its producer.
    std::vector<std::size_t> node_task(nodes.size()), sum_task(values.size());
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::fill(node_task.begin(), node_task.end(), none);
    std::fill(sum_task.begin(), sum_task.end(), none);
    auto add_sum = [&](std::size_t v) {
        if (p.edges[v].size() < 2) return;
        sum_task[v] = p.tasks.size();
        p.tasks.push_back({Kind::sum, v});
    };
    for (std::size_t i = nodes.size(); i-- > 0;) {
        for (int id : nodes[i].outputs) add_sum(static_cast<std::size_t>(id));
        if (!p.runs[i]) continue;
        const int group = p.group_of[i], linear = p.linear_of[i];
        if (group >= 0 && p.groups[static_cast<std::size_t>(group)].o_node != i) continue;
        // a linear group stands at its first member: after every consumer of every member
        if (linear >= 0 && p.linear[static_cast<std::size_t>(linear)].members[0] != i) continue;
        if (linear >= 0) {
            for (std::size_t member : p.linear[static_cast<std::size_t>(linear)].members) node_task[member] = p.tasks.size();
            p.tasks.push_back({Kind::linear, static_cast<std::size_t>(linear)});
        } else if (group >= 0) {
            for (std::size_t member : p.groups[static_cast<std::size_t>(group)].members) node_task[member] = p.tasks.size();
            p.tasks.push_back({Kind::attention, static_cast<std::size_t>(group)});
        } else {
            node_task[i] = p.tasks.size();
            p.tasks.push_back({Kind::node, i});
        }
    }
    for (std::size_t v = 0; v < values.size(); ++v)
        if (values[v].producer < 0) add_sum(v);
    // v's gradient is complete: after its sum, or after its one consumer
    auto complete_after = [&](std::size_t v) {
        const int producer = values[v].producer;
        return producer < 0 ? none : node_task[static_cast<std::size_t>(producer)];
    };
    p.graph.successors.resize(p.tasks.size());
    auto wait_for_inputs = [&](std::size_t t, std::size_t i) {
        const Node& n = nodes[i];
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            if (p.slot_edge[i][k] < 0) continue;
            const auto v = static_cast<std::size_t>(n.inputs[k]);
            const std::size_t waiting = sum_task[v] != none ? sum_task[v] : complete_after(v);
            if (waiting != none) p.graph.successors[t].push_back(waiting);
        }
    };
    for (std::size_t t = 0; t < p.tasks.size(); ++t) {
        const auto& task = p.tasks[t];
        if (task.kind == Kind::sum) {
            if (complete_after(task.index) != none) p.graph.successors[t].push_back(complete_after(task.index));
        } else if (task.kind == Kind::node) {
            wait_for_inputs(t, task.index);
        } else if (task.kind == Kind::attention) {
            for (std::size_t member : p.groups[task.index].members) wait_for_inputs(t, member);
        } else {
            for (std::size_t member : p.linear[task.index].members) wait_for_inputs(t, member);
        }
    }
    return p;
}

template <class T>
class BackwardRun {
public:
    BackwardRun(const Graph& g, const RunResult& fwd, const BackwardPlan& plan, std::map<int, Tensor> seeds,
                const std::function<void(std::size_t, std::size_t)>& progress)
        : m_graph(g), m_plan(plan), m_progress(progress) {
        const auto& values = g.values();
        const auto& nodes = g.nodes();
        m_grad.resize(values.size());
        m_has.assign(values.size(), 0);
        m_extra.resize(values.size());
        m_forward.resize(values.size(), nullptr);
        m_seconds.assign(nodes.size(), -1.0);
        for (std::size_t v = 0; v < values.size(); ++v) {
            if (!plan.edges[v].empty()) m_extra[v].resize(plan.edges[v].size() - 1);
            if (fwd.values[v] && fwd.values[v]->dtype() != dtype_of<T>())
                throw GraphError("forward value '" + values[v].name + "' is " + to_string(fwd.values[v]->dtype()) +
                                 " but graph '" + g.name() + "' computes in " + to_string(dtype_of<T>()) +
                                 ": not a run of this graph");
            if (fwd.values[v])
                m_forward[v] = &fwd.values[v]->as<T>();
            else if (values[v].data)
                m_forward[v] = &values[v].data->as<T>();
        }
        for (auto& [id, g_tensor] : seeds) {
            m_grad[static_cast<std::size_t>(id)] = std::move(g_tensor.template as<T>());
            m_has[static_cast<std::size_t>(id)] = 1;
        }
        // An output given no gradient starts from ones. A fused step's A (or view) is never
        // made whole: the step reads one row of ones for every row (201 MB fewer at n = 2048).
        m_ones_seed.assign(values.size(), 0);
        for (const AttentionGroup& grp : plan.groups)
            if (grp.a_seeded >= 0) m_ones_seed[static_cast<std::size_t>(grp.a_seeded)] = 1;
        for (int id : g.outputs()) {
            const auto v = static_cast<std::size_t>(id);
            if (m_has[v] || m_ones_seed[v]) continue;
            m_grad[v] = uninitialized<T>(values[v].shape);
            std::fill(m_grad[v].begin(), m_grad[v].end(), T(1));
            m_has[v] = 1;
        }
        for (std::size_t v = 0; v < values.size(); ++v) m_ones_seed[v] = m_ones_seed[v] && !m_has[v];
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            if (!plan.runs[i]) continue;
            ++m_nodes_total;
            if (plan.group_of[i] >= 0) continue;
            for (int id : nodes[i].inputs) need_forward(nodes[i], id);
            for (int id : nodes[i].outputs) need_forward(nodes[i], id);
        }
        for (const AttentionGroup& grp : plan.groups)
            for (int id : {grp.q, grp.k, grp.v, grp.lambda})
                if (id >= 0) need_forward(nodes[grp.o_node], id);
    }

    Gradients run(Executor& executor) {
        executor.execute(m_plan.graph, [this](std::size_t t) {
            const auto& task = m_plan.tasks[t];
            switch (task.kind) {
                case BackwardPlan::Kind::sum:
                    sum_parts(task.index);
                    return true;
                case BackwardPlan::Kind::node:
                    execute(task.index);
                    if (m_progress) m_progress(++m_nodes_done, m_nodes_total);
                    return true;
                case BackwardPlan::Kind::linear:
                    execute_linear(m_plan.linear[task.index]);
                    if (m_progress)
                        m_progress(m_nodes_done += m_plan.linear[task.index].members.size(), m_nodes_total);
                    return true;
                case BackwardPlan::Kind::attention:
                    execute_group(m_plan.groups[task.index]);
                    if (m_progress)
                        m_progress(m_nodes_done += m_plan.groups[task.index].members.size(), m_nodes_total);
                    return true;
            }
            return true;
        });
        Gradients out;
        const auto& values = m_graph.values();
        for (std::size_t v = 0; v < values.size(); ++v) {
            if (!m_plan.requested[v]) continue;
            Array<T> g = m_has[v] ? std::move(m_grad[v]) : zeros_like_shape<T>(values[v].shape);
            out.add(values[v].name, std::make_shared<const Tensor>(std::move(g)));
        }
        for (std::size_t i = 0; i < m_seconds.size(); ++i)
            if (m_seconds[i] >= 0) out.set_seconds(m_graph.nodes()[i].name, m_seconds[i]);
        return out;
    }

private:
    void need_forward(const Node& node, int id) {
        const auto v = static_cast<std::size_t>(id);
        const ValueInfo& info = m_graph.value(id);
        if (!m_forward[v])
            throw GraphError("backward of node '" + node.name + "' (" + node.op->name + ") needs value '" + info.name +
                             "', which the forward run did not keep (run with keep_for_backward or keep_all)");
        const Shape have(m_forward[v]->shape().begin(), m_forward[v]->shape().end());
        if (have != info.shape)
            throw ShapeError("forward value '" + info.name + "' is " + shape_str(have) + " but graph '" +
                             m_graph.name() + "' has it " + shape_str(info.shape) + ": not a run of this graph");
    }

    void allocate(std::size_t v) {
        if (m_has[v]) return;
        m_grad[v] = zeros_like_shape<T>(m_graph.values()[v].shape);
        m_has[v] = 1;
    }

    // Where node i's backward adds the gradient of its input slot k: the gradient itself for
    // the value's first consumer, its own part for the others; null when the slot needs none.
    Array<T>* input_grad(std::size_t i, std::size_t k) {
        const auto v = static_cast<std::size_t>(m_graph.nodes()[i].inputs[k]);
        const int e = m_plan.slot_edge[i][k];
        if (e < 0) return nullptr;
        if (e == 0) {
            allocate(v);
            return &m_grad[v];
        }
        Array<T>& part = m_extra[v][static_cast<std::size_t>(e - 1)];
        part = zeros_like_shape<T>(m_graph.values()[v].shape);
        return &part;
    }

    // The output gradients a backward has read are dropped, unless requested.
    void release_grad(int id) {
        const auto v = static_cast<std::size_t>(id);
        if (m_plan.requested[v]) return;
        m_grad[v] = Array<T>();
        m_has[v] = 0;
    }

    // node i's backward: adds into the gradients (or parts) of its inputs (but its input 0's
    // when skip_x: a linear group adds that; it then also keeps the output gradients)
    void execute(std::size_t i, bool skip_x = false) {
        const Node& node = m_graph.nodes()[i];
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<const Array<T>*> in, out, dout;
        std::vector<Array<T>*> din;
        for (int id : node.inputs) in.push_back(m_forward[static_cast<std::size_t>(id)]);
        for (int id : node.outputs) {
            const auto v = static_cast<std::size_t>(id);
            out.push_back(m_forward[v]);
            allocate(v);
            dout.push_back(&m_grad[v]);
        }
        for (std::size_t k = 0; k < node.inputs.size(); ++k) din.push_back(skip_x && k == 0 ? nullptr : input_grad(i, k));
        node.op->backward<T>()(node.attrs, In<T>(in), In<T>(out), In<T>(dout), Out<T>(din));
        m_seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (skip_x) return;
        for (int id : node.outputs) release_grad(id);
    }

    // A fused attention step's backward (engine/attention_kernel.hpp). The gradients of its
    // internal values are written only when requested (a traced run); a kept KT gets dK
    // transposed, which its Transpose's own backward transposes back (exactly).
    void execute_group(const AttentionGroup& grp) {
        const auto& nodes = m_graph.nodes();
        const auto t0 = std::chrono::steady_clock::now();
        const auto at = [](int id) { return static_cast<std::size_t>(id); };
        AttentionOperands<T> op =
            attention_operands<T>(*m_forward[at(grp.q)], *m_forward[at(grp.k)], *m_forward[at(grp.v)], T(1), false);
        // K's and V's matrix per matrix of Q as the forward step has them (through its Reshapes:
        // K (B, G, m, dk) read as (B, G, 1, m, dk) by Q's (B, G, r) matrices); with the
        // Differential Transformer V's stays per matrix of Q (the step's is per O matrix)
        op.kb = grp.spec->k_offset;
        if (!grp.spec->diff) op.vb = grp.spec->v_offset;
        for (const AttentionGroup::Link& link : grp.chain)
            op.chain.push_back({link.op.kind, static_cast<T>(link.op.factor), link.op.offset, link.op.heads});
        // A recomputed by the forward step's own kernel: its block, its masks, its bits
        std::vector<const Array<T>*> step_in;
        for (int id : grp.inputs) step_in.push_back(m_forward[at(id)]);
        const AttentionKernel<T> kernel(*grp.spec, In<T>(step_in));
        op.keys = [&](std::size_t b, std::size_t r0, std::size_t rows) {
            std::size_t lo = 0, hi = 0;  // the union of the blocks' spans
            for (std::size_t i = r0 / gemm_row_block; i * gemm_row_block < r0 + rows; ++i) {
                const auto blk = kernel.block(b, i);
                if (blk.lo == blk.hi) continue;
                lo = hi == 0 ? blk.lo : std::min(lo, blk.lo);
                hi = std::max(hi, blk.hi);
            }
            return std::pair<std::size_t, std::size_t>{lo, hi};
        };
        // a Tanh's stage (the chain runs from the last stage back): its output goes to `y`
        std::size_t tanh_stage = 0;
        for (const AttentionGroup::Link& link : grp.chain)
            if (link.op.kind == ChainKind::tanh) tanh_stage = link.stage;
        op.weights = [&](std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo, std::size_t hi, T* a, T* y,
                         T* sink) {
            const auto blk = kernel.block(b, r0 / gemm_row_block);
            const typename AttentionKernel<T>::Capture capture{tanh_stage, y ? y + lo : nullptr, op.m, lo, hi, sink};
            kernel.weights(blk, a, Out<T>{}, y || sink ? &capture : nullptr, op.m);  // A in a's rows
            // the block's key span within [lo, hi), zeros around it
            const std::size_t from = blk.lo == blk.hi ? lo : blk.lo, to = blk.lo == blk.hi ? lo : blk.hi;
            for (std::size_t r = 0; r < rows; ++r) {
                T* row = a + r * op.m;
                std::fill(row + lo, row + from, T(0));
                std::fill(row + to, row + hi, T(0));
                // a NaN row (its span, or its sink, NaN throughout) is NaN on every key, as the
                // Softmax op's
                const std::size_t first = blk.row_lo[r];
                const bool nan_row = blk.row_lo[r] < blk.row_hi[r]
                                         ? first >= lo && first < hi && row[first] != row[first]
                                         : sink && sink[r] != sink[r];
                if (nan_row) std::fill(row + lo, row + hi, std::numeric_limits<T>::quiet_NaN());
            }
        };
        op.row_keys = [&](std::size_t b, std::size_t r0, std::size_t rows, std::size_t* lo, std::size_t* hi) {
            for (std::size_t f0 = 0; f0 < rows; f0 += gemm_row_block) {  // (r0 starts a forward block)
                const auto blk = kernel.block(b, (r0 + f0) / gemm_row_block);
                for (std::size_t r = 0; r < blk.rows && f0 + r < rows; ++r)
                    lo[f0 + r] = blk.row_lo[r], hi[f0 + r] = blk.row_hi[r];
            }
        };
        const std::size_t s_raw_node = at(m_graph.value(grp.s_raw).producer);
        AttentionGrads<T> g;
        // A's seed (A a graph output), taken out of A's gradient before anything allocates it:
        // that then holds A's whole gradient when it is asked for
        Array<T> a_seed;
        if (grp.a_seeded >= 0 && m_ones_seed[at(grp.a_seeded)]) {  // given none: ones
            a_seed = uninitialized<T>(Shape{op.m});
            std::fill(a_seed.begin(), a_seed.end(), T(1));
            g.a_seed = a_seed.data();
            g.a_seed_one_row = true;
        } else if (grp.a_seeded >= 0 && m_has[at(grp.a_seeded)]) {
            a_seed = std::exchange(m_grad[at(grp.a_seeded)], Array<T>());
            m_has[at(grp.a_seeded)] = 0;
            g.a_seed = a_seed.data();
        }
        if (Array<T>* dq = input_grad(s_raw_node, 0)) g.dq = dq->data();
        if (Array<T>* dv = input_grad(grp.o_node, 1)) g.dv = dv->data();
        auto internal = [&](int id) -> T* {
            if (id < 0 || !m_plan.requested[at(id)]) return nullptr;
            allocate(at(id));
            return m_grad[at(id)].data();
        };
        auto any_requested = [&](const std::vector<int>& ids) {
            return std::ranges::any_of(ids, [&](int id) { return m_plan.requested[at(id)]; });
        };
        // dK, into K's gradient when KT is folded; else (KT kept), or when KT's gradient or its
        // views' is asked for, into dk_local, whose transpose is KT's. K's gradient holding its
        // seed already (K a graph output too, as a KV cache's present_key): into dk_local, then
        // added to it, in the bits of a run that keeps KT (its Transpose adds dKᵀ so)
        std::vector<int> kt_views = grp.kt_views;
        if (grp.kt < 0) kt_views.push_back(grp.kt_value);  // folded: KT is internal too
        const bool k_seeded =
            grp.kt < 0 && m_plan.slot_edge[grp.kt_transpose][0] == 0 && m_has[at(nodes[grp.kt_transpose].inputs[0])];
        Array<T>* dkt = grp.kt >= 0 ? input_grad(grp.kt_reader, grp.kt_slot) : nullptr;
        Array<T>* dk_direct = grp.kt >= 0 ? nullptr : input_grad(grp.kt_transpose, 0);
        Array<T> dk_local;
        const bool dk_transposed = dkt || any_requested(kt_views);
        if (dk_transposed || (dk_direct && k_seeded)) {
            dk_local = zeros_like_shape<T>(m_graph.value(grp.k).shape);
            g.dk = dk_local.data();
        } else if (dk_direct) {
            g.dk = dk_direct->data();
        }
        g.ds_raw = internal(grp.s_raw);
        for (const AttentionGroup::Link& link : grp.chain) {
            g.chain.push_back(internal(link.value));
            Array<T>* slopes = link.op.kind == ChainKind::alibi ? input_grad(link.node, 1) : nullptr;
            g.slopes.push_back(slopes ? slopes->data() : nullptr);
        }
        g.da = internal(grp.a);
        if (!g.da && any_requested(grp.a_views)) {  // A's views' gradients are A's
            allocate(at(grp.a));
            g.da = m_grad[at(grp.a)].data();
        }
        if (grp.a_sinks >= 0) {
            const SinkColumn& sc = *grp.spec->sink;
            for (std::size_t b = 0; b < op.batches; ++b)  // the sink logit of each matrix (of its row 0)
                op.sink_of.push_back(ops::broadcast_offset(b * op.n, sc.shape, grp.spec->sink_strides));
            if (Array<T>* bias = input_grad(grp.sink_add, grp.sink_slot)) g.sink = bias->data();
            g.a_sinks = internal(grp.a_sinks);
            g.s_sinks = internal(grp.s_sinks);
            g.s_sink = internal(grp.s_sink);
            g.s_zero = internal(grp.s_zero);
            g.s_first = internal(grp.s_first);
        }
        if (grp.a_diff >= 0) {
            const DiffPair& dp = *grp.spec->diff;
            const std::size_t outputs = op.batches / 2;
            for (std::size_t b = 0; b < outputs; ++b)  // the lambda of each O matrix (of its element (0, 0))
                op.lambda_of.push_back(ops::broadcast_offset(b * op.n * op.m, dp.shape, grp.spec->lambda_strides));
            op.lambda = m_forward[at(grp.lambda)]->data();
            if (Array<T>* lambda = input_grad(grp.diff_mul, grp.lambda_slot)) g.lambda = lambda->data();
            g.a_diff = internal(grp.a_diff);
            g.a_first = internal(grp.a_first);
            g.a_second = internal(grp.a_second);
            g.a_weighted = internal(grp.a_weighted);
        }
        // an Add's bias and an additive Mask's tensor get dS (a Mask's boolean tensor: 0)
        for (std::size_t i = 0; i < grp.chain.size(); ++i) {
            const AttentionGroup::Link& link = grp.chain[i];
            const bool tensor = link.op.kind == ChainKind::mask && nodes[link.node].inputs.size() == 2;
            if (link.op.kind == ChainKind::add ||
                (tensor && grp.spec->stages[link.stage].mask_tensor == ScoreStage::MaskTensor::additive))
                add_bias_grads(grp, i, kernel, op);
            else if (tensor)
                input_grad(link.node, 1);
        }
        allocate(at(grp.o));
        const Array<T>* a_kept = grp.a_diff >= 0 ? nullptr : m_forward[at(grp.a)];  // diff: always recomputed
        attention_backward<T>(op, a_kept ? a_kept->data() : nullptr, m_grad[at(grp.o)].data(), g);
        if (dk_direct && g.dk == dk_local.data()) {
            T* to = dk_direct->data();
            const T* from = dk_local.data();
            for (std::size_t e = 0; e < dk_local.size(); ++e) to[e] += from[e];
        }
        if (dk_transposed) {  // KT (kbatch..., dk, m) += dKᵀ; its views (the same elements) get it too
            Array<T> fresh;
            T* d = dkt ? dkt->data() : (fresh = zeros_like_shape<T>(m_graph.value(grp.kt_value).shape)).data();
            const T* src = dk_local.data();
            const std::size_t m = op.m, dk = op.dk;
            parallel_chunks(op.k_batches, 1, [&](std::size_t b0, std::size_t b1) {
                for (std::size_t b = b0; b < b1; ++b)
                    for (std::size_t r = 0; r < m; ++r)
                        for (std::size_t c = 0; c < dk; ++c) d[(b * dk + c) * m + r] += src[(b * m + r) * dk + c];
            });
            copy_to_views(kt_views, d);
        }
        if (g.da) copy_to_views(grp.a_views, g.da);
        m_seconds[grp.o_node] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        release_grad(grp.o);
    }

    // The requested ones of `views` (Reshapes of a value in a fused step: the same elements)
    // get the value's gradient `from`.
    void copy_to_views(const std::vector<int>& views, const T* from) {
        for (int id : views) {
            const auto v = static_cast<std::size_t>(id);
            if (!m_plan.requested[v]) continue;
            allocate(v);
            std::copy_n(from, m_grad[v].size(), m_grad[v].data());
        }
    }

    // The gradients of chain link i's bias (an Add of the step, or an additive Mask's tensor:
    // engine/attention_kernel.hpp's BiasGrad): its operands' (the bias tensor's, or its folded
    // Gather's table's, or its folded Mul's two), and a folded bias's own when it is asked for;
    // into op.biases when any is wanted.
    void add_bias_grads(const AttentionGroup& grp, std::size_t i, const AttentionKernel<T>& kernel,
                        AttentionOperands<T>& op) {
        const auto& nodes = m_graph.nodes();
        const AttentionGroup::Link& link = grp.chain[i];
        const AttentionSpec& spec = *grp.spec;
        const ScoreStage& st = spec.stages[link.stage];
        const std::size_t n = op.n, m = op.m, batches = op.batches;
        using Operand = typename BiasGrad<T>::Operand;
        // an operand of `shape` broadcast to the stage's by `strides`: its matrices are its last
        // two axes (of size 1 where it is broadcast along them)
        auto broadcast = [&](Array<T>* grad, const Shape& shape, const std::vector<std::size_t>& strides) {
            Operand o;
            o.grad = grad ? grad->data() : nullptr;
            o.size = (shape.size() >= 2 ? shape.end()[-2] : 1) * (shape.empty() ? 1 : shape.back());
            o.matrices = o.size ? element_count(shape) / o.size : 0;
            for (std::size_t b = 0; b < batches; ++b)
                o.matrix_of.push_back(o.size ? ops::broadcast_offset(b * n * m, st.shape, strides) / o.size : 0);
            return o;
        };
        BiasGrad<T> bg;
        bg.link = i;
        const std::vector<std::size_t>& strides = spec.operand_strides[link.stage];
        if (link.bias_node < 0) {
            bg.operands.push_back(broadcast(input_grad(link.node, link.bias_slot), st.operand_shape, strides));
        } else if (st.index >= 0) {
            // the table (..., len): with indices of rank >= 2 a matrix of the scores reads one row
            // of it (the bias's last two axes are the indices'), else any row
            const Node& gather = nodes[static_cast<std::size_t>(link.bias_node)];
            const Shape& table = m_graph.value(gather.inputs[0]).shape;
            const bool by_row = m_graph.value(gather.inputs[1]).shape.size() >= 2;
            Operand o;
            Array<T>* grad = input_grad(static_cast<std::size_t>(link.bias_node), 0);
            o.grad = grad ? grad->data() : nullptr;
            o.size = by_row ? st.table_len : element_count(table);
            o.matrices = o.size ? element_count(table) / o.size : 0;
            for (std::size_t b = 0; b < batches; ++b)
                o.matrix_of.push_back(by_row ? ops::broadcast_offset(b * n * m, st.shape, strides) / st.index_count : 0);
            bg.operands.push_back(std::move(o));
        } else {
            const auto mul = static_cast<std::size_t>(link.bias_node);
            bg.operands.push_back(broadcast(input_grad(mul, 0), st.operand_shape, strides));
            bg.operands.push_back(broadcast(input_grad(mul, 1), st.multiplier_shape, spec.multiplier_strides[link.stage]));
        }
        // a folded bias asked for: dbias += dy over its own broadcast (ops/add.hpp)
        std::vector<std::size_t> self_strides;
        if (link.bias_node >= 0) {
            const int bias = nodes[link.node].inputs[link.bias_slot];
            if (m_plan.requested[static_cast<std::size_t>(bias)]) {
                allocate(static_cast<std::size_t>(bias));
                const Shape& shape = m_graph.value(bias).shape;
                self_strides = ops::broadcast_strides(shape, st.shape);
                bg.operands.resize(2);
                bg.operands.push_back(broadcast(&m_grad[static_cast<std::size_t>(bias)], shape, self_strides));
            }
        }
        if (std::none_of(bg.operands.begin(), bg.operands.end(), [](const Operand& o) { return o.grad; })) return;
        bg.add = [&kernel, &st, self_strides](std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo,
                                               std::size_t hi, const T* ds, T* const* to, const std::size_t* base) {
            kernel.add_backward(st, b, r0, rows, lo, hi, ds, to, base);
            if (to[2]) kernel.add_broadcast(st, self_strides, b, r0, rows, lo, hi, ds, to[2], base[2]);
        };
        op.biases.push_back(std::move(bg));
    }

    // A linear group's backward (in the forward pass this was: y_i = x·W_i + b_i for every
    // member i; dy_i is (M, out_i)): each member's own Linear backward for dW_i and db_i (the
    // bits of a backward without the group), and dx (M, in) += dy_i·W_iᵀ for every member
    // straight into dx, instead of into a part per member that is summed after.
    void execute_linear(const LinearGroup& grp) {
        const auto& nodes = m_graph.nodes();
        const auto t0 = std::chrono::steady_clock::now();
        const std::size_t first = grp.members[0];
        for (std::size_t i : grp.members) execute(i, /*skip_x=*/true);
        Array<T>* dx = input_grad(first, 0);
        const Array<T>& x = *m_forward[static_cast<std::size_t>(nodes[first].inputs[0])];
        auto weight = [&](std::size_t j) -> const Array<T>& {
            return *m_forward[static_cast<std::size_t>(nodes[grp.members[j]].inputs[1])];
        };
        const std::size_t k = weight(0).shape()[0], rows = k ? x.size() / k : 0;
        // dx += dy_j·W_jᵀ member by member, in member order: one sum over the members'
        // columns, without copying dy and W into wide buffers (16 MB at n = 1024)
        if (dx && rows && k)
            for (std::size_t j = 0; j < grp.members.size(); ++j) {
                const auto y = static_cast<std::size_t>(nodes[grp.members[j]].outputs[0]);
                const std::size_t w = weight(j).shape()[1];
                if (m_has[y] && w)
                    gemm<T>(false, true, rows, k, w, T(1), m_grad[y].data(), w, weight(j).data(), w, T(1), dx->data(), k);
            }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (std::size_t i : grp.members) {
            m_seconds[i] = seconds / static_cast<double>(grp.members.size());
            release_grad(nodes[i].outputs[0]);
        }
    }

    // every consumer of v has added its part: the parts go into v's gradient in consumer order
    void sum_parts(std::size_t v) {
        auto& extra = m_extra[v];
        T* g = m_grad[v].data();
        parallel_chunks(m_grad[v].size(), 1 << 14, [&](std::size_t b, std::size_t e) {
            for (const Array<T>& part : extra) {
                const T* p = part.data();
                for (std::size_t j = b; j < e; ++j) g[j] += p[j];
            }
        });
        for (Array<T>& part : extra) part = Array<T>();
    }

    const Graph& m_graph;
    const BackwardPlan& m_plan;
    std::vector<Array<T>> m_grad;                // value id -> dL/dv (empty until needed)
    std::vector<unsigned char> m_has;            // value id -> m_grad holds it (bytes: set concurrently)
    std::vector<unsigned char> m_ones_seed;      // value id -> a fused step's A seeded with ones, not made
    std::vector<std::vector<Array<T>>> m_extra;  // value id -> parts of consumers 1, 2, ...
    std::vector<const Array<T>*> m_forward;
    std::vector<double> m_seconds;
    std::function<void(std::size_t, std::size_t)> m_progress;
    std::size_t m_nodes_total = 0;
    std::atomic<std::size_t> m_nodes_done{0};
};

std::string names_of(const Graph& g, const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) s += (s.empty() ? "" : ", ") + g.value(id).name;
    return s;
}

void check_forward(const Graph& graph, const RunResult& forward) {
    if (!forward.complete)
        throw GraphError("backward of graph '" + graph.name() + "': the forward run stopped at node '" +
                         forward.stopped_at + "'");
    if (forward.values.size() != graph.values().size())
        throw GraphError("backward of graph '" + graph.name() + "': the forward run is of another graph");
}

}  // namespace

Gradients Executor::backward(const Graph& graph, const RunResult& forward,
                             const std::map<std::string, Tensor>& output_grads, const std::vector<std::string>& wrt,
                             const std::function<void(std::size_t, std::size_t)>& progress, bool fuse) {
    check_forward(graph, forward);
    std::vector<bool> requested(graph.values().size(), wrt.empty());
    for (const auto& name : wrt) {
        const int id = graph.find(name);
        if (id < 0)
            throw GraphError("gradient requested for '" + name + "': graph '" + graph.name() +
                             "' has no tensor or node of that name");
        requested[static_cast<std::size_t>(id)] = true;
    }

    std::map<int, Tensor> seeds;
    for (const auto& [name, g] : output_grads) {
        const int id = graph.find(name);
        bool is_output = false;
        for (int o : graph.outputs()) is_output = is_output || o == id;
        if (!is_output)
            throw GraphError("output gradient given for '" + name + "', which is not an output of graph '" +
                             graph.name() + "' (outputs: " + names_of(graph, graph.outputs()) + ")");
        const Shape& want = graph.value(id).shape;
        if (g.shape() != want)
            throw ShapeError("output gradient for '" + name + "' is " + shape_str(g.shape()) + " but the output is " +
                             shape_str(want));
        seeds[id] = g.cast(graph.dtype());
    }

    FusedSteps fused;
    if (fuse) {  // the fused steps of the plan for what the forward kept
        std::vector<bool> kept(graph.values().size());
        for (std::size_t v = 0; v < kept.size(); ++v) kept[v] = forward.values[v] || graph.values()[v].data;
        fused = fused_steps(graph, kept);
    }
    const BackwardPlan plan = make_backward_plan(graph, requested, std::move(fused));
    if (graph.dtype() == DType::f32)
        return BackwardRun<float>(graph, forward, plan, std::move(seeds), progress).run(*this);
    return BackwardRun<double>(graph, forward, plan, std::move(seeds), progress).run(*this);
}

Gradients backward(const Graph& graph, const RunResult& forward, const std::map<std::string, Tensor>& output_grads,
                   const BackwardOptions& options) {
    check_forward(graph, forward);
    return default_executor(options.threads)
        ->backward(graph, forward, output_grads, options.wrt, options.progress, options.fuse);
}

std::vector<bool> backward_keep(const Graph& graph, const std::vector<bool>& keep) {
    std::vector<bool> all(graph.values().size(), true);
    for (const AttentionGroup& grp : fused_steps(graph, keep).attention)
        for (std::size_t i : grp.members)
            for (int id : graph.nodes()[i].outputs)
                if (id != grp.o) all[static_cast<std::size_t>(id)] = keep[static_cast<std::size_t>(id)];
    return all;
}

// ---- gradient traces -------------------------------------------------------------------

nlohmann::json grad_trace_manifest(const Trace& trace, const Gradients& grads, const std::string& loss) {
    nlohmann::json j = trace_manifest(trace, TraceFormat::npy);
    for (auto& r : j["entries"]) {
        const std::string name = r["name"].get<std::string>();
        if (!grads.contains(name)) continue;
        r["grad"] = "grad/" + name + ".npy";
        auto it = grads.seconds().find(name);
        if (it != grads.seconds().end()) r["grad_seconds"] = it->second;
    }
    j["loss"] = loss;
    j["grads"] = grads.names();
    return j;
}

void write_grad_trace(const Trace& trace, const Gradients& grads, const std::string& loss, const fs::path& dir,
                      bool force) {
    write_directory_atomically(dir, force, [&](const fs::path& tmp) {
        for (const auto& e : trace.entries)
            if (e.data) save_npy(tmp / (e.name + ".npy"), *e.data);
        std::error_code ec;
        fs::create_directory(tmp / "grad", ec);
        if (ec) throw IoError((tmp / "grad").string() + ": cannot create (" + ec.message() + ")");
        for (const auto& name : grads.names()) save_npy(tmp / "grad" / (name + ".npy"), grads.at(name));
        std::ofstream out(tmp / "manifest.json", std::ios::binary);
        out << grad_trace_manifest(trace, grads, loss).dump(2) << "\n";
        out.close();
        if (!out) throw IoError((tmp / "manifest.json").string() + ": write failed");
    });
}

}  // namespace attngraph
