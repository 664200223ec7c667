#pragma once
// Expression templates: an attention variant written as a C++ expression whose *type*
// records its structure (xtensor's xfunction, Eigen's CwiseBinaryOp):
//
//   namespace ex = attngraph::expr;
//   auto X = ex::input("X", x);
//   auto q = ex::linear(X, ex::param("Wq", wq), ex::param("bq", bq)).named("Q");
//   auto A = ex::softmax(ex::scale(ex::matmul(q, ex::transpose(k)), c)).named("A");
//   auto O = ex::matmul(A, v).named("O");
//   Tensor y = ex::evaluate(O);               // direct, no Graph
//   Graph  g = ex::to_graph(O, "attention");  // the runtime IR: traces, CLI, tools unchanged
//   auto   d = ex::gradients(O, {X, q});      // dL/dX, dL/dQ for L = sum(O)
//
// The kinds of expression:
//   Leaf                 an input or param tensor (a named Tensor is referred to, a temporary
//                        is owned: keep a named tensor alive while its expression is used)
//   Node<Op, Operands>   op `Op` (an op struct of ops/, e.g. ops::MatMul) applied to Operands,
//                        a std::tuple of expressions (or a std::vector for Concat)
//   Output<E>            output k of a node with several outputs (Split)
//   Dynamic              any expression, its type erased: for structure chosen at run time
//
// Building an expression computes nothing and allocates no tensor: a node holds its operands
// by value, its op's attributes, an id (copies share it: the same node) and an optional name.
//
// evaluate() runs the expression directly. Scale and Add are elementwise: a chain of them
// becomes one xtensor expression, assigned in one pass into the result (no temporaries).
// The fused kernels of the run plan (engine/optimize.hpp) are selected by the expression's
// type: matmul(a, transpose(b)), softmax(scale(x)) and the attention core
// matmul(softmax([scale](matmul(q, transpose(k)))), v). Every other node runs its op's forward.
//
// to_graph() lowers to the Graph IR through GraphBuilder: nodes and tensors in the order the
// expressions were created (as the builder's eager interface does), named as named, the rest
// with generated names ("MatMul_3").
//
// gradients() is reverse mode over the expression (Stan Math's chain(), Adept's adjoints):
// each distinct node's forward runs once, recording its outputs; then, in reverse creation
// order, each node's typed backward (Op::backward<T>) adds into its operands' adjoints.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xoperation.hpp>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/graph.hpp"
#include "engine/optimize.hpp"
#include "engine/tensor.hpp"
#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace attngraph::expr {

class Leaf;
template <class Op, class Operands>
class Node;
template <class E>
class Output;
class Dynamic;

// ---- traits ---------------------------------------------------------------------------

namespace detail {

template <class E>
struct is_expression : std::false_type {};
template <>
struct is_expression<Leaf> : std::true_type {};
template <class Op, class Operands>
struct is_expression<Node<Op, Operands>> : std::true_type {};
template <class E>
struct is_expression<Output<E>> : std::true_type {};
template <>
struct is_expression<Dynamic> : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

inline std::uint64_t next_id() {
    static std::atomic<std::uint64_t> counter{0};
    return ++counter;
}

}  // namespace detail

/// @brief Leaf, Node, Output or Dynamic.
template <class E>
concept Expression = detail::is_expression<std::decay_t<E>>::value;

/// Whether node type E applies op Op.
template <class E, class Op>
inline constexpr bool is_op = false;
template <class Op, class Operands>
inline constexpr bool is_op<Node<Op, Operands>, Op> = true;

/// Whether Op has several outputs (its shape rule returns a list of shapes).
template <class Op>
inline constexpr bool multi_output =
    std::is_same_v<decltype(Op::infer_shape(std::declval<const typename Op::Attrs&>(),
                                            std::declval<const std::vector<Shape>&>())),
                   std::vector<Shape>>;

/// The elementwise ops evaluate() fuses into one pass (the masks run their op's forward).
template <class Op>
inline constexpr bool elementwise_op = std::is_same_v<Op, ops::Scale> || std::is_same_v<Op, ops::Add>;

/// @brief Which value of an expression: node `id`, output k (-1: its only output).
struct ValueRef {
    std::uint64_t id = 0;
    int k = -1;
    bool operator==(const ValueRef&) const = default;
};

// ---- the expression types -------------------------------------------------------------

/// @brief What every leaf and node has: an id (shared by copies) and an optional name.
template <class Derived>
class Named {
public:
    std::uint64_t id() const { return m_id; }
    const std::string& name() const { return m_name; }
    ValueRef ref() const { return {m_id, -1}; }

    /// A copy of this expression with a name (the node's name in to_graph).
    Derived named(std::string name) const& {
        Derived copy = static_cast<const Derived&>(*this);
        copy.m_name = std::move(name);
        return copy;
    }
    Derived named(std::string name) && {
        m_name = std::move(name);
        return std::move(static_cast<Derived&>(*this));
    }

protected:
    Named() : m_id(detail::next_id()) {}
    explicit Named(std::string name) : m_id(detail::next_id()), m_name(std::move(name)) {}

private:
    std::uint64_t m_id;
    std::string m_name;
};

/// @brief An input or param tensor.
class Leaf : public Named<Leaf> {
public:
    Leaf(ValueKind kind, std::string name, std::shared_ptr<const Tensor> data)
        : Named<Leaf>(std::move(name)), m_kind(kind), m_data(std::move(data)) {}
    ValueKind kind() const { return m_kind; }
    const Tensor& tensor() const { return *m_data; }

private:
    ValueKind m_kind;
    std::shared_ptr<const Tensor> m_data;
};

/// @brief Op `Op` applied to its operands (a std::tuple of expressions, or a std::vector).
template <class Op, class Operands>
class Node : public Named<Node<Op, Operands>> {
public:
    using op_type = Op;
    using attrs_type = typename Op::Attrs;
    using operands_type = Operands;

    Node(attrs_type attrs, Operands operands) : m_attrs(std::move(attrs)), m_operands(std::move(operands)) {
        if constexpr (!detail::is_vector<Operands>::value) {
            constexpr int n = static_cast<int>(std::tuple_size_v<Operands>);
            static_assert(n >= Op::min_inputs && (Op::max_inputs < 0 || n <= Op::max_inputs),
                          "wrong number of operands for this op");
        }
    }
    const attrs_type& attrs() const { return m_attrs; }
    const Operands& operands() const { return m_operands; }

    /// Output k of a node with several outputs (split).
    Output<Node> operator[](int k) const requires multi_output<Op> { return Output<Node>(*this, k); }

private:
    attrs_type m_attrs;
    Operands m_operands;
};

