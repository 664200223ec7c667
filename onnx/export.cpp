#include "onnx/export.hpp"

#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include <onnx/onnx_pb.h>

#include "engine/error.hpp"
#include "engine/graph.hpp"
#include "engine/trace.hpp"
#include "ops/ops.hpp"

namespace attngraph {

namespace fs = std::filesystem;
using TP = onnx::TensorProto;

namespace {

class Exporter {
public:
    Exporter(const Graph& graph, std::string source) : m_graph(graph), m_source(std::move(source)) {
        if (m_source.empty()) m_source = graph.name();
        m_float = graph.dtype() == DType::f32 ? TP::FLOAT : TP::DOUBLE;
    }

    onnx::ModelProto run() {
        onnx::ModelProto model;
        model.set_ir_version(11);
        model.set_producer_name("attngraph");
        model.add_opset_import()->set_version(23);
        m_g = model.mutable_graph();
        m_g->set_name(m_graph.name());
        for (const auto& v : m_graph.values()) {
            if (!v.data) continue;
            if (v.kind == ValueKind::input) {
                add_value_info(m_g->add_input(), v.name, v.shape);
            } else {
                auto* t = m_g->add_initializer();
                fill_tensor(*t, v.name, *v.data);
            }
        }
        for (const Node& n : m_graph.nodes()) export_node(n);
        for (int id : m_graph.outputs())
            add_value_info(m_g->add_output(), m_graph.value(id).name, m_graph.value(id).shape);
        return model;
    }

private:
    void add_value_info(onnx::ValueInfoProto* vi, const std::string& name, const Shape& shape) {
        vi->set_name(name);
        auto* tt = vi->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(m_float);
        auto* s = tt->mutable_shape();
        for (auto d : shape) s->add_dim()->set_dim_value(static_cast<std::int64_t>(d));
    }

    void fill_tensor(TP& t, const std::string& name, const Tensor& data) {
        t.set_name(name);
        t.set_data_type(m_float);
        for (auto d : data.shape()) t.add_dims(static_cast<std::int64_t>(d));
        data.visit([&](const auto& a) {
            using T = typename std::decay_t<decltype(a)>::value_type;
            t.set_raw_data(std::string(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T)));
        });
    }

    // A constant initializer of int64 values.
    std::string ints(const std::string& hint, const std::vector<std::int64_t>& values, bool scalar = false) {
        const std::string name = fresh(hint);
        auto* t = m_g->add_initializer();
        t->set_name(name);
        t->set_data_type(TP::INT64);
        if (!scalar) t->add_dims(static_cast<std::int64_t>(values.size()));
        for (auto v : values) t->add_int64_data(v);
        return name;
    }
    // A constant scalar of the graph's float type.
    std::string scalar(const std::string& hint, double v) {
        const std::string name = fresh(hint);
        auto* t = m_g->add_initializer();
        t->set_name(name);
        t->set_data_type(m_float);
        if (m_float == TP::FLOAT)
            t->add_float_data(static_cast<float>(v));
        else
            t->add_double_data(v);
        return name;
    }
    std::string bools(const std::string& hint, const Shape& shape, const std::vector<bool>& values) {
        const std::string name = fresh(hint);
        auto* t = m_g->add_initializer();
        t->set_name(name);
        t->set_data_type(TP::BOOL);
        for (auto d : shape) t->add_dims(static_cast<std::int64_t>(d));
        std::string raw(values.size(), '\0');
        for (std::size_t i = 0; i < values.size(); ++i) raw[i] = values[i] ? 1 : 0;
        t->set_raw_data(raw);
        return name;
    }

    std::string fresh(const std::string& hint) {
        std::string n = hint;
        for (int k = 1; m_graph.find(n) >= 0 || m_names.count(n); ++k) n = hint + "_" + std::to_string(k);
        m_names.insert(n);
        return n;
    }

    onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out) {
        auto* n = m_g->add_node();
        n->set_op_type(op);
        n->set_name(out.at(0));
        for (const auto& i : in) n->add_input(i);
        for (const auto& o : out) n->add_output(o);
        return n;
    }
    static void attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (auto x : v) a->add_ints(x);
    }

    static void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(v);
    }

    static void attr_float(onnx::NodeProto* n, const std::string& name, double v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(static_cast<float>(v));
    }

    const Shape& shape_of(const std::string& name) const { return m_graph.value(m_graph.at(name)).shape; }
    // "(1x4x8), (4x2)": the shapes of a node's inputs, for errors
    std::string shapes_text(const std::vector<std::string>& in) const {
        std::string t;
        for (std::size_t i = 0; i < in.size(); ++i) t += (i ? ", (" : "(") + shape_str(shape_of(in[i])) + ")";
        return t;
    }

    // The node as ONNX nodes, by its op type and typed attributes.
    void export_node(const Node& n) {
        const std::string& name = n.name;
        std::vector<std::string> in;
        for (int id : n.inputs) in.push_back(m_graph.value(id).name);
        const std::string where = m_source + ": node '" + name + "' (" + n.op->name + ")";
        if (n.is<ops::Linear>()) {
            if (in.size() == 2) {
                node("MatMul", {in[0], in[1]}, {name});
            } else {
                const std::string xw = fresh(name + ".xW");
                node("MatMul", {in[0], in[1]}, {xw});
                node("Add", {xw, in[2]}, {name});
            }
        } else if (n.is<ops::MatMul>()) {
            node("MatMul", in, {name});
        } else if (n.is<ops::Add>()) {
            node("Add", in, {name});
        } else if (n.is<ops::Transpose>() || n.is<ops::Permute>()) {
            const std::size_t r = shape_of(in[0]).size();
            std::optional<std::vector<int>> given;
            if (const auto* a = n.attrs_if<ops::Transpose>()) given = a->perm;
            if (const auto* a = n.attrs_if<ops::Permute>()) given = a->perm.value;
            std::vector<std::int64_t> perm;
            if (given) {
                for (const int v : *given) perm.push_back(v < 0 ? v + static_cast<std::int64_t>(r) : v);
            } else {
                for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(i));
                std::swap(perm[r - 1], perm[r - 2]);
            }
            attr(node("Transpose", in, {name}), "perm", perm);
        } else if (const auto* scale = n.attrs_if<ops::Scale>()) {
            node("Mul", {in[0], scalar(name + ".factor", scale->factor)}, {name});
        } else if (const auto* softmax = n.attrs_if<ops::Softmax>()) {
            // attngraph's softmax gives zeros for a row that is all -inf; ONNX's gives NaN:
            // y = Where(ReduceMax(x) == -inf, 0, Softmax(x)) over the same axis
            const std::int64_t axis = softmax->axis;
            const std::string sm = fresh(name + ".softmax"), mx = fresh(name + ".rowmax"),
                              masked = fresh(name + ".masked");
            attr(node("Softmax", {in[0]}, {sm}), "axis", axis);
            attr(node("ReduceMax", {in[0], ints(name + ".axis", {axis})}, {mx}), "keepdims", 1);
            node("Equal", {mx, scalar(name + ".neginf", -INFINITY)}, {masked});
            node("Where", {masked, scalar(name + ".zero", 0.0), sm}, {name});
        } else if (const auto* concat = n.attrs_if<ops::Concat>()) {
            attr(node("Concat", in, {name}), "axis", concat->axis);
        } else if (n.is<ops::Reshape>()) {
            // shapes are static: the output's own shape (kept leading/trailing axes resolved)
            const Shape& y = shape_of(name);
            node("Reshape", {in[0], ints(name + ".shape", std::vector<std::int64_t>(y.begin(), y.end()))}, {name});
        } else if (const auto* alibi = n.attrs_if<ops::Alibi>()) {
            // y = x - slopes[h]·|i + offset - j|: the distances a constant (n, m), slopes (h, 1, 1)
            const Shape& x = shape_of(in[0]);
            const std::size_t h = x[x.size() - 3], nq = x[x.size() - 2], m = x.back();
            const long offset = alibi->offset;
            const std::string dist = fresh(name + ".distance");
            auto* t = m_g->add_initializer();
            t->set_name(dist);
            t->set_data_type(m_float);
            t->add_dims(static_cast<std::int64_t>(nq));
            t->add_dims(static_cast<std::int64_t>(m));
            for (std::size_t i = 0; i < nq; ++i)
                for (std::size_t j = 0; j < m; ++j) {
                    const double d =
                        std::fabs(static_cast<double>(static_cast<long>(i) + offset - static_cast<long>(j)));
                    if (m_float == TP::FLOAT)
                        t->add_float_data(static_cast<float>(d));
                    else
                        t->add_double_data(d);
                }
            const std::string sl = fresh(name + ".slopes"), bias = fresh(name + ".bias");
            node("Reshape", {in[1], ints(name + ".slope_shape", {static_cast<std::int64_t>(h), 1, 1})}, {sl});
            node("Mul", {sl, dist}, {bias});
            node("Sub", {in[0], bias}, {name});
        } else if (const auto* slice = n.attrs_if<ops::Slice>()) {
            const std::int64_t start = slice->start, end = slice->end;
            node("Slice",
                 {in[0], ints(name + ".start", {start}), ints(name + ".end", {end == 0 ? INT64_MAX : end}),
                  ints(name + ".axes", {slice->axis})},
                 {name});
        } else if (const auto* split = n.attrs_if<ops::Split>()) {
            const Shape& x = shape_of(in[0]);
            const std::int64_t axis = split->axis;
            const auto len = static_cast<std::int64_t>(
                x[static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(x.size()) : axis)]);
            std::vector<std::int64_t> sizes;
            if (split->sizes)
                sizes.assign(split->sizes->begin(), split->sizes->end());
            else
                for (std::int64_t k = 0, p = split->parts.value_or(0); k < p; ++k) sizes.push_back(len / p);
            std::vector<std::string> outs;
            for (std::size_t k = 0; k < sizes.size(); ++k) outs.push_back(name + ":" + std::to_string(k));
            attr(node("Split", {in[0], ints(name + ".sizes", sizes)}, outs), "axis", axis);
        } else if (n.is<ops::Sub>() || n.is<ops::Mul>() || n.is<ops::Div>() || n.is<ops::Neg>() || n.is<ops::Exp>() ||
                   n.is<ops::Log>() || n.is<ops::Tanh>() || n.is<ops::Erf>() || n.is<ops::Sqrt>() || n.is<ops::Sin>() ||
                   n.is<ops::Cos>() || n.is<ops::Relu>() || n.is<ops::Sigmoid>() || n.is<ops::Abs>() ||
                   n.is<ops::Softplus>() || n.is<ops::Max>() || n.is<ops::Min>() || n.is<ops::Floor>() ||
                   n.is<ops::Ceil>() || n.is<ops::Round>() || n.is<ops::Sign>()) {
            node(n.op->name, in, {name});  // the ONNX op of the same name
        } else if (const auto* mod = n.attrs_if<ops::Mod>()) {
            // ONNX's Mod takes fmod = 0 for integer types only: b's sign is written out here,
            // r = fmod(a, b), then r + b where r is nonzero and of the other sign than b
            if (mod->fmod) {
                attr(node("Mod", in, {name}), "fmod", std::int64_t{1});
            } else {
                const std::string r = fresh(name + ".fmod"), zero = scalar(name + ".zero", 0.0);
                attr(node("Mod", in, {r}), "fmod", std::int64_t{1});
                auto flag = [&](const std::string& op, const std::vector<std::string>& args,
                                const std::string& suffix) {
                    const std::string out = fresh(name + suffix);
                    node(op, args, {out});
                    return out;
                };
                const std::string other_sign =
                    flag("Xor", {flag("Less", {r, zero}, ".r_negative"), flag("Less", {in[1], zero}, ".b_negative")},
                         ".other_sign");
                const std::string nonzero = flag("Not", {flag("Equal", {r, zero}, ".r_zero")}, ".r_nonzero");
                node("Where", {flag("And", {other_sign, nonzero}, ".moves"), flag("Add", {r, in[1]}, ".moved"), r},
                     {name});
            }
        } else if (const auto* cumsum = n.attrs_if<ops::CumSum>()) {
            auto* c = node("CumSum", {in[0], ints(name + ".axis", {cumsum->axis}, true)}, {name});
            if (cumsum->exclusive) attr(c, "exclusive", std::int64_t{1});
            if (cumsum->reverse) attr(c, "reverse", std::int64_t{1});
        } else if (const auto* conv = n.attrs_if<ops::Conv>()) {
            // every attribute written out (the defaults too), kernel_shape from W
            const Shape& ws = shape_of(in[1]);
            const std::size_t k = ws.size() - 2;
            const auto list = [](const std::optional<std::vector<int>>& v, std::size_t len, std::int64_t fallback) {
                return v ? std::vector<std::int64_t>(v->begin(), v->end()) : std::vector<std::int64_t>(len, fallback);
            };
            auto* c = node("Conv", in, {name});
            attr(c, "kernel_shape", std::vector<std::int64_t>(ws.begin() + 2, ws.end()));
            attr(c, "strides", list(conv->strides, k, 1));
            attr(c, "pads", list(conv->pads, 2 * k, 0));
            attr(c, "dilations", list(conv->dilations, k, 1));
            attr(c, "group", std::int64_t{conv->group});
        } else if (const auto* leaky = n.attrs_if<ops::LeakyRelu>()) {
            attr_float(node("LeakyRelu", in, {name}), "alpha", leaky->alpha);
        } else if (const auto* clip = n.attrs_if<ops::Clip>()) {
            // opset 11's form: the bounds are optional scalar inputs ("" for an absent min)
            std::vector<std::string> args = {in[0]};
            if (clip->min || clip->max) args.push_back(clip->min ? scalar(name + ".min", *clip->min) : "");
            if (clip->max) args.push_back(scalar(name + ".max", *clip->max));
            node("Clip", args, {name});
        } else if (const auto* pow = n.attrs_if<ops::Pow>()) {
            node("Pow", {in[0], scalar(name + ".exponent", pow->exponent)}, {name});
        } else if (n.is<ops::Where>()) {
            // the condition is a float tensor here (nonzero: true), bool in ONNX
            const std::string cond = fresh(name + ".cond");
            attr(node("Cast", {in[0]}, {cond}), "to", TP::BOOL);
            node("Where", {cond, in[1], in[2]}, {name});
        } else if (n.is<ops::Equal>() || n.is<ops::Less>() || n.is<ops::Greater>()) {
            // ONNX gives bool, attngraph 0/1 in the graph's float type
            const std::string b = fresh(name + ".bool");
            node(n.op->name, in, {b});
            attr(node("Cast", {b}, {name}), "to", m_float);
        } else if (const auto* sum = n.attrs_if<ops::ReduceSum>()) {
            export_reduce(n.op->name, name, in, *sum);
        } else if (const auto* mean = n.attrs_if<ops::ReduceMean>()) {
            export_reduce(n.op->name, name, in, *mean);
        } else if (const auto* max = n.attrs_if<ops::ReduceMax>()) {
            export_reduce(n.op->name, name, in, *max);
        } else if (const auto* expand = n.attrs_if<ops::Expand>()) {
            const std::vector<int>& shape = expand->shape;
            node("Expand", {in[0], ints(name + ".shape", std::vector<std::int64_t>(shape.begin(), shape.end()))},
                 {name});
        } else if (const auto* gather = n.attrs_if<ops::Gather>()) {
            // indices are whole numbers in the graph's float type, int64 in ONNX
            const std::string idx = fresh(name + ".indices");
            attr(node("Cast", {in[1]}, {idx}), "to", TP::INT64);
            attr(node("Gather", {in[0], idx}, {name}), "axis", gather->axis);
        } else if (const auto* ge = n.attrs_if<ops::GatherElements>()) {
            const std::string idx = fresh(name + ".indices");
            attr(node("Cast", {in[1]}, {idx}), "to", TP::INT64);
            attr(node("GatherElements", {in[0], idx}, {name}), "axis", ge->axis);
        } else if (n.is<ops::ScatterElements>() || n.is<ops::ScatterND>()) {
            // as Gather: the indices cast to int64
            const std::string idx = fresh(name + ".indices");
            attr(node("Cast", {in[1]}, {idx}), "to", TP::INT64);
            auto* s = node(n.op->name, {in[0], idx, in[2]}, {name});
            if (const auto* se = n.attrs_if<ops::ScatterElements>()) {
                attr(s, "axis", se->axis);
                if (se->reduction != "none") attr_string(s, "reduction", se->reduction);
            } else if (const auto* sn = n.attrs_if<ops::ScatterND>(); sn->reduction != "none") {
                attr_string(s, "reduction", sn->reduction);
            }
        } else if (const auto* topk = n.attrs_if<ops::TopK>()) {
            // K an int64 input there; the positions int64 in ONNX, cast back to the float type
            const std::string positions = fresh(name + ".positions");
            auto* t = node("TopK", {in[0], ints(name + ".k", {topk->k.value})}, {name + ":0", positions});
            attr(t, "axis", std::int64_t{topk->axis});
            attr(t, "largest", std::int64_t{topk->largest});
            attr(t, "sorted", std::int64_t{1});
            attr(node("Cast", {positions}, {name + ":1"}), "to", m_float);
        } else if (n.is<ops::ArgMax>() || n.is<ops::ArgMin>()) {
            // int64 positions in ONNX, the graph's float type here: cast back
            const auto write = [&](const auto& a) {
                const std::string positions = fresh(name + ".positions");
                auto* arg = node(n.op->name, {in[0]}, {positions});
                attr(arg, "axis", std::int64_t{a.axis});
                attr(arg, "keepdims", std::int64_t{a.keepdims});
                attr(arg, "select_last_index", std::int64_t{a.select_last_index});
                attr(node("Cast", {positions}, {name}), "to", m_float);
            };
            if (const auto* largest = n.attrs_if<ops::ArgMax>())
                write(*largest);
            else
                write(*n.attrs_if<ops::ArgMin>());
        } else if (const auto* range = n.attrs_if<ops::Range>()) {
            node("Range",
                 {scalar(name + ".start", range->start), scalar(name + ".limit", range->limit),
                  scalar(name + ".delta", range->delta)},
                 {name});
        } else if (const auto* rms = n.attrs_if<ops::RMSNormalization>()) {
            auto* r = node("RMSNormalization", in, {name});
            attr(r, "axis", rms->axis);
            attr_float(r, "epsilon", rms->epsilon);
        } else if (const auto* ln = n.attrs_if<ops::LayerNormalization>()) {
            // ONNX gives Mean and InvStdDev (type U) in float or bfloat16 only: in an f64 graph
            // they would be float values declared double, which ONNX Runtime refuses
            if (ln->stats != 0 && m_float == TP::DOUBLE)
                throw GraphError(where +
                                 ": ONNX's LayerNormalization gives Mean and InvStdDev (stats = 1) in "
                                 "float or bfloat16, not this graph's f64; shapes " +
                                 shapes_text(in) + " (export the graph as f32: --dtype f32)");
            std::vector<std::string> outs{name};
            if (ln->stats != 0) outs = {name + ":0", name + ":1", name + ":2"};
            auto* r = node("LayerNormalization", in, outs);
            attr(r, "axis", ln->axis);
            attr_float(r, "epsilon", ln->epsilon);
        } else if (const auto* rope = n.attrs_if<ops::RotaryEmbedding>()) {
            // opset 23's RotaryEmbedding takes float, float16 and bfloat16 only: a double model
            // holding it is invalid, and casting to float would change the numbers
            if (m_float == TP::DOUBLE)
                throw GraphError(where +
                                 ": ONNX's RotaryEmbedding (opset 23) takes float, float16 or bfloat16, "
                                 "not this graph's f64; shapes " +
                                 shapes_text(in) + " (export the graph as f32: --dtype f32)");
            std::vector<std::string> args = in;
            if (in.size() == 4) {  // position ids: int64 in ONNX
                args[3] = fresh(name + ".position_ids");
                attr(node("Cast", {in[3]}, {args[3]}), "to", TP::INT64);
                // ids (1, S) serve every sequence here; ONNX wants (batch, S): broadcast them
                const Shape& pos = shape_of(in[3]);
                const std::size_t batch = shape_of(in[0]).at(0);
                if (pos.size() == 2 && pos[0] == 1 && batch > 1) {
                    const std::string ids = fresh(name + ".position_ids_batch");
                    node("Expand",
                         {args[3], ints(name + ".ids_shape",
                                        {static_cast<std::int64_t>(batch), static_cast<std::int64_t>(pos[1])})},
                         {ids});
                    args[3] = ids;
                }
            }
            auto* r = node("RotaryEmbedding", args, {name});
            attr(r, "interleaved", rope->interleaved);
            if (rope->rotary_embedding_dim != 0) attr(r, "rotary_embedding_dim", rope->rotary_embedding_dim);
            if (rope->num_heads != 0) attr(r, "num_heads", rope->num_heads);
        } else if (const auto* mask = n.attrs_if<ops::Mask>()) {
            export_mask(name, in, *mask, where);
        } else {
            throw GraphError(where + ": op '" + n.op->name + "' has no ONNX export yet (docs/onnx.md)");
        }
    }

    // ReduceSum / ReduceMean / ReduceMax: the ONNX op of the same name, axes as an input
    template <class A>
    void export_reduce(const std::string& op, const std::string& name, const std::vector<std::string>& in, const A& a) {
        std::vector<std::string> args{in[0]};
        if (a.axes && !a.axes->empty())
            args.push_back(ints(name + ".axes", std::vector<std::int64_t>(a.axes->begin(), a.axes->end())));
        auto* r = node(op, args, {name});
        attr(r, "keepdims", a.keepdims);
        attr(r, "noop_with_empty_axes", a.noop_with_empty_axes);
    }

    // Mask: y = Where(keep, x, -inf), keep = the pattern (a constant: shapes are static) and
    // the keep tensor's nonzero entries
    void export_mask(const std::string& name, const std::vector<std::string>& in, const ops::MaskAttrs& a,
                     const std::string& where) {
        const Shape& x = shape_of(in[0]);
        std::string keep;
        if (a.pattern) {
            const std::string p = *a.pattern;
            const std::size_t r = x.size(), n = x[r - 2], m = x[r - 1];
            // the pattern depends on (i, j) and, for padding, the batch index: shape (B or 1, 1.., n, m)
            Shape s(r, 1);
            s[r - 2] = n;
            s[r - 1] = m;
            if (p == "padding") s[0] = x[0];
            std::vector<bool> v(element_count(s));
            const std::vector<int> lengths = a.lengths.value_or(std::vector<int>{});
            const long w = a.window.value_or(0);
            const bool causal = a.causal.value_or(false);
            // p = i + offset: the keys before the first query (offset_from_end: m - n)
            const long offset =
                a.offset_from_end.value_or(false) ? static_cast<long>(m) - static_cast<long>(n) : a.offset.value_or(0);
            for (std::size_t k = 0; k < v.size(); ++k) {
                const long j = static_cast<long>(k % m), i = static_cast<long>((k / m) % n) + offset;
                const std::size_t b = k / (n * m);
                bool kept = true;
                if (p == "causal")
                    kept = j <= i;
                else if (p == "window")
                    kept = causal ? (i - j >= 0 && i - j < w) : std::labs(i - j) < w;
                else if (p == "padding")
                    kept = j < lengths.at(b);
                else
                    throw GraphError(where + ": pattern '" + p + "' has no ONNX export");
                v[k] = kept;
            }
            keep = bools(name + ".pattern", s, v);
        }
        std::string base = in[0];
        if (in.size() == 2 && a.mask_type.value_or("boolean") == "additive") {
            // an additive mask: y = x + mask where the pattern keeps (-inf in the mask drops)
            base = fresh(name + ".biased");
            node("Add", {in[0], in[1]}, {base});
        } else if (in.size() == 2) {
            const std::string nz = fresh(name + ".keep");
            attr(node("Cast", {in[1]}, {nz}), "to", TP::BOOL);
            if (keep.empty()) {
                keep = nz;
            } else {
                const std::string both = fresh(name + ".kept");
                node("And", {keep, nz}, {both});
                keep = both;
            }
        }
        if (keep.empty())
            node("Identity", {base}, {name});
        else
            node("Where", {keep, base, scalar(name + ".neginf", -INFINITY)}, {name});
    }

    const Graph& m_graph;
    std::string m_source;  // the graph file, for errors
    int m_float = TP::FLOAT;
    onnx::GraphProto* m_g = nullptr;
    std::set<std::string> m_names;
};

}  // namespace

void export_onnx(const Graph& graph, const fs::path& path, const std::string& source) {
    const onnx::ModelProto model = Exporter(graph, source).run();
    std::string bytes;
    if (!model.SerializeToString(&bytes)) throw IoError(path.string() + ": the model does not serialize (over 2 GB?)");
    write_file_atomically(path, bytes);
}

}  // namespace attngraph
