#include "engine/gradcheck.hpp"

#include <cmath>
#include <cstdio>
#include <random>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"

namespace attngraph {

namespace {

Tensor uniform(const Shape& shape, std::mt19937_64& rng) {
    Array<double> a(Array<double>::shape_type(shape.begin(), shape.end()), 0.0);
    for (auto& v : a) v = 2.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53 - 1.0;
    return Tensor(std::move(a));
}

// L = sum over outputs of sum(G ⊙ output), summed in a fixed order, over the finite
// elements of the outputs (a masked -inf does not depend on the inputs)
double loss(const Graph& g, Executor& executor, const std::map<int, const Array<double>*>& grads) {
    const RunResult r = executor.run(g);
    double l = 0;
    for (const auto& [id, grad] : grads) {
        const Array<double>& y = r.values[static_cast<std::size_t>(id)]->as<double>();
        for (std::size_t i = 0; i < y.size(); ++i)
            if (std::isfinite(y.data()[i])) l += grad->data()[i] * y.data()[i];
    }
    return l;
}

}  // namespace

const GradcheckEntry& GradcheckResult::at(const std::string& name) const {
    for (const auto& e : entries)
        if (e.name == name) return e;
    throw GraphError("gradcheck did not check '" + name + "'");
}

std::string GradcheckResult::report() const {
    std::string out;
    char line[512];
    for (const auto& e : entries) {
        std::snprintf(line, sizeof line, "%-20s %-10s rel %.3e  abs %.3e  worst [%zu] analytic %.9g numeric %.9g\n",
                      e.name.c_str(), shape_str(e.analytic.shape()).c_str(), e.rel_error, e.max_abs_error,
                      e.worst_index, e.analytic.size() ? e.analytic.at_flat(e.worst_index) : 0.0,
                      e.numeric.size() ? e.numeric.at_flat(e.worst_index) : 0.0);
        out += line;
    }
    return out;
}

GradcheckResult gradcheck(const Graph& graph_in, const GradcheckOptions& options) {
    const Graph graph = graph_in.with_dtype(DType::f64);
    std::vector<std::string> wrt = options.wrt;
    if (wrt.empty()) {
        // every input and param tensor, except those that feed only input slots without a
        // gradient (indices, conditions, positions: Op::no_grad_inputs)
        std::vector<bool> has_grad(graph.values().size(), false), consumed(graph.values().size(), false);
        for (const Node& n : graph.nodes())
            for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                const auto v = static_cast<std::size_t>(n.inputs[k]);
                consumed[v] = true;
                has_grad[v] = has_grad[v] || n.op->has_grad(k);
            }
        for (std::size_t v = 0; v < graph.values().size(); ++v)
            if (graph.values()[v].data && (has_grad[v] || !consumed[v])) wrt.push_back(graph.values()[v].name);
    }
    for (const auto& name : wrt)
        if (graph.value(graph.at(name)).kind == ValueKind::node)
            throw GraphError("gradcheck: '" + name + "' is a node; only input and param tensors can be perturbed");

    std::mt19937_64 rng(options.seed);
    std::map<std::string, Tensor> output_grads;
    for (int id : graph.outputs()) {
        const ValueInfo& v = graph.value(id);
        auto it = options.output_grads.find(v.name);
        output_grads[v.name] = it != options.output_grads.end() ? it->second.cast(DType::f64) : uniform(v.shape, rng);
    }
    std::map<int, const Array<double>*> grad_by_id;
    for (const auto& [name, g] : output_grads) grad_by_id[graph.at(name)] = &g.as<double>();

    RunOptions keep;
    keep.keep_for_backward = true;  // as `grad` runs it: attention weights recomputed
    Executor analytic(options.threads);
    const Gradients grads = analytic.backward(graph, analytic.run(graph, keep), output_grads, wrt);

    Executor executor(1);
    GradcheckResult result;
    for (const auto& name : wrt) {
        const ValueInfo& v = graph.value(graph.at(name));
        Tensor t = *v.data;
        Array<double>& a = t.as<double>();
        Array<double> numeric(Array<double>::shape_type(v.shape.begin(), v.shape.end()), 0.0);
        for (std::size_t i = 0; i < a.size(); ++i) {
            const double x = a.data()[i];
            a.data()[i] = x + options.eps;
            const double plus = loss(graph.with_tensors({{name, t}}), executor, grad_by_id);
            a.data()[i] = x - options.eps;
            const double minus = loss(graph.with_tensors({{name, t}}), executor, grad_by_id);
            a.data()[i] = x;
            numeric.data()[i] = (plus - minus) / (2 * options.eps);
        }
        GradcheckEntry e;
        e.name = name;
        e.analytic = grads.at(name);
        e.numeric = Tensor(std::move(numeric));
        double scale = 1;
        for (std::size_t i = 0; i < e.numeric.size(); ++i) {
            const double an = e.analytic.at_flat(i), nu = e.numeric.at_flat(i);
            scale = std::max({scale, std::abs(an), std::abs(nu)});
            const double err = std::abs(an - nu);
            if (!(err <= e.max_abs_error)) {  // also catches NaN
                e.max_abs_error = std::isnan(err) ? INFINITY : err;
                e.worst_index = i;
            }
        }
        e.rel_error = e.max_abs_error / scale;
        if (result.entries.empty() || e.rel_error > result.max_rel_error) {
            result.max_rel_error = e.rel_error;
            result.worst = name;
        }
        result.entries.push_back(std::move(e));
    }
    return result;
}

GradcheckResult gradcheck_op(const std::string& op, const nlohmann::json& attrs_json, const std::vector<Tensor>& inputs,
                             const GradcheckOptions& options) {
    const NodeAttrs attrs = OpRegistry::instance().get(op).parse_attrs(attrs_json, "gradcheck of op " + op);
    GraphBuilder g("gradcheck_" + op, DType::f64);
    std::vector<Value> in;
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(g.input("in" + std::to_string(i), inputs[i].cast(DType::f64)));
        shapes.push_back(inputs[i].shape());
    }
    Value y = g.node(op, in, attrs, "y");
    const OpDef& def = OpRegistry::instance().get(op);
    const std::size_t outputs = def.expand ? 1 : def.infer_shapes(attrs, shapes).size();
    if (outputs == 1)
        g.output(y);
    else
        for (std::size_t k = 0; k < outputs; ++k) g.output(y[static_cast<int>(k)]);
    return gradcheck(g.build(), options);
}

}  // namespace attngraph