/// @brief Output k of a node with several outputs.
template <class E>
class Output {
public:
    Output(E source, int k) : m_source(std::move(source)), m_k(k) {}
    std::uint64_t id() const { return m_source.id(); }
    const std::string& name() const { return m_source.name(); }
    ValueRef ref() const { return {m_source.id(), m_k}; }
    const E& source() const { return m_source; }
    int index() const { return m_k; }

private:
    E m_source;
    int m_k;
};

template <class T>
class Eval;
template <class T>
class Tape;
class Collector;

/// @brief Any expression, its type erased (a shared, immutable copy): for structure chosen
/// at run time (`if (causal) s = ex::mask_causal(s)`). It evaluates, lowers and
/// differentiates like the expression it holds; evaluate() materialises it (no fusion across
/// it).
class Dynamic {
public:
    Dynamic() = default;
    template <Expression E>
    requires(!std::is_same_v<std::decay_t<E>, Dynamic>)
        Dynamic(E e);  // NOLINT: implicit, as a std::function from a lambda

    std::uint64_t id() const { return self().id(); }
    const std::string& name() const { return self().name(); }
    ValueRef ref() const { return self().ref(); }
    Dynamic named(std::string name) const { return Dynamic(self().renamed(std::move(name))); }

    struct Concept {
        virtual ~Concept() = default;
        virtual std::uint64_t id() const = 0;
        virtual const std::string& name() const = 0;
        virtual ValueRef ref() const = 0;
        virtual std::shared_ptr<const Concept> renamed(std::string name) const = 0;
        virtual void scan(bool& f32, bool& f64) const = 0;
        virtual void collect(Collector& c) const = 0;
        virtual const Array<float>& value(Eval<float>& ctx) const = 0;
        virtual const Array<double>& value(Eval<double>& ctx) const = 0;
    };
    const Concept& self() const {
        if (!m_self) throw GraphError("use of an empty expression (ex::Dynamic)");
        return *m_self;
    }

private:
    explicit Dynamic(std::shared_ptr<const Concept> self) : m_self(std::move(self)) {}
    std::shared_ptr<const Concept> m_self;
};

// ---- leaves and one function per op -----------------------------------------------------

/// @brief An input tensor. A named Tensor is referred to (keep it alive while the expression
/// is used); a temporary is moved into the leaf.
inline Leaf input(std::string name, const Tensor& data) {
    return Leaf(ValueKind::input, std::move(name),
                std::shared_ptr<const Tensor>(std::shared_ptr<const Tensor>(), &data));
}
inline Leaf input(std::string name, Tensor&& data) {
    return Leaf(ValueKind::input, std::move(name), std::make_shared<const Tensor>(std::move(data)));
}
/// @brief A parameter tensor (weights); held as input() holds its tensor.
inline Leaf param(std::string name, const Tensor& data) {
    return Leaf(ValueKind::param, std::move(name),
                std::shared_ptr<const Tensor>(std::shared_ptr<const Tensor>(), &data));
}
inline Leaf param(std::string name, Tensor&& data) {
    return Leaf(ValueKind::param, std::move(name), std::make_shared<const Tensor>(std::move(data)));
}

/// @brief Op `Op` (any op struct, also one of your own registered with OpRegistry) applied to
/// the operands.
template <class Op, Expression... X>
Node<Op, std::tuple<std::decay_t<X>...>> node(typename Op::Attrs attrs, X&&... xs) {
    return {std::move(attrs), std::tuple<std::decay_t<X>...>(std::forward<X>(xs)...)};
}

/// x·W + b over the last axis of x. x is (..., in), W is (in, out), b is (out) or (1, out).
template <Expression X, Expression W>
auto linear(X&& x, W&& w) {
    return expr::node<ops::Linear>({}, std::forward<X>(x), std::forward<W>(w));
}
template <Expression X, Expression W, Expression B>
auto linear(X&& x, W&& w, B&& b) {
    return expr::node<ops::Linear>({}, std::forward<X>(x), std::forward<W>(w), std::forward<B>(b));
}
/// The last two axes swapped, or every axis permuted by `perm`.
template <Expression X>
auto transpose(X&& x) {
    return expr::node<ops::Transpose>({}, std::forward<X>(x));
}
template <Expression X>
auto transpose(X&& x, std::vector<int> perm) {
    return expr::node<ops::Transpose>({std::move(perm)}, std::forward<X>(x));
}
/// a·b over the last two axes, batched (with broadcasting) over the leading ones.
template <Expression A, Expression B>
auto matmul(A&& a, B&& b) {
    return expr::node<ops::MatMul>({}, std::forward<A>(a), std::forward<B>(b));
}
/// factor · x
template <Expression X>
auto scale(X&& x, double factor) {
    return expr::node<ops::Scale>({{factor}}, std::forward<X>(x));
}
/// Numerically stable softmax along `axis`.
template <Expression X>
auto softmax(X&& x, int axis = -1) {
    return expr::node<ops::Softmax>({axis}, std::forward<X>(x));
}
/// Concatenation along `axis` of expressions of one type (wrap others in ex::Dynamic).
template <Expression E>
Node<ops::Concat, std::vector<E>> concat(std::vector<E> xs, int axis = -1) {
    if (xs.empty()) throw GraphError("concat needs at least one input");
    return {ops::ConcatAttrs{axis}, std::move(xs)};
}
/// a + b with numpy broadcasting.
template <Expression A, Expression B>
auto add(A&& a, B&& b) {
    return expr::node<ops::Add>({}, std::forward<A>(a), std::forward<B>(b));
}
/// x with masked positions set to -inf (see ops/mask.hpp): keys j > i + offset (offset
/// ops::causal_from_end: m - n at run time); outside the window; keys j >= lengths[b] of
/// sequence b; where `keep` (broadcast to x) is zero; mask_tensor: a mask `m`, additive or
/// boolean, and the causal pattern when `causal`.
template <Expression X>
auto mask_causal(X&& x, int offset = 0) {
    ops::MaskAttrs a;
    a.pattern = "causal";
    if (offset == causal_from_end)
        a.offset_from_end = true;
    else if (offset)
        a.offset = offset;
    return expr::node<ops::Mask>(std::move(a), std::forward<X>(x));
}
template <Expression X>
auto mask_window(X&& x, int window, bool causal = false) {
    ops::MaskAttrs a;
    a.pattern = "window";
    a.window = window;
    a.causal = causal;
    return expr::node<ops::Mask>(std::move(a), std::forward<X>(x));
}
template <Expression X>
auto mask_padding(X&& x, std::vector<int> lengths) {
    ops::MaskAttrs a;
    a.pattern = "padding";
    a.lengths = std::move(lengths);
    return expr::node<ops::Mask>(std::move(a), std::forward<X>(x));
}
template <Expression X, Expression K>
auto mask(X&& x, K&& keep) {
    return expr::node<ops::Mask>({}, std::forward<X>(x), std::forward<K>(keep));
}
template <Expression X, Expression M>
auto mask_tensor(X&& x, M&& m, bool additive, bool causal = false, int offset = 0) {
    ops::MaskAttrs a;
    if (causal) a.pattern = "causal";
    if (causal && offset == causal_from_end)
        a.offset_from_end = true;
    else if (causal && offset)
        a.offset = offset;
    a.mask_type = additive ? "additive" : "boolean";
    return expr::node<ops::Mask>(std::move(a), std::forward<X>(x), std::forward<M>(m));
}
/// ALiBi: x - slopes[h]·|i + offset - j| for x (..., h, n, m), slopes (h).
template <Expression X, Expression S>
auto alibi(X&& x, S&& slopes, int offset = 0) {
    return expr::node<ops::Alibi>({offset}, std::forward<X>(x), std::forward<S>(slopes));
}
/// x[start:end] along `axis`.
template <Expression X>
auto slice(X&& x, int axis, int start, int end) {
    return expr::node<ops::Slice>({axis, {start}, {end}}, std::forward<X>(x));
}
/// `parts` equal pieces, or pieces of the listed `sizes`, along `axis`: one node; piece k is
/// split(...)[k] (name the node before taking pieces).
template <Expression X>
auto split(X&& x, int parts, int axis = -1) {
    return expr::node<ops::Split>({axis, parts, {}}, std::forward<X>(x));
}
template <Expression X>
auto split(X&& x, std::vector<int> sizes, int axis = -1) {
    return expr::node<ops::Split>({axis, {}, std::move(sizes)}, std::forward<X>(x));
}
/// x's elements in a new shape; one entry may be -1. The first `keep_leading` and the last
/// `keep_trailing` axes of x are kept; `shape` gives the axes between them.
template <Expression X>
auto reshape(X&& x, std::vector<int> shape, int keep_leading = 0, int keep_trailing = 0) {
    return expr::node<ops::Reshape>({{std::move(shape)}, keep_leading, keep_trailing}, std::forward<X>(x));
}
/// Axes permuted: y.shape[i] = x.shape[perm[i]].
template <Expression X>
auto permute(X&& x, std::vector<int> perm) {
    return expr::node<ops::Permute>({{std::move(perm)}}, std::forward<X>(x));
}

