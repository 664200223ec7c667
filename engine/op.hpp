#pragma once
// The op interface. An op is a struct in ops/<name>.cpp with
//
//   static constexpr const char* name;              // "MatMul"
//   static constexpr int min_inputs, max_inputs;    // max_inputs = -1: any number
//   struct Attrs { ... };  BOOST_HANA_ADAPT_STRUCT  // typed attributes (engine/attrs.hpp)
//   static Shape infer_shape(const Attrs&, const std::vector<Shape>& in);  // or std::vector<Shape>
//   static std::string formula(const Attrs&, const std::vector<std::string>& operands);
//   template <class T> static void forward(const Attrs&, In<T> in, Out<T> out);
//   template <class T> static void backward(const Attrs&, In<T> in, In<T> out, In<T> dout, Out<T> din);
//
// make_op_def<Op>() erases it into an OpDef; ops/registry.cpp lists every op once.
// infer_shape throws ShapeError with a message about the operands only: the graph adds the
// node name and op. forward writes into outputs the executor has already shaped.
// backward adds (+=) into din[i] and skips din[i] == nullptr (no gradient needed).
#include <any>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/attrs.hpp"
#include "engine/tensor.hpp"

namespace attngraph {

template <class T>
using In = std::span<const Array<T>* const>;
template <class T>
using Out = std::span<Array<T>* const>;

template <class T>
using ForwardFn = std::function<void(const std::any& attrs, In<T> in, Out<T> out)>;
template <class T>
using BackwardFn =
    std::function<void(const std::any& attrs, In<T> in, In<T> out, In<T> dout, Out<T> din)>;

/// @brief A type-erased op: what the graph, the executor and the trace need of it.
struct OpDef {
    std::string name;
    int min_inputs = 1;
    int max_inputs = 1;  // -1: any number

    /// infer_shapes(attrs, in), its errors prefixed with `where` ("node 'x' (MatMul)"): a
    /// ShapeError also lists operands() ("a (2x3), b (4x5)"; called only then); attributes of
    /// another op's type are a GraphError.
    std::vector<Shape> infer_shapes_at(const std::any& attrs, const std::vector<Shape>& in, const std::string& where,
                                       const std::function<std::string()>& operands) const;
    std::function<std::any(const nlohmann::json& j, const std::string& where)> parse_attrs;
    std::function<nlohmann::json(const std::any&)> attrs_to_json;
    std::function<std::vector<Shape>(const std::any&, const std::vector<Shape>&)> infer_shapes;
    std::function<std::string(const std::any&, const std::vector<std::string>&)> formula;
    ForwardFn<float> forward_f32;
    ForwardFn<double> forward_f64;
    BackwardFn<float> backward_f32;   // empty: the op has no backward
    BackwardFn<double> backward_f64;

    template <class T>
    const ForwardFn<T>& forward() const {
        if constexpr (std::is_same_v<T, float>) return forward_f32;
        else return forward_f64;
    }
    template <class T>
    const BackwardFn<T>& backward() const {
        if constexpr (std::is_same_v<T, float>) return backward_f32;
        else return backward_f64;
    }
    std::string arity_text() const;
};

template <class Op>
OpDef make_op_def() {
    using A = typename Op::Attrs;
    OpDef d;
    d.name = Op::name;
    d.min_inputs = Op::min_inputs;
    d.max_inputs = Op::max_inputs;
    d.parse_attrs = [](const nlohmann::json& j, const std::string& where) -> std::any {
        return attrs_from_json<A>(j, where);
    };
    d.attrs_to_json = [](const std::any& a) { return attrs_to_json(std::any_cast<const A&>(a)); };
    d.infer_shapes = [](const std::any& a, const std::vector<Shape>& in) -> std::vector<Shape> {
        auto r = Op::infer_shape(std::any_cast<const A&>(a), in);
        if constexpr (std::is_same_v<decltype(r), Shape>) return {std::move(r)};
        else return r;
    };
    d.formula = [](const std::any& a, const std::vector<std::string>& operands) {
        return Op::formula(std::any_cast<const A&>(a), operands);
    };
    d.forward_f32 = [](const std::any& a, In<float> in, Out<float> out) {
        Op::template forward<float>(std::any_cast<const A&>(a), in, out);
    };
    d.forward_f64 = [](const std::any& a, In<double> in, Out<double> out) {
        Op::template forward<double>(std::any_cast<const A&>(a), in, out);
    };
    if constexpr (requires { &Op::template backward<float>; }) {
        d.backward_f32 = [](const std::any& a, In<float> in, In<float> out, In<float> dout,
                            Out<float> din) {
            Op::template backward<float>(std::any_cast<const A&>(a), in, out, dout, din);
        };
        d.backward_f64 = [](const std::any& a, In<double> in, In<double> out, In<double> dout,
                            Out<double> din) {
            Op::template backward<double>(std::any_cast<const A&>(a), in, out, dout, din);
        };
    }
    return d;
}

/// @brief Every op by name. Built-in ops are registered on first use (ops/registry.cpp).
class OpRegistry {
public:
    static OpRegistry& instance();
    void add(OpDef def);
    /// Throws GraphError "unknown op 'X' (known: ...)".
    const OpDef& get(const std::string& name) const;
    const OpDef* find(const std::string& name) const;
    std::vector<std::string> names() const;

private:
    std::deque<OpDef> m_ops;  // deque: OpDef pointers stay valid
};

/// Registers the built-in ops (ops/registry.cpp).
void register_builtin_ops(OpRegistry& registry);

}  // namespace attngraph
