#pragma once
// The op set as the graph sees it. An op is a type: a struct in ops/<name>.hpp (ops/ops.hpp
// says what it holds and how to add one). Everything the engine needs of the ops is
// generated from the list ops::builtin_ops, composed with the caller's own op types
// (OpRegistry::add<Op...>(), see "User ops" below):
//
//   NodeAttrs    a node's attributes: a std::variant of every built-in op's Attrs, plus
//                ExtensionAttrs, a typed holder for the attributes of a user op.
//   OpDef        one per op type, made by make_op_def<Op>(): name, arity and the dispatch
//                (JSON attributes, shapes, formula, LaTeX, FLOPs, forward, backward) as
//                plain function pointers. An optional member the op leaves out gets the
//                default written next to it below; a missing required one is a
//                static_assert in check_op<Op>() (the compiler names the op).
//   OpRegistry   the name lookup: graph files, the CLI and gradcheck name ops by string.
//                Nothing else compares op names; code that needs a particular op asks
//                the node by type (node.attrs_if<ops::Softmax>()).
//
// An op may list input slots that get no gradient (indices, conditions, positions):
//   static constexpr std::array no_grad_inputs{1};
//
// infer_shape throws ShapeError with a message about the operands only: the graph adds the
// node name and op. forward writes into outputs the executor has already shaped.
// backward adds (+=) into din[i] and skips din[i] == nullptr (no gradient needed).
#include <array>
#include <concepts>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <boost/hana.hpp>
#include <nlohmann/json.hpp>

#include "engine/kernel.hpp"
#include "ops/ops.hpp"

namespace attngraph {

struct OpDef;

// ---- node attributes ------------------------------------------------------------------

/// @brief The attributes of a node of a user op (an op type not in ops::builtin_ops), in a
/// small polymorphic holder made for that op type, so they stay typed.
struct ExtensionAttrs {
    struct Base {
        virtual ~Base() = default;
        virtual const OpDef& op() const = 0;
    };
    template <class Op>
    struct Holder final : Base {
        explicit Holder(typename Op::Attrs a) : attrs(std::move(a)) {}
        const OpDef& op() const override;
        typename Op::Attrs attrs;
    };
    std::shared_ptr<const Base> holder;
};

namespace detail {
/// The built-in op types as a plain pack, unpacked from ops::builtin_ops once. The queries
/// below are folds over it: Hana's set and search algorithms over the 39 ops cost 2-3 s of
/// compile time in every file that includes this header.
template <class... Ops>
struct OpPack {
    template <class Op>
    static constexpr bool contains = (std::is_same_v<Op, Ops> || ...);
    /// The position of Op in the pack (the pack's size if it is not there).
    template <class Op>
    static constexpr std::size_t index_of = [] {
        std::size_t i = 0;
        (void)((std::is_same_v<Op, Ops> ? false : (++i, true)) && ...);  // stops at Op
        return i;
    }();
    /// How many ops have Attrs type A.
    template <class A>
    static constexpr std::size_t attrs_count = (std::size_t{std::is_same_v<A, typename Ops::Attrs>} + ...);
    static constexpr bool distinct_attrs = ((attrs_count<typename Ops::Attrs> == 1) && ...);
    using Attrs = std::variant<typename Ops::Attrs..., ExtensionAttrs>;
};
using BuiltinOps = decltype(boost::hana::unpack(ops::builtin_ops, []<class... Ops>(boost::hana::basic_type<Ops>...) {
    return OpPack<Ops...>{};
}));
}  // namespace detail

/// @brief A node's attributes: one alternative per built-in op (its Attrs), and user ops.
using NodeAttrs = detail::BuiltinOps::Attrs;

static_assert(detail::BuiltinOps::distinct_attrs,
              "two ops of ops::builtin_ops share an Attrs type: give each op its own struct");

class GraphBuilder;  // engine/builder.hpp
class Value;

/// Adds the nodes of the expansion of a composite op Op's node (defined in engine/builder.hpp).
template <class Op>
Value expand_node(GraphBuilder& builder, const NodeAttrs& attrs, const std::vector<Value>& inputs,
                  const std::string& name);

namespace detail {
struct ValueProbe {};
struct ExpansionProbe {
    using Value = ValueProbe;
};
}  // namespace detail

/// @brief A composite op: defined by its expansion into other ops (ops/ops.hpp), with
///   template <class E>
///   static typename E::Value expand(const Attrs&, E& e, const std::vector<typename E::Value>& in);
template <class Op>
concept composite_op = requires(const typename Op::Attrs& a, detail::ExpansionProbe& e,
                                const std::vector<detail::ValueProbe>& in) {
    Op::expand(a, e, in);
};

/// Whether Op is one of the built-in ops (its Attrs are an alternative of NodeAttrs).
template <class Op>
inline constexpr bool is_builtin_op = detail::BuiltinOps::contains<Op>;

/// @brief `attrs` as a node of op Op holds them.
template <class Op>
NodeAttrs wrap_attrs(typename Op::Attrs attrs) {
    if constexpr (is_builtin_op<Op>)
        return NodeAttrs(std::in_place_type<typename Op::Attrs>, std::move(attrs));
    else
        return ExtensionAttrs{std::make_shared<const ExtensionAttrs::Holder<Op>>(std::move(attrs))};
}

/// @brief Op's attributes when `attrs` are those of an Op node, else nullptr.
template <class Op>
const typename Op::Attrs* attrs_if(const NodeAttrs& attrs) {
    if constexpr (is_builtin_op<Op>) {
        return std::get_if<typename Op::Attrs>(&attrs);
    } else {
        const auto* ext = std::get_if<ExtensionAttrs>(&attrs);
        const auto* holder = ext ? dynamic_cast<const ExtensionAttrs::Holder<Op>*>(ext->holder.get()) : nullptr;
        return holder ? &holder->attrs : nullptr;
    }
}

// ---- the op interface -----------------------------------------------------------------

template <class T>
using ForwardFn = void (*)(const NodeAttrs& attrs, In<T> in, Out<T> out);
template <class T>
using BackwardFn = void (*)(const NodeAttrs& attrs, In<T> in, In<T> out, In<T> dout, Out<T> din);

/// @brief What the graph, the executor, the trace and the tools need of an op.
struct OpDef {
    std::string name;
    int min_inputs = 1;
    int max_inputs = 1;  // -1: any number