// Elementwise, with numpy broadcasting where two or three operands meet.
/// a·b
template <Expression A, Expression B>
auto mul(A&& a, B&& b) {
    return expr::node<ops::Mul>({}, std::forward<A>(a), std::forward<B>(b));
}
/// a − b
template <Expression A, Expression B>
auto sub(A&& a, B&& b) {
    return expr::node<ops::Sub>({}, std::forward<A>(a), std::forward<B>(b));
}
/// a / b
template <Expression A, Expression B>
auto div(A&& a, B&& b) {
    return expr::node<ops::Div>({}, std::forward<A>(a), std::forward<B>(b));
}
/// −x
template <Expression X>
auto neg(X&& x) {
    return expr::node<ops::Neg>({}, std::forward<X>(x));
}
/// eˣ
template <Expression X>
auto exp(X&& x) {
    return expr::node<ops::Exp>({}, std::forward<X>(x));
}
/// ln x
template <Expression X>
auto log(X&& x) {
    return expr::node<ops::Log>({}, std::forward<X>(x));
}
/// tanh x
template <Expression X>
auto tanh(X&& x) {
    return expr::node<ops::Tanh>({}, std::forward<X>(x));
}
/// √x
template <Expression X>
auto sqrt(X&& x) {
    return expr::node<ops::Sqrt>({}, std::forward<X>(x));
}
/// xᵖ for a scalar exponent p
template <Expression X>
auto pow(X&& x, double exponent) {
    return expr::node<ops::Pow>({{exponent}}, std::forward<X>(x));
}
/// sin x
template <Expression X>
auto sin(X&& x) {
    return expr::node<ops::Sin>({}, std::forward<X>(x));
}
/// cos x
template <Expression X>
auto cos(X&& x) {
    return expr::node<ops::Cos>({}, std::forward<X>(x));
}
/// erf x
template <Expression X>
auto erf(X&& x) {
    return expr::node<ops::Erf>({}, std::forward<X>(x));
}
/// a where cond is non-zero, else b
template <Expression C, Expression A, Expression B>
auto where(C&& cond, A&& a, B&& b) {
    return expr::node<ops::Where>({}, std::forward<C>(cond), std::forward<A>(a), std::forward<B>(b));
}
/// 1 where a = b, else 0 (no gradient)
template <Expression A, Expression B>
auto equal(A&& a, B&& b) {
    return expr::node<ops::Equal>({}, std::forward<A>(a), std::forward<B>(b));
}
/// 1 where a < b, else 0 (no gradient)
template <Expression A, Expression B>
auto less(A&& a, B&& b) {
    return expr::node<ops::Less>({}, std::forward<A>(a), std::forward<B>(b));
}
/// 1 where a > b, else 0 (no gradient)
template <Expression A, Expression B>
auto greater(A&& a, B&& b) {
    return expr::node<ops::Greater>({}, std::forward<A>(a), std::forward<B>(b));
}

// Reductions over `axes` (every axis when empty), keeping them as size 1 when `keepdims`.
template <Expression X>
auto reduce_sum(X&& x, std::vector<int> axes, bool keepdims = true) {
    ops::ReduceSumAttrs a;
    if (!axes.empty()) a.axes = std::move(axes);
    a.keepdims = keepdims;
    return expr::node<ops::ReduceSum>(a, std::forward<X>(x));
}
template <Expression X>
auto reduce_mean(X&& x, std::vector<int> axes, bool keepdims = true) {
    ops::ReduceMeanAttrs a;
    if (!axes.empty()) a.axes = std::move(axes);
    a.keepdims = keepdims;
    return expr::node<ops::ReduceMean>(a, std::forward<X>(x));
}
template <Expression X>
auto reduce_max(X&& x, std::vector<int> axes, bool keepdims = true) {
    ops::ReduceMaxAttrs a;
    if (!axes.empty()) a.axes = std::move(axes);
    a.keepdims = keepdims;
    return expr::node<ops::ReduceMax>(a, std::forward<X>(x));
}

// Shapes and indices.
/// x broadcast to `shape` (numpy's rules)
template <Expression X>
auto expand(X&& x, std::vector<int> shape) {
    return expr::node<ops::Expand>({{std::move(shape)}}, std::forward<X>(x));
}
/// x's entries at `indices` along `axis` (ONNX Gather; no gradient for the indices)
template <Expression X, Expression I>
auto gather(X&& x, I&& indices, int axis = 0) {
    return expr::node<ops::Gather>({axis}, std::forward<X>(x), std::forward<I>(indices));
}
/// [start, limit) in steps of delta, a 1-D tensor of the graph's dtype
inline auto range(double start, double limit, double delta = 1) {
    ops::RangeAttrs a;
    a.start = start;
    a.limit = {limit};
    a.delta = delta;
    return expr::node<ops::Range>(a);
}

