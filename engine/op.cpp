#include "engine/op.hpp"

#include <mutex>

#include "engine/error.hpp"

namespace attngraph {

std::string OpDef::arity_text() const {
    if (max_inputs < 0) return "at least " + std::to_string(min_inputs);
    if (min_inputs == max_inputs) return std::to_string(min_inputs);
    return std::to_string(min_inputs) + " to " + std::to_string(max_inputs);
}

std::vector<Shape> OpDef::infer_shapes_at(const std::any& attrs, const std::vector<Shape>& in,
                                          const std::string& where,
                                          const std::function<std::string()>& operands) const {
    try {
        return infer_shapes(attrs, in);
    } catch (const std::bad_any_cast&) {
        throw GraphError(where + ": attributes of the wrong type");
    } catch (const ShapeError& e) {
        throw ShapeError(where + ": " + e.what() + "; inputs: " + operands());
    } catch (const GraphError& e) {
        throw GraphError(where + ": " + e.what());
    }
}

OpRegistry& OpRegistry::instance() {
    static OpRegistry registry = [] {
        OpRegistry r;
        register_builtin_ops(r);
        return r;
    }();
    return registry;
}

void OpRegistry::add(OpDef def) {
    if (find(def.name)) throw GraphError("op '" + def.name + "' is registered twice");
    m_ops.push_back(std::move(def));
}

const OpDef* OpRegistry::find(const std::string& name) const {
    for (const auto& op : m_ops)
        if (op.name == name) return &op;
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
    for (const auto& op : m_ops) out.push_back(op.name);
    return out;
}

}  // namespace attngraph