    /// infer_shapes(attrs, in), its errors prefixed with `where` ("node 'x' (MatMul)"): a
    /// ShapeError also lists operands() ("a (2x3), b (4x5)"; called only then); attributes of
    /// another op's type are a GraphError.
    std::vector<Shape> infer_shapes_at(const NodeAttrs& attrs, const std::vector<Shape>& in, const std::string& where,
                                       const std::function<std::string()>& operands) const;

    bool (*holds)(const NodeAttrs&) = nullptr;  ///< whether attrs are of this op's type
    NodeAttrs (*parse_attrs)(const nlohmann::json& j, const std::string& where) = nullptr;
    nlohmann::json (*attrs_to_json)(const NodeAttrs&) = nullptr;
    std::vector<Shape> (*infer_shapes)(const NodeAttrs&, const std::vector<Shape>&) = nullptr;
    /// "Q (3x2) · KT (2x3)" from operand texts
    std::string (*formula)(const NodeAttrs&, const std::vector<std::string>& operands) = nullptr;
    /// The LaTeX line `explain` shows: operands and y as LaTeX (with their shapes), y's shape.
    std::string (*latex)(const NodeAttrs&, const std::vector<std::string>& operands, const std::string& y,
                         const Shape& y_shape) = nullptr;
    bool own_latex = false;  ///< whether latex is the op's own (not the default "\mathrm{Name}(...)")
    /// Floating-point operations of one forward run (bench's GFLOP/s); 0 where not counted.
    double (*flops)(const NodeAttrs&, const std::vector<Shape>& in, const std::vector<Shape>& out) = nullptr;
    /// A composite op's expansion: adds the nodes "<name>.<part>", returns the output value.
    Value (*expand)(GraphBuilder&, const NodeAttrs&, const std::vector<Value>& inputs,
                    const std::string& name) = nullptr;
    ForwardFn<float> forward_f32 = nullptr;
    ForwardFn<double> forward_f64 = nullptr;
    BackwardFn<float> backward_f32 = nullptr;  // null: the op has no backward
    BackwardFn<double> backward_f64 = nullptr;

    template <class T>
    ForwardFn<T> forward() const {
        if constexpr (std::is_same_v<T, float>)
            return forward_f32;
        else
            return forward_f64;
    }
    template <class T>
    BackwardFn<T> backward() const {
        if constexpr (std::is_same_v<T, float>)
            return backward_f32;
        else
            return backward_f64;
    }
    std::string arity_text() const;