// Normalizations and rotary embeddings, with ONNX's semantics (ops/*.hpp).
/// x / √(mean(x²) + ε) · scale over the axes from `axis` on
template <Expression X, Expression S>
auto rms_normalization(X&& x, S&& scale, int axis = -1, double epsilon = 1e-5) {
    ops::RMSNormalizationAttrs a;
    a.axis = axis;
    a.epsilon = epsilon;
    return expr::node<ops::RMSNormalization>(a, std::forward<X>(x), std::forward<S>(scale));
}
/// (x − mean) / √(var + ε) · scale + bias over the axes from `axis` on: the op's output Y
/// (its Mean and InvStdDev outputs through ex::node<ops::LayerNormalization>(...)[k])
template <Expression X, Expression S, Expression B>
auto layer_normalization(X&& x, S&& scale, B&& bias, int axis = -1, double epsilon = 1e-5) {
    ops::LayerNormalizationAttrs a;
    a.axis = axis;
    a.epsilon = epsilon;
    return expr::node<ops::LayerNormalization>(a, std::forward<X>(x), std::forward<S>(scale),
                                               std::forward<B>(bias))[0];
}
/// x rotated by the cos/sin caches (ONNX RotaryEmbedding; `attrs` for interleaved, partial
/// rotation and 3-D input), at `position_ids` when given as a fourth operand
template <Expression X, Expression C, Expression S>
auto rotary_embedding(X&& x, C&& cos_cache, S&& sin_cache, ops::RotaryEmbeddingAttrs attrs = {}) {
    return expr::node<ops::RotaryEmbedding>(attrs, std::forward<X>(x), std::forward<C>(cos_cache),
                                            std::forward<S>(sin_cache));
}
template <Expression X, Expression C, Expression S, Expression P>
auto rotary_embedding(X&& x, C&& cos_cache, S&& sin_cache, P&& position_ids, ops::RotaryEmbeddingAttrs attrs = {}) {
    return expr::node<ops::RotaryEmbedding>(attrs, std::forward<X>(x), std::forward<C>(cos_cache),
                                            std::forward<S>(sin_cache), std::forward<P>(position_ids));
}

// ---- walking an expression ----------------------------------------------------------------

namespace detail {

template <class Operands, class F>
void for_each_operand(const Operands& operands, F&& f) {
    if constexpr (is_vector<Operands>::value) {
        for (const auto& o : operands) f(o);
    } else {
        std::apply([&](const auto&... o) { (f(o), ...); }, operands);
    }
}

template <class Operands>
std::size_t operand_count(const Operands& operands) {
    if constexpr (is_vector<Operands>::value)
        return operands.size();
    else
        return std::tuple_size_v<Operands>;
}

// "node 'Q' (Linear)", or "a Linear expression" when unnamed
template <class Op>
std::string where(const std::string& name) {
    return name.empty() ? std::string("an unnamed ") + Op::name + " expression"
                        : "node '" + name + "' (" + Op::name + ")";
}

template <class E>
std::string label(const E& e) {
    if constexpr (std::is_same_v<E, Dynamic>) {
        return e.name().empty() ? "(unnamed)" : e.name();
    } else if constexpr (std::is_same_v<E, Leaf>) {
        return e.name();
    } else if constexpr (requires { e.source(); }) {
        return label(e.source()) + ":" + std::to_string(e.index());
    } else {
        return e.name().empty() ? std::string("(") + E::op_type::name + ")" : e.name();
    }
}

// The op's shape rule, its errors prefixed as the graph builder prefixes them.
template <class Op>
std::vector<Shape> infer_shapes(const typename Op::Attrs& attrs, const std::vector<Shape>& in, const std::string& name,
                                const std::vector<std::string>& labels) {
    try {
        auto r = Op::infer_shape(attrs, in);
        if constexpr (std::is_same_v<decltype(r), Shape>)
            return {std::move(r)};
        else
            return r;
    } catch (const ShapeError& e) {
        std::string operands;
        for (std::size_t i = 0; i < in.size(); ++i)
            operands += (i ? ", " : "") + labels[i] + " (" + shape_str(in[i]) + ")";
        throw ShapeError(where<Op>(name) + ": " + e.what() + "; inputs: " + operands);
    } catch (const GraphError& e) {
        throw GraphError(where<Op>(name) + ": " + e.what());
    }
}

template <class Op, class Operands>
std::vector<std::string> operand_labels(const Node<Op, Operands>& e) {
    std::vector<std::string> labels;
    for_each_operand(e.operands(), [&](const auto& o) { labels.push_back(label(o)); });
    return labels;
}

template <class S>
Shape to_shape(const S& s) {
    return Shape(s.begin(), s.end());
}

}  // namespace detail

// ---- dtypes ----------------------------------------------------------------------------------

namespace detail {

inline void scan(const Leaf& e, bool& f32, bool& f64);
template <class E>
void scan(const Output<E>& e, bool& f32, bool& f64);
template <class Op, class Operands>
void scan(const Node<Op, Operands>& e, bool& f32, bool& f64);
inline void scan(const Dynamic& e, bool& f32, bool& f64);

inline void scan(const Leaf& e, bool& f32, bool& f64) {
    (e.tensor().dtype() == DType::f32 ? f32 : f64) = true;
}
template <class E>
void scan(const Output<E>& e, bool& f32, bool& f64) {
    scan(e.source(), f32, f64);
}
template <class Op, class Operands>
void scan(const Node<Op, Operands>& e, bool& f32, bool& f64) {
    for_each_operand(e.operands(), [&](const auto& o) { scan(o, f32, f64); });
}
inline void scan(const Dynamic& e, bool& f32, bool& f64) {
    e.self().scan(f32, f64);
}

// The dtype of an expression's leaves; mixed dtypes need an explicit one.
template <class E>
DType leaf_dtype(const E& e, const char* what) {
    bool f32 = false, f64 = false;
    scan(e, f32, f64);
    if (f32 && f64) throw GraphError(std::string(what) + ": the leaves mix f32 and f64 tensors; give a dtype");
    return f64 ? DType::f64 : DType::f32;
}

}  // namespace detail

// ---- evaluate --------------------------------------------------------------------------------

/// @brief The state of one evaluate(): materialised node outputs by node id.
template <class T>
class Eval {
public:
    /// The outputs of node `id`, or null when not computed yet.
    const std::vector<Array<T>>* find(std::uint64_t id) const {
        auto it = m_values.find(id);
        return it == m_values.end() ? nullptr : &it->second;
    }
    const std::vector<Array<T>>& store(std::uint64_t id, std::vector<Array<T>> outputs) {
        return m_values[id] = std::move(outputs);
    }

private:
    std::unordered_map<std::uint64_t, std::vector<Array<T>>> m_values;  // node-based: stable references
};

