#include "engine/op.hpp"

#include <array>

#include "engine/error.hpp"

namespace attngraph {

std::string OpDef::arity_text() const {
    if (max_inputs < 0) return "at least " + std::to_string(min_inputs);
    if (min_inputs == max_inputs) return std::to_string(min_inputs);
    return std::to_string(min_inputs) + " to " + std::to_string(max_inputs);
}

std::vector<Shape> OpDef::infer_shapes_at(const NodeAttrs& attrs, const std::vector<Shape>& in,
                                          const std::string& where,
                                          const std::function<std::string()>& operands) const {
    if (!holds(attrs)) throw GraphError(where + ": attributes of the wrong type");
    if (!infer_shapes)
        throw GraphError(where + ": a composite op: its shapes come from its expansion (add it to a graph)");
    try {
        return infer_shapes(attrs, in);
    } catch (const ShapeError& e) {
        throw ShapeError(where + ": " + e.what() + "; inputs: " + operands());
    } catch (const GraphError& e) {
        throw GraphError(where + ": " + e.what());
    }
}

// ---- the built-in ops: every kernel of ops::builtin_ops is instantiated here ---------------

namespace {
constexpr std::size_t builtin_count = decltype(boost::hana::length(ops::builtin_ops))::value;

std::array<OpDef, builtin_count> make_builtin_defs() {
    std::array<OpDef, builtin_count> defs;
    std::size_t i = 0;
    boost::hana::for_each(ops::builtin_ops, [&](auto op) { defs[i++] = make_op_def<typename decltype(op)::type>(); });
    return defs;
}
}  // namespace

const OpDef& builtin_op_def(std::size_t index) {
    static const std::array<OpDef, builtin_count> defs = make_builtin_defs();
    return defs[index];
}

// ---- the name lookup ---------------------------------------------------------------------

OpRegistry& OpRegistry::instance() {
    static OpRegistry registry = [] {
        OpRegistry r;
        for (std::size_t i = 0; i < builtin_count; ++i) r.add(builtin_op_def(i));
        return r;
    }();
    return registry;
}

void OpRegistry::add(const OpDef& def) {
    if (find(def.name)) throw GraphError("op '" + def.name + "' is registered twice");
    m_ops.push_back(&def);
}

const OpDef* OpRegistry::find(const std::string& name) const {
    for (const OpDef* op : m_ops)
        if (op->name == name) return op;
    return nullptr;
}

const OpDef& OpRegistry::get(const std::string& name) const {
    if (const OpDef* op = find(name)) return *op;
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw GraphError("unknown op '" + name + "' (known: " + known + ")");
}

std::vector<std::string> OpRegistry::names() const {
    std::vector<std::string> out;
    for (const OpDef* op : m_ops) out.push_back(op->name);
    return out;
}

}  // namespace attngraph