    /// Input slots without a gradient (Op::no_grad_inputs): backward never writes their din,
    /// autodiff passes nullptr there, and gradcheck does not perturb tensors used only there.
    std::vector<std::size_t> no_grad_inputs;
    bool has_grad(std::size_t slot) const {
        for (std::size_t s : no_grad_inputs)
            if (s == slot) return false;
        return true;
    }
};

/// @brief Compile-time check of an op type: a missing or ill-typed required member is a
/// static_assert; the compiler's "required from check_op<Op>" names the op.
template <class Op>
constexpr bool check_op() {
    static_assert(
        requires {
            { Op::name } -> std::convertible_to<const char*>;
        },
        "op type lacks `static constexpr const char* name`");
    static_assert(
        requires {
            { Op::min_inputs } -> std::convertible_to<int>;
            { Op::max_inputs } -> std::convertible_to<int>;
        },
        "op type lacks `static constexpr int min_inputs, max_inputs`");
    static_assert(
        requires { typename Op::Attrs; }, "op type lacks `using Attrs = ...`");
    if constexpr (requires { typename Op::Attrs; }) {
        using A = typename Op::Attrs;
        static_assert(boost::hana::Struct<A>::value,
                      "the op's Attrs is not a Hana struct: BOOST_HANA_ADAPT_STRUCT(ns::FooAttrs, members...)");
        static_assert(std::is_default_constructible_v<A>, "the op's Attrs must be default-constructible");
        static_assert(
            composite_op<Op> ||
                requires(const A& a, const std::vector<Shape>& in) {
                    { Op::infer_shape(a, in) } -> std::convertible_to<std::vector<Shape>>;
                } ||
                requires(const A& a, const std::vector<Shape>& in) {
                    { Op::infer_shape(a, in) } -> std::convertible_to<Shape>;
                },
            "op type lacks `static Shape infer_shape(const Attrs&, const std::vector<Shape>&)` (or "
            "std::vector<Shape>)");
        static_assert(
            composite_op<Op> ||
                requires(const A& a, In<float> fi, Out<float> fo, In<double> di, Out<double> dd) {
                    Op::template forward<float>(a, fi, fo);
                    Op::template forward<double>(a, di, dd);
                },
            "op type lacks `template <class T> static void forward(const Attrs&, In<T>, Out<T>)`");
    }
    return true;
}

namespace detail {

template <class Op>
const typename Op::Attrs& attrs_of(const NodeAttrs& a) {
    if constexpr (is_builtin_op<Op>)
        return *std::get_if<typename Op::Attrs>(&a);  // checked by holds() when the node was made
    else
        return static_cast<const ExtensionAttrs::Holder<Op>&>(*std::get<ExtensionAttrs>(a).holder).attrs;
}

inline std::string join_operands(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

}  // namespace detail

/// @brief The OpDef of op type Op. Optional members and their defaults:
///   formula(attrs, operands)       "Name(a, b)"
///   latex(attrs, operands, y, ys)  "y = \mathrm{Name}\left(a,\ b;\ \text{attrs}\right)"
///   flops(attrs, in, out)          0
///   backward<T>(...)               none: a graph needing its gradient is refused
template <class Op>
OpDef make_op_def() {
    static_assert(check_op<Op>());
    using A = typename Op::Attrs;
    OpDef d;
    d.name = Op::name;
    d.min_inputs = Op::min_inputs;
    d.max_inputs = Op::max_inputs;
    if constexpr (requires { Op::no_grad_inputs; })
        for (auto slot : Op::no_grad_inputs) d.no_grad_inputs.push_back(static_cast<std::size_t>(slot));
    d.holds = [](const NodeAttrs& a) { return attrs_if<Op>(a) != nullptr; };
    d.parse_attrs = [](const nlohmann::json& j, const std::string& where) {
        return wrap_attrs<Op>(attrs_from_json<A>(j, where));
    };
    d.attrs_to_json = [](const NodeAttrs& a) { return attrs_to_json(detail::attrs_of<Op>(a)); };
    d.formula = [](const NodeAttrs& a, const std::vector<std::string>& operands) -> std::string {
        if constexpr (requires { Op::formula(detail::attrs_of<Op>(a), operands); })
            return Op::formula(detail::attrs_of<Op>(a), operands);
        else
            return std::string(Op::name) + "(" + detail::join_operands(operands, ", ") + ")";
    };
    d.own_latex =
        requires(const A& a, const std::vector<std::string>& operands, const std::string& y, const Shape& ys) {
        Op::latex(a, operands, y, ys);
    };
    d.latex = [](const NodeAttrs& a, const std::vector<std::string>& operands, const std::string& y,
                 const Shape& ys) -> std::string {
        if constexpr (requires { Op::latex(detail::attrs_of<Op>(a), operands, y, ys); }) {
            return Op::latex(detail::attrs_of<Op>(a), operands, y, ys);
        } else {
            const nlohmann::json attrs = attrs_to_json(detail::attrs_of<Op>(a));
            const std::string attr_text = attrs.empty() ? "" : ";\\ \\text{" + attrs.dump() + "}";
            return y + "= \\mathrm{" + std::string(Op::name) + "}\\left(" + detail::join_operands(operands, ",\\ ") +
                   attr_text + "\\right)";
        }
    };
    d.flops = [](const NodeAttrs& a, const std::vector<Shape>& in, const std::vector<Shape>& out) -> double {
        if constexpr (requires { Op::flops(detail::attrs_of<Op>(a), in, out); })
            return Op::flops(detail::attrs_of<Op>(a), in, out);
        else
            return 0.0;
    };
    if constexpr (composite_op<Op>) {
        d.expand = &expand_node<Op>;  // its nodes are the expansion's: no shapes, kernels of its own
    } else {
        d.infer_shapes = [](const NodeAttrs& a, const std::vector<Shape>& in) -> std::vector<Shape> {
            auto r = Op::infer_shape(detail::attrs_of<Op>(a), in);
            if constexpr (std::is_same_v<decltype(r), Shape>)
                return {std::move(r)};
            else
                return r;
        };
        d.forward_f32 = [](const NodeAttrs& a, In<float> in, Out<float> out) {
            Op::template forward<float>(detail::attrs_of<Op>(a), in, out);
        };
        d.forward_f64 = [](const NodeAttrs& a, In<double> in, Out<double> out) {
            Op::template forward<double>(detail::attrs_of<Op>(a), in, out);
        };
        if constexpr (requires { &Op::template backward<float>; }) {
            d.backward_f32 = [](const NodeAttrs& a, In<float> in, In<float> out, In<float> dout, Out<float> din) {
                Op::template backward<float>(detail::attrs_of<Op>(a), in, out, dout, din);
            };
            d.backward_f64 = [](const NodeAttrs& a, In<double> in, In<double> out, In<double> dout, Out<double> din) {
                Op::template backward<double>(detail::attrs_of<Op>(a), in, out, dout, din);
            };
        }
    }
    return d;
}

/// The OpDef of built-in op `index` of ops::builtin_ops (made once, in engine/op.cpp: the
/// built-in kernels are instantiated there only).
const OpDef& builtin_op_def(std::size_t index);

/// @brief The one OpDef of op type Op.
template <class Op>
const OpDef& op_def() {
    if constexpr (is_builtin_op<Op>) {
        return builtin_op_def(detail::BuiltinOps::index_of<Op>);
    } else {
        static const OpDef def = make_op_def<Op>();
        return def;
    }
}

template <class Op>
const OpDef& ExtensionAttrs::Holder<Op>::op() const {
    return op_def<Op>();
}

// ---- the name lookup --------------------------------------------------------------------

/// @brief Every op by name: the built-in list (registered on first use), then the user ops
/// added with add<Op...>().
class OpRegistry {
public:
    static OpRegistry& instance();
    /// Adds op types (user ops); a name already taken throws GraphError.
    template <class... Ops>
    void add() {
        (add(op_def<Ops>()), ...);
    }
    /// Adds every op type of a Hana list (hana::tuple_t<Square, Gelu>).
    template <class List>
    void add_list(List list) {
        boost::hana::for_each(list, [&](auto op) { add(op_def<typename decltype(op)::type>()); });
    }
    /// Adds an OpDef that lives as long as the program (op_def<Op>()).
    void add(const OpDef& def);
    /// Throws GraphError "unknown op 'X' (known: ...)".
    const OpDef& get(const std::string& name) const;
    const OpDef* find(const std::string& name) const;
    std::vector<std::string> names() const;

private:
    std::vector<const OpDef*> m_ops;
};

}  // namespace attngraph