namespace detail {

// value(): the expression's value as an array that lives as long as the Eval (memoised).
// compute(): a fresh array (the root's). lazy(): an xtensor expression (elementwise nodes), or
// the value of anything else.
template <class T>
const Array<T>& value(const Leaf& e, Eval<T>& ctx);
template <class T, class E>
const Array<T>& value(const Output<E>& e, Eval<T>& ctx);
template <class T, class Op, class Operands>
const Array<T>& value(const Node<Op, Operands>& e, Eval<T>& ctx);
template <class T>
const Array<T>& value(const Dynamic& e, Eval<T>& ctx) {
    return e.self().value(ctx);
}

template <class T>
const Array<T>& value(const Leaf& e, Eval<T>& ctx) {
    if (e.tensor().dtype() == dtype_of<T>()) return e.tensor().as<T>();
    if (const auto* v = ctx.find(e.id())) return (*v)[0];
    std::vector<Array<T>> cast;
    cast.push_back(e.tensor().cast(dtype_of<T>()).template as<T>());
    return ctx.store(e.id(), std::move(cast))[0];
}

// Every output of a node through its op's forward: the general path.
template <class T, class Op, class Operands>
std::vector<Array<T>> compute_outputs(const Node<Op, Operands>& e, Eval<T>& ctx) {
    std::vector<const Array<T>*> in;
    std::vector<Shape> shapes;
    for_each_operand(e.operands(), [&](const auto& o) {
        in.push_back(&value<T>(o, ctx));
        shapes.push_back(ops::shape_of(*in.back()));
    });
    if (static_cast<int>(in.size()) < Op::min_inputs)
        throw GraphError(where<Op>(e.name()) + ": takes at least " + std::to_string(Op::min_inputs) + " inputs, got " +
                         std::to_string(in.size()));
    std::vector<Array<T>> out;
    for (const Shape& s : infer_shapes<Op>(e.attrs(), shapes, e.name(), operand_labels(e)))
        out.push_back(Array<T>::from_shape(s));
    std::vector<Array<T>*> out_ptrs;
    for (auto& a : out) out_ptrs.push_back(&a);
    Op::template forward<T>(e.attrs(), In<T>(in.data(), in.size()), Out<T>(out_ptrs.data(), out_ptrs.size()));
    return out;
}

// -- the elementwise ops as xtensor expressions --

// Whether two shapes broadcast (numpy rules), without allocating.
template <class A, class B>
bool shapes_broadcast(const A& a, const B& b) {
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 1; i <= n; ++i) {
        const std::size_t da = a[a.size() - i], db = b[b.size() - i];
        if (da != db && da != 1 && db != 1) return false;
    }
    return true;
}

template <class T, class E>
decltype(auto) lazy(const E& e, Eval<T>& ctx);
template <class T, class X>
auto lazy(const Node<ops::Scale, std::tuple<X>>& e, Eval<T>& ctx);
template <class T, class A, class B>
auto lazy(const Node<ops::Add, std::tuple<A, B>>& e, Eval<T>& ctx);

template <class T, class E>
decltype(auto) lazy(const E& e, Eval<T>& ctx) {
    return value<T>(e, ctx);
}

template <class T, class X>
auto lazy(const Node<ops::Scale, std::tuple<X>>& e, Eval<T>& ctx) {
    if (!std::isfinite(e.attrs().factor.value))
        infer_shapes<ops::Scale>(e.attrs(), {Shape{}}, e.name(), {label(std::get<0>(e.operands()))});  // throws
    return static_cast<T>(e.attrs().factor.value) * lazy<T>(std::get<0>(e.operands()), ctx);
}

template <class T, class A, class B>
auto lazy(const Node<ops::Add, std::tuple<A, B>>& e, Eval<T>& ctx) {
    auto&& a = lazy<T>(std::get<0>(e.operands()), ctx);
    auto&& b = lazy<T>(std::get<1>(e.operands()), ctx);
    if (!shapes_broadcast(a.shape(), b.shape()))  // throws the op's message
        infer_shapes<ops::Add>(e.attrs(), {to_shape(a.shape()), to_shape(b.shape())}, e.name(), operand_labels(e));
    return std::forward<decltype(a)>(a) + std::forward<decltype(b)>(b);
}

// -- the fused kernels, by expression type --

template <class E>
using first_t = std::tuple_element_t<0, typename E::operands_type>;
template <class E>
using second_t = std::tuple_element_t<1, typename E::operands_type>;

template <class E>
constexpr bool transposed_second() {
    if constexpr (is_op<E, ops::MatMul>)
        return is_op<second_t<E>, ops::Transpose>;
    else
        return false;
}

// matmul(q, transpose(k))
template <class E>
inline constexpr bool is_matmul_tb = transposed_second<E>();

// softmax(scale(x))
template <class E>
constexpr bool scaled_softmax_shape() {
    if constexpr (is_op<E, ops::Softmax>)
        return is_op<first_t<E>, ops::Scale>;
    else
        return false;
}
template <class E>
inline constexpr bool is_scaled_softmax = scaled_softmax_shape<E>();

// matmul(softmax([scale](matmul(q, transpose(k)))), v)
template <class E>
constexpr bool attention_shape() {
    if constexpr (is_op<E, ops::MatMul>) {
        using A = first_t<E>;
        if constexpr (is_op<A, ops::Softmax>) {
            using S = first_t<A>;
            if constexpr (is_op<S, ops::Scale>)
                return is_matmul_tb<first_t<S>>;
            else
                return is_matmul_tb<S>;
        } else {
            return false;
        }
    } else {
        return false;
    }
}
template <class E>
inline constexpr bool is_attention = attention_shape<E>();

inline bool swaps_last_two(const ops::TransposeAttrs& a, std::size_t rank) {
    if (!a.perm) return true;
    if (a.perm->size() != rank || rank < 2) return false;
    for (std::size_t k = 0; k < rank; ++k) {
        const long p = (*a.perm)[k] < 0 ? (*a.perm)[k] + static_cast<long>(rank) : (*a.perm)[k];
        const std::size_t want = k + 2 < rank ? k : (k + 2 == rank ? rank - 1 : rank - 2);
        if (p != static_cast<long>(want)) return false;
    }
    return true;
}

inline bool last_axis(int axis, std::size_t rank) {
    return axis == -1 || axis == static_cast<int>(rank) - 1;
}

// Whether batch axes `from` repeat to `to` by numpy broadcasting.
inline bool broadcasts_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (std::size_t i = 0; i < from.size(); ++i) {
        const std::size_t d = from[from.size() - 1 - i];
        if (d != 1 && d != to[to.size() - 1 - i]) return false;
    }
    return true;
}
inline Shape batch_of(const Shape& s) {
    return Shape(s.begin(), s.end() - 2);
}

template <class Op, class E>
Shape infer_one(const E& e, std::vector<Shape> in) {
    return infer_shapes<Op>(e.attrs(), in, e.name(), operand_labels(e))[0];
}

template <class T, class E>
std::optional<Array<T>> try_matmul_tb(const E& e, Eval<T>& ctx) {
    const auto& t = std::get<1>(e.operands());
    const Array<T>& a = value<T>(std::get<0>(e.operands()), ctx);
    const Array<T>& b = value<T>(std::get<0>(t.operands()), ctx);
    const Shape bs = ops::shape_of(b);
    if (!swaps_last_two(t.attrs(), bs.size())) return std::nullopt;
    const Shape ts = infer_one<ops::Transpose>(t, {bs});
    Array<T> c = Array<T>::from_shape(infer_one<ops::MatMul>(e, {ops::shape_of(a), ts}));
    fused_matmul_tb<T>(a, b, c);
    return c;
}

template <class T, class E>
std::optional<Array<T>> try_scaled_softmax(const E& e, Eval<T>& ctx) {
    const auto& s = std::get<0>(e.operands());
    const Array<T>& x = value<T>(std::get<0>(s.operands()), ctx);
    const Shape xs = infer_one<ops::Scale>(s, {ops::shape_of(x)});
    if (!last_axis(e.attrs().axis, xs.size())) return std::nullopt;
    Array<T> y = Array<T>::from_shape(infer_one<ops::Softmax>(e, {xs}));
    fused_scaled_softmax<T>(x, y, static_cast<T>(s.attrs().factor.value));
    return y;
}

template <class T, class E>
std::optional<Array<T>> try_attention(const E& o, Eval<T>& ctx) {
    const auto& a = std::get<0>(o.operands());
    using S = first_t<std::decay_t<decltype(a)>>;
    constexpr bool scaled = is_op<S, ops::Scale>;
    const auto& s = std::get<0>(a.operands());
    const auto& sraw = [&]() -> const auto& {
        if constexpr (scaled)
            return std::get<0>(s.operands());
        else
            return s;
    }
    ();
    const auto& kt = std::get<1>(sraw.operands());
    const Array<T>& q = value<T>(std::get<0>(sraw.operands()), ctx);
    const Array<T>& k = value<T>(std::get<0>(kt.operands()), ctx);
    const Array<T>& v = value<T>(std::get<1>(o.operands()), ctx);
    const Shape qs = ops::shape_of(q), ks = ops::shape_of(k), vs = ops::shape_of(v);
    if (!swaps_last_two(kt.attrs(), ks.size())) return std::nullopt;
    Shape ss = infer_one<ops::MatMul>(sraw, {qs, infer_one<ops::Transpose>(kt, {ks})});
    double factor = 1.0;
    if constexpr (scaled) {
        ss = infer_one<ops::Scale>(s, {ss});
        factor = s.attrs().factor.value;
    }
    if (!last_axis(a.attrs().axis, ss.size())) return std::nullopt;
    const Shape os = infer_one<ops::MatMul>(o, {infer_one<ops::Softmax>(a, {ss}), vs});
    if (vs.size() < 2 || !broadcasts_to(batch_of(ks), batch_of(qs)) || !broadcasts_to(batch_of(vs), batch_of(qs)) ||
        batch_of(os) != batch_of(qs))
        return std::nullopt;
    Array<T> out = Array<T>::from_shape(os);
    fused_attention<T>(q, k, v, out, static_cast<T>(factor), scaled);
    return out;
}

// A single-output node's value, fresh: fused, elementwise in one pass, or its op's forward.
template <class T, class Op, class Operands>
Array<T> compute(const Node<Op, Operands>& e, Eval<T>& ctx) {
    using E = Node<Op, Operands>;
    if constexpr (elementwise_op<Op>) {
        Array<T> result = lazy<T>(e, ctx);
        return result;
    } else {
        if constexpr (is_attention<E>) {
            if (auto r = try_attention<T>(e, ctx)) return std::move(*r);
        }
        if constexpr (is_matmul_tb<E>) {
            if (auto r = try_matmul_tb<T>(e, ctx)) return std::move(*r);
        }
        if constexpr (is_scaled_softmax<E>) {
            if (auto r = try_scaled_softmax<T>(e, ctx)) return std::move(*r);
        }
        return std::move(compute_outputs<T>(e, ctx)[0]);
    }
}

template <class T, class Op, class Operands>
const Array<T>& value(const Node<Op, Operands>& e, Eval<T>& ctx) {
    if (const auto* v = ctx.find(e.id())) return (*v)[0];
    if constexpr (multi_output<Op>) {
        return ctx.store(e.id(), compute_outputs<T>(e, ctx))[0];
    } else {
        std::vector<Array<T>> out;
        out.push_back(compute<T>(e, ctx));
        return ctx.store(e.id(), std::move(out))[0];
    }
}

template <class T, class E>
const Array<T>& value(const Output<E>& e, Eval<T>& ctx) {
    const std::vector<Array<T>>* outputs = ctx.find(e.id());
    if (!outputs) {
        if constexpr (requires { typename E::op_type; }) {
            outputs = &ctx.store(e.id(), compute_outputs<T>(e.source(), ctx));
        } else {
            value<T>(e.source(), ctx);
            outputs = ctx.find(e.id());
        }
    }
    if (e.index() < 0 || static_cast<std::size_t>(e.index()) >= outputs->size())
        throw GraphError("node '" + label(e.source()) + "' has no output " + std::to_string(e.index()));
    return (*outputs)[static_cast<std::size_t>(e.index())];
}

template <class T, class E>
Array<T> compute_root(const E& e, Eval<T>& ctx) {
    if constexpr (requires { typename E::op_type; }) {
        if constexpr (!multi_output<typename E::op_type>)
            return compute<T>(e, ctx);
        else
            throw GraphError(where<typename E::op_type>(e.name()) + " has several outputs: evaluate one ([k])");
    } else {
        return value<T>(e, ctx);  // a copy
    }
}

}  // namespace detail

/// @brief The expression's value, computed directly (no Graph), in the leaves' dtype (or
/// `dtype`, the leaves converted). Throws ShapeError / GraphError naming the node.
template <Expression E>
Tensor evaluate(const E& e, std::optional<DType> dtype = std::nullopt) {
    const DType d = dtype ? *dtype : detail::leaf_dtype(e, "evaluate");
    if (d == DType::f32) {
        Eval<float> ctx;
        return Tensor(detail::compute_root<float>(e, ctx));
    }
    Eval<double> ctx;
    return Tensor(detail::compute_root<double>(e, ctx));
}

// ---- the distinct nodes of an expression, in creation order ---------------------------------

/// @brief One distinct leaf or node of an expression, type-erased through a table of
/// functions generated for its type.
struct Entry {
    struct Table {
        Value (*lower)(const void* self, const std::string& name, GraphBuilder& b,
                       const std::unordered_map<std::uint64_t, Value>& values);
        void (*refs)(const void* self, std::vector<ValueRef>& out);
        void (*forward_f32)(const void* self, const std::string& name, Tape<float>& tape);
        void (*forward_f64)(const void* self, const std::string& name, Tape<double>& tape);
        void (*backward_f32)(const void* self, const std::string& name, Tape<float>& tape);
        void (*backward_f64)(const void* self, const std::string& name, Tape<double>& tape);
    };
    std::uint64_t id = 0;
    const void* self = nullptr;
    const Table* table = nullptr;
    std::string name;
};

/// @brief Collects the distinct nodes of an expression (copies of a node share its id).
class Collector {
public:
    /// Adds the node unless known; returns whether it was new (then visit its operands).
    bool add(std::uint64_t id, const void* self, const Entry::Table* table, const std::string& name) {
        auto [it, fresh] = m_index.emplace(id, m_entries.size());
        if (fresh) {
            m_entries.push_back({id, self, table, name});
            return true;
        }
        std::string& known = m_entries[it->second].name;
        if (known.empty())
            known = name;
        else if (!name.empty() && name != known)
            throw GraphError("one node is named both '" + known + "' and '" + name + "'");
        return false;
    }
    /// The nodes in creation order (a topological order: operands are made first).
    std::vector<Entry> sorted() const {
        std::vector<Entry> out = m_entries;
        std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
        return out;
    }

private:
    std::vector<Entry> m_entries;
    std::unordered_map<std::uint64_t, std::size_t> m_index;
};

template <class T>
class Tape {
public:
    std::unordered_map<std::uint64_t, std::vector<Array<T>>> values;    // outputs of every node
    std::unordered_map<std::uint64_t, std::vector<Array<T>>> adjoints;  // dL/d output, where needed
    std::unordered_map<std::uint64_t, bool> needs;                      // on a path from a requested value to the root

    const Array<T>& value(ValueRef r) const {
        const auto& v = values.at(r.id);
        return v[static_cast<std::size_t>(r.k < 0 ? 0 : r.k)];
    }
    /// The adjoint of value r, zeros when first asked for (every output of its node).
    Array<T>& adjoint(ValueRef r) {
        auto it = adjoints.find(r.id);
        if (it == adjoints.end()) {
            std::vector<Array<T>> zeros;
            for (const auto& v : values.at(r.id)) zeros.push_back(xt::zeros_like(v));
            it = adjoints.emplace(r.id, std::move(zeros)).first;
        }
        return it->second[static_cast<std::size_t>(r.k < 0 ? 0 : r.k)];
    }
};

namespace detail {

inline void collect(const Leaf& e, Collector& c);
template <class E>
void collect(const Output<E>& e, Collector& c);
template <class Op, class Operands>
void collect(const Node<Op, Operands>& e, Collector& c);
inline void collect(const Dynamic& e, Collector& c) {
    e.self().collect(c);
}

template <class E>
ValueRef ref_of(const E& e) {
    return e.ref();
}

struct LeafTable {
    static Value lower(const void* self, const std::string& name, GraphBuilder& b,
                       const std::unordered_map<std::uint64_t, Value>&) {
        const Leaf& e = *static_cast<const Leaf*>(self);
        return e.kind() == ValueKind::input ? b.input(name, e.tensor()) : b.param(name, e.tensor());
    }
    static void refs(const void*, std::vector<ValueRef>&) {}
    template <class T>
    static void forward(const void* self, const std::string&, Tape<T>& tape) {
        const Leaf& e = *static_cast<const Leaf*>(self);
        std::vector<Array<T>> v;
        v.push_back(e.tensor().dtype() == dtype_of<T>() ? e.tensor().as<T>()
                                                        : e.tensor().cast(dtype_of<T>()).template as<T>());
        tape.values[e.id()] = std::move(v);
    }
    template <class T>
    static void backward(const void*, const std::string&, Tape<T>&) {}
    static constexpr Entry::Table table = {lower,           refs, forward<float>, forward<double>, backward<float>,
                                           backward<double>};
};

template <class Op, class Operands>
struct NodeTable {
    using E = Node<Op, Operands>;
    static Value lower(const void* self, const std::string& name, GraphBuilder& b,
                       const std::unordered_map<std::uint64_t, Value>& values) {
        const E& e = *static_cast<const E*>(self);
        std::vector<Value> in;
        for_each_operand(e.operands(), [&](const auto& o) {
            const ValueRef r = ref_of(o);
            const Value& v = values.at(r.id);
            in.push_back(r.k < 0 ? v : v[r.k]);
        });
        return b.node<Op>(in, e.attrs(), name);
    }
    static void refs(const void* self, std::vector<ValueRef>& out) {
        for_each_operand(static_cast<const E*>(self)->operands(), [&](const auto& o) { out.push_back(ref_of(o)); });
    }
    template <class T>
    static void forward(const void* self, const std::string& name, Tape<T>& tape) {
        const E& e = *static_cast<const E*>(self);
        std::vector<const Array<T>*> in;
        std::vector<Shape> shapes;
        std::vector<std::string> labels;
        for_each_operand(e.operands(), [&](const auto& o) {
            in.push_back(&tape.value(ref_of(o)));
            shapes.push_back(ops::shape_of(*in.back()));
            labels.push_back(label(o));
        });
        std::vector<Array<T>> out;
        for (const Shape& s : infer_shapes<Op>(e.attrs(), shapes, name, labels)) out.push_back(Array<T>::from_shape(s));
        std::vector<Array<T>*> out_ptrs;
        for (auto& a : out) out_ptrs.push_back(&a);
        Op::template forward<T>(e.attrs(), In<T>(in.data(), in.size()), Out<T>(out_ptrs.data(), out_ptrs.size()));
        tape.values[e.id()] = std::move(out);
    }
    // in the forward pass this was: outputs = Op(operands); each operand on a path to a
    // requested value gets Op's backward added into its adjoint
    template <class T>
    static void backward(const void* self, const std::string& name, Tape<T>& tape) {
        const E& e = *static_cast<const E*>(self);
        if (!tape.needs[e.id()] || !tape.adjoints.count(e.id())) return;
        std::vector<const Array<T>*> in;
        std::vector<Array<T>*> din;
        bool any = false;
        for_each_operand(e.operands(), [&](const auto& o) {
            const ValueRef r = ref_of(o);
            in.push_back(&tape.value(r));
            const bool need = tape.needs[r.id];
            din.push_back(need ? &tape.adjoint(r) : nullptr);
            any = any || need;
        });
        if (!any) return;
        if constexpr (requires { &Op::template backward<T>; }) {
            std::vector<const Array<T>*> out, dout;
            for (const auto& v : tape.values.at(e.id())) out.push_back(&v);
            for (std::size_t k = 0; k < out.size(); ++k) dout.push_back(&tape.adjoint({e.id(), static_cast<int>(k)}));
            Op::template backward<T>(e.attrs(), In<T>(in.data(), in.size()), In<T>(out.data(), out.size()),
                                     In<T>(dout.data(), dout.size()), Out<T>(din.data(), din.size()));
        } else {
            throw GraphError(where<Op>(name) + ": the op has no backward");
        }
    }
    static constexpr Entry::Table table = {lower,           refs, forward<float>, forward<double>, backward<float>,
                                           backward<double>};
};

inline void collect(const Leaf& e, Collector& c) {
    c.add(e.id(), &e, &LeafTable::table, e.name());
}

template <class E>
void collect(const Output<E>& e, Collector& c) {
    collect(e.source(), c);
}

template <class Op, class Operands>
void collect(const Node<Op, Operands>& e, Collector& c) {
    if (!c.add(e.id(), &e, &NodeTable<Op, Operands>::table, e.name())) return;
    for_each_operand(e.operands(), [&](const auto& o) { collect(o, c); });
}

}  // namespace detail

// ---- Dynamic ----------------------------------------------------------------------------------

namespace detail {
template <class E>
struct DynamicModel final : Dynamic::Concept {
    explicit DynamicModel(E e) : expr(std::move(e)) {}
    E expr;
    std::uint64_t id() const override { return expr.id(); }
    const std::string& name() const override { return expr.name(); }
    ValueRef ref() const override { return ref_of(expr); }
    std::shared_ptr<const Dynamic::Concept> renamed(std::string name) const override {
        if constexpr (requires { expr.named(std::move(name)); })
            return std::make_shared<DynamicModel<E>>(expr.named(std::move(name)));
        else
            throw GraphError("an output of a node with several outputs cannot be named: name the node");
    }
    void scan(bool& f32, bool& f64) const override { detail::scan(expr, f32, f64); }
    void collect(Collector& c) const override { detail::collect(expr, c); }
    const Array<float>& value(Eval<float>& ctx) const override { return detail::value<float>(expr, ctx); }
    const Array<double>& value(Eval<double>& ctx) const override { return detail::value<double>(expr, ctx); }
};
}  // namespace detail

template <Expression E>
requires(!std::is_same_v<std::decay_t<E>, Dynamic>) Dynamic::Dynamic(E e)
    : m_self(std::make_shared<detail::DynamicModel<std::decay_t<E>>>(std::move(e))) {}

// ---- to_graph -----------------------------------------------------------------------------------

/// @brief What to_graph() sets besides the name.
struct GraphOptions {
    std::optional<DType> dtype;       ///< default: the leaves' dtype (required when they mix)
    std::vector<std::string> tokens;  ///< token labels of the rows (traces, reports)
};

/// @brief The expression as the Graph IR (its value the graph's output). Names as given by
/// input/param/named; the other nodes get generated names ("MatMul_3"). Throws GraphError /
/// ShapeError as GraphBuilder does.
template <Expression E>
Graph to_graph(const E& root, const std::string& name, const GraphOptions& options = {}) {
    const DType dtype = options.dtype ? *options.dtype : detail::leaf_dtype(root, "to_graph");
    Collector c;
    detail::collect(root, c);
    GraphBuilder b(name, dtype);
    b.set_tokens(options.tokens);
    std::unordered_map<std::uint64_t, Value> values;
    for (const Entry& entry : c.sorted()) values[entry.id] = entry.table->lower(entry.self, entry.name, b, values);
    const ValueRef r = detail::ref_of(root);
    const Value& out = values.at(r.id);
    b.output(r.k < 0 ? out : out[r.k]);
    return b.build();
}

// ---- gradients -----------------------------------------------------------------------------------

/// @brief A value to differentiate with respect to: any expression (a leaf, a node, an output).
class Wrt {
public:
    template <Expression E>
    Wrt(const E& e) : m_ref(detail::ref_of(e)), m_label(detail::label(e)) {}  // NOLINT: implicit
    ValueRef ref() const { return m_ref; }
    const std::string& label() const { return m_label; }

private:
    ValueRef m_ref;
    std::string m_label;
};

namespace detail {

template <class T, class E>
std::vector<Tensor> gradients(const E& root, const std::vector<Wrt>& wrt, const std::optional<Tensor>& g) {
    Collector c;
    collect(root, c);
    const std::vector<Entry> entries = c.sorted();
    Tape<T> tape;
    std::vector<ValueRef> refs;
    for (const Wrt& w : wrt) {
        if (!std::ranges::any_of(entries, [&](const Entry& e) { return e.id == w.ref().id; }))
            throw GraphError("gradients: '" + w.label() + "' is not part of the expression");
        tape.needs[w.ref().id] = true;
    }
    // forward, in creation order: every node once, its outputs kept
    for (const Entry& e : entries) {
        if constexpr (std::is_same_v<T, float>)
            e.table->forward_f32(e.self, e.name, tape);
        else
            e.table->forward_f64(e.self, e.name, tape);
        refs.clear();
        e.table->refs(e.self, refs);
        bool& need = tape.needs[e.id];
        for (const ValueRef& r : refs) need = need || tape.needs[r.id];
    }
    // the root's adjoint: G, or ones
    const ValueRef out = ref_of(root);
    if (out.k < 0 && tape.values.at(out.id).size() != 1)
        throw GraphError("gradients: the expression has several outputs: differentiate one ([k])");
    Array<T>& seed = tape.adjoint(out);
    if (g) {
        if (g->shape() != ops::shape_of(seed))
            throw ShapeError("gradients: G (" + shape_str(g->shape()) + ") does not match the expression's shape (" +
                             shape_str(ops::shape_of(seed)) + ")");
        seed = g->dtype() == dtype_of<T>() ? g->as<T>() : g->cast(dtype_of<T>()).template as<T>();
    } else {
        seed.fill(T(1));
    }
    // reverse, in reverse creation order: each node's backward once its consumers have added
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if constexpr (std::is_same_v<T, float>)
            it->table->backward_f32(it->self, it->name, tape);
        else
            it->table->backward_f64(it->self, it->name, tape);
    }
    std::vector<Tensor> result;
    for (const Wrt& w : wrt) result.emplace_back(tape.adjoint(w.ref()));
    return result;
}

}  // namespace detail

/// @brief dL/dw for every w of `wrt` (in that order), L = sum(G ⊙ root), G all ones by
/// default (else root's shape). Computed in the leaves' dtype.
template <Expression E>
std::vector<Tensor> gradients(const E& root, const std::vector<Wrt>& wrt,
                              const std::optional<Tensor>& g = std::nullopt) {
    if (detail::leaf_dtype(root, "gradients") == DType::f32) return detail::gradients<float>(root, wrt, g);
    return detail::gradients<double>(root, wrt, g);
}

}  // namespace attngraph::expr
