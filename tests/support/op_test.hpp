#pragma once
// The op-test harness (tests/test_op_*.cpp): literal and random arrays, plain-loop index
// arithmetic for references, and every op run two ways, which must agree bit for bit:
//
//   through its definition   the op's forward and backward called directly (OpDef);
//   through the executor     a one-node graph ("in0", "in1", ... -> "y") run by an Executor
//                            at 1, 2, 4 and 8 threads, and its backward (engine/autodiff).
//
// forward<T> returns the result of both ways (after checking that they agree); gradcheck
// checks the backward both ways and against central finite differences through
// engine/gradcheck, in float64, and the executor's gradients at every thread count in f32
// and f64. Attributes are given as in a graph file (JSON; null: none). check_against_reference
// compares both ways with a plain-loop reference written in the test, in f64 and f32.
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/op.hpp"
#include "engine/tensor.hpp"

namespace attngraph::test {

/// The element types every op is tested in (BOOST_AUTO_TEST_CASE_TEMPLATE).
using Dtypes = boost::mpl::list<float, double>;

/// The thread counts every run through the executor is repeated at.
inline const std::vector<int> thread_counts = {1, 2, 4, 8};

/// The executor of `threads` threads (the process's shared one: executors of several counts
/// above the core count alive at once would cap each other's workers).
inline std::shared_ptr<Executor> executor_for(int threads) {
    return default_executor(threads);
}

// ---- arrays ---------------------------------------------------------------------------------

/// An array of `shape` holding `values` in row-major order.
template <class T = double>
Array<T> literal(const Shape& shape, const std::vector<double>& values) {
    Array<T> a = Array<T>::from_shape(shape);
    BOOST_REQUIRE_EQUAL(a.size(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) a.data()[i] = static_cast<T>(values[i]);
    return a;
}

/// A float64 array of `shape` holding `values` in row-major order.
inline Array<double> array_of(const Shape& shape, const std::vector<double>& values) {
    return literal<double>(shape, values);
}

/// Uniform(-1, 1) values from a seeded std::mt19937_64.
template <class T = double>
Array<T> random_array(const Shape& shape, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    Array<T> a = Array<T>::from_shape(shape);
    for (auto& v : a) v = static_cast<T>(dist(rng));
    return a;
}

/// Uniform(lo, hi) values from a seeded std::mt19937.
inline Array<double> uniform_array(const Shape& shape, unsigned seed, double lo = -1, double hi = 1) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    Array<double> a = Array<double>::from_shape(shape);
    for (auto& v : a) v = u(rng);
    return a;
}

/// Row-major strides of a shape.
inline std::vector<std::size_t> strides_of(const Shape& s) {
    std::vector<std::size_t> st(s.size(), 1);
    for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
}

/// Multi-index of flat position `flat` in `shape`.
inline std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
    std::vector<std::size_t> idx(shape.size());
    for (std::size_t i = shape.size(); i-- > 0;) {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    return idx;
}

template <class T>
Shape shape_of(const Array<T>& a) {
    return Shape(a.shape().begin(), a.shape().end());
}

/// Largest |a - b| (+inf on a shape mismatch; equal infinities count as equal).
template <class T>
double max_diff(const Array<T>& a, const Array<T>& b) {
    if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = a.data()[i], y = b.data()[i];
        if (x == y) continue;
        m = std::max(m, std::isnan(x - y) ? std::numeric_limits<double>::infinity() : std::abs(x - y));
    }
    return m;
}

/// Largest |a - b| / max(1, |b|); +inf on a shape mismatch or a NaN in one of them only.
inline double rel_diff(const Array<double>& a, const Array<double>& b) {
    if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = a.data()[i], y = b.data()[i];
        if (x == y || (std::isnan(x) && std::isnan(y))) continue;
        const double d = std::abs(x - y) / std::max(1.0, std::abs(y));
        m = std::max(m, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return m;
}

/// True when a and b have the same shape and the same bits (NaN equal to NaN).
template <class T>
bool same_bits(const Array<T>& a, const Array<T>& b) {
    return a.shape() == b.shape() && std::equal(a.begin(), a.end(), b.begin(), [](T x, T y) {
               return x == y ? std::signbit(x) == std::signbit(y) : std::isnan(x) && std::isnan(y);
           });
}

/// Checks `got` against a double reference of the same shape within `tol`, element by element.
template <class T>
void check_close(const Array<T>& got, const Shape& shape, const std::vector<double>& want, double tol) {
    BOOST_TEST_REQUIRE(shape_of(got) == shape);
    BOOST_TEST_REQUIRE(got.size() == want.size());
    double worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double d = std::abs(static_cast<double>(got.data()[i]) - want[i]);
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    BOOST_TEST(worst <= tol, "max |got - want| = " << worst << " at flat index " << at << " (got "
                                                   << static_cast<double>(got.data()[at]) << ", want " << want[at]
                                                   << ")");
}

/// Tolerance for comparing T results with a double reference (sums of ~k terms of size ~1).
template <class T>
double tol_for(std::size_t terms = 1) {
    return (std::is_same_v<T, float> ? 2e-6 : 1e-14) * static_cast<double>(terms + 1);
}

// ---- one op through its definition ---------------------------------------------------------

/// The op's definition (throws GraphError for an unknown op).
inline const OpDef& op_def(const std::string& op) {
    return OpRegistry::instance().get(op);
}

/// Parsed attributes of `op` from JSON (null: none given).
inline NodeAttrs op_attrs(const std::string& op, const nlohmann::json& j = nullptr) {
    return op_def(op).parse_attrs(j, "test node");
}

/// The op's shape rule on `in`.
inline std::vector<Shape> infer(const std::string& op, const nlohmann::json& attrs, const std::vector<Shape>& in) {
    return op_def(op).infer_shapes(op_attrs(op, attrs), in);
}

template <class T>
std::vector<Shape> shapes_of(const std::vector<Array<T>>& arrays) {
    std::vector<Shape> s;
    for (const auto& a : arrays) s.push_back(shape_of(a));
    return s;
}

/// Runs the op's forward on `inputs` (outputs shaped by its shape rule).
template <class T>
std::vector<Array<T>> forward_direct(const std::string& op, const nlohmann::json& attrs,
                                     const std::vector<Array<T>>& inputs) {
    const NodeAttrs a = op_attrs(op, attrs);
    std::vector<Array<T>> outs;
    for (const auto& s : op_def(op).infer_shapes(a, shapes_of(inputs))) outs.push_back(Array<T>::from_shape(s));
    std::vector<const Array<T>*> in;
    for (const auto& x : inputs) in.push_back(&x);
    std::vector<Array<T>*> out;
    for (auto& y : outs) out.push_back(&y);
    op_def(op).forward<T>()(a, In<T>(in), Out<T>(out));
    return outs;
}

/// Runs the op's backward for output gradients `douts` (null: none for that output): the
/// gradients of the inputs with needs[i] (the others are not asked for and come back
/// empty), each added onto an array filled with `start`.
template <class T>
std::vector<Array<T>> backward_direct(const std::string& op, const nlohmann::json& attrs,
                                      const std::vector<Array<T>>& inputs, const std::vector<const Array<T>*>& douts,
                                      const std::vector<bool>& needs, T start = T(0)) {
    const NodeAttrs a = op_attrs(op, attrs);
    const std::vector<Array<T>> outs = forward_direct<T>(op, attrs, inputs);
    std::vector<Array<T>> dins(inputs.size());
    std::vector<const Array<T>*> in, out;
    std::vector<Array<T>*> din;
    for (const auto& x : inputs) in.push_back(&x);
    for (const auto& y : outs) out.push_back(&y);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (needs[i]) dins[i] = Array<T>(inputs[i].shape(), start);
        din.push_back(needs[i] ? &dins[i] : nullptr);
    }
    op_def(op).backward<T>()(a, In<T>(in), In<T>(out), In<T>(douts), Out<T>(din));
    return dins;
}

// ---- one op through the executor -----------------------------------------------------------

/// A graph of one `op` node "y" over inputs "in0", "in1", ...; every output of the node is
/// an output of the graph ("y", or "y:0", "y:1", ...).
template <class T>
Graph op_graph(const std::string& op, const nlohmann::json& attrs, const std::vector<Array<T>>& inputs) {
    GraphBuilder g("one_" + op, dtype_of<T>());
    std::vector<Value> xs;
    for (std::size_t i = 0; i < inputs.size(); ++i) xs.push_back(g.input("in" + std::to_string(i), Tensor(inputs[i])));
    const NodeAttrs a = op_attrs(op, attrs);
    Value y = g.node(op, xs, a, "y");
    const std::size_t outputs = op_def(op).infer_shapes(a, shapes_of(inputs)).size();
    if (outputs == 1)
        g.output(y);
    else
        for (std::size_t k = 0; k < outputs; ++k) g.output(y[static_cast<int>(k)]);
    return g.build();
}

/// The outputs of a run of op_graph at `threads` threads.
template <class T>
std::vector<Array<T>> forward_graph(const std::string& op, const nlohmann::json& attrs,
                                    const std::vector<Array<T>>& inputs, int threads = 1) {
    const Graph graph = op_graph<T>(op, attrs, inputs);
    const RunResult r = executor_for(threads)->run(graph);
    std::vector<Array<T>> outs;
    for (int id : graph.outputs()) outs.push_back(r.values[static_cast<std::size_t>(id)]->template as<T>());
    return outs;
}

/// Runs `op` through its definition and through the executor at every thread count, checks
/// that they agree bit for bit, returns every output.
template <class T>
std::vector<Array<T>> forward_all(const std::string& op, const nlohmann::json& attrs,
                                  const std::vector<Array<T>>& inputs) {
    std::vector<Array<T>> direct = forward_direct<T>(op, attrs, inputs);
    for (int threads : thread_counts) {
        const std::vector<Array<T>> via_graph = forward_graph<T>(op, attrs, inputs, threads);
        BOOST_TEST_REQUIRE(via_graph.size() == direct.size());
        for (std::size_t k = 0; k < direct.size(); ++k)
            BOOST_TEST(same_bits(direct[k], via_graph[k]), op << ": output " << k
                                                              << " of the definition and of the executor at " << threads
                                                              << " threads differ");
    }
    return direct;
}

/// forward_all's first output.
template <class T>
Array<T> forward(const std::string& op, const nlohmann::json& attrs, const std::vector<Array<T>>& inputs) {
    return forward_all<T>(op, attrs, inputs).at(0);
}

/// Float64 arrays: an op's inputs or outputs.
using Doubles = std::vector<Array<double>>;

/// forward_all in `dtype` (the inputs converted to it), every output widened to f64.
inline Doubles run_one(const std::string& op, const nlohmann::json& attrs, const Doubles& inputs, DType dtype) {
    Doubles out;
    if (dtype == DType::f64) return forward_all<double>(op, attrs, inputs);
    std::vector<Array<float>> in32;
    for (const auto& x : inputs) in32.push_back(Tensor(x).cast(DType::f32).as<float>());
    for (const auto& y : forward_all<float>(op, attrs, in32)) out.push_back(Tensor(y).cast(DType::f64).as<double>());
    return out;
}

/// @brief Checks `op` on `inputs` against `expected`, a plain-loop reference computed in f64
/// by the test: through the definition and the executor at every thread count (forward_all),
/// the f64 outputs to `tol64` and the f32 outputs to `tol32`, relative (rel_diff).
inline void check_against_reference(const std::string& op, const nlohmann::json& attrs, const Doubles& inputs,
                                    const Doubles& expected, double tol64 = 1e-12, double tol32 = 1e-5) {
    const Doubles y64 = run_one(op, attrs, inputs, DType::f64);
    const Doubles y32 = run_one(op, attrs, inputs, DType::f32);
    BOOST_TEST_REQUIRE(y64.size() == expected.size());
    BOOST_TEST_REQUIRE(y32.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
        BOOST_TEST(rel_diff(y64[k], expected[k]) <= tol64, op << " output " << k << " f64");
        BOOST_TEST(rel_diff(y32[k], expected[k]) <= tol32, op << " output " << k << " f32");
    }
}

// ---- gradients -----------------------------------------------------------------------------

/// The executor's gradients of op_graph's inputs with needs[i], for output gradients G.
template <class T>
std::vector<Array<T>> executor_gradients(const Graph& graph, const std::map<std::string, Tensor>& G,
                                         const std::vector<std::string>& wrt, int threads) {
    const std::shared_ptr<Executor> ex = executor_for(threads);
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = ex->backward(graph, ex->run(graph, keep), G, wrt);
    std::vector<Array<T>> out;
    for (const auto& name : wrt) out.push_back(grads.at(name).template as<T>());
    return out;
}

/// The backward of `op` in T: through the definition (into zeros) and through the executor
/// at every thread count, bit for bit; in f64, through the definition into arrays holding 1,
/// the same gradient added on top (backward adds, +=). Returns the gradients of the inputs with
/// needs[i], in order.
template <class T>
std::vector<Array<T>> backward_all(const std::string& op, const nlohmann::json& attrs,
                                   const std::vector<Array<T>>& inputs, const std::vector<Array<double>>& G,
                                   const std::vector<bool>& needs) {
    const Graph graph = op_graph<T>(op, attrs, inputs);
    std::map<std::string, Tensor> G_by_name;
    std::vector<Array<T>> G_T;
    for (std::size_t k = 0; k < G.size(); ++k) {
        G_T.push_back(Tensor(G[k]).cast(dtype_of<T>()).template as<T>());
        G_by_name[graph.value(graph.outputs()[k]).name] = Tensor(G_T.back());
    }
    std::vector<const Array<T>*> douts;
    for (const auto& g : G_T) douts.push_back(&g);
    std::vector<std::string> wrt;
    for (std::size_t i = 0; i < inputs.size(); ++i)
        if (needs[i]) wrt.push_back("in" + std::to_string(i));

    const std::vector<Array<T>> direct = backward_direct<T>(op, attrs, inputs, douts, needs);
    const std::vector<Array<T>> ones = backward_direct<T>(op, attrs, inputs, douts, needs, T(1));
    std::vector<Array<T>> wanted;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (!needs[i]) continue;
        wanted.push_back(direct[i]);
        if constexpr (std::is_same_v<T, double>) {
            // (in f64 only: a sum of many terms rounds differently from 1 on, relative to its
            // size; an overwrite would be off by 1 whatever the size)
            Array<T> added = ones[i];
            for (auto& v : added) v -= T(1);
            double scale = 1;
            for (T v : direct[i]) scale = std::max(scale, std::abs(static_cast<double>(v)));
            BOOST_TEST(max_diff(added, direct[i]) <= 1e-11 * scale,
                       op << ": the backward into din = 1 is not 1 + its backward into zeros (in" << i << ")");
        }
    }
    for (int threads : thread_counts) {
        const std::vector<Array<T>> via_graph = executor_gradients<T>(graph, G_by_name, wrt, threads);
        for (std::size_t k = 0; k < wrt.size(); ++k)
            BOOST_TEST(same_bits(via_graph[k], wanted[k]), op << ": dL/d" << wrt[k]
                                                              << " of the definition and of the executor at " << threads
                                                              << " threads differ");
    }
    return wanted;
}

/// @brief The op's backward checked three ways for L = Σ_k Σ G_k ⊙ y_k with seeded random
/// G_k: against central finite differences (engine/gradcheck, float64, through the executor);
/// through its definition against the executor's backward at every thread count, bit for
/// bit, in f32 and f64; and that it adds (+=) into the gradients it is given. Only inputs
/// with needs[i] (default: the slots the op differentiates) get a gradient. Returns the finite-difference check's
/// max_rel_error (engine/gradcheck.hpp); +inf for an op without backward.
inline double gradcheck(const std::string& op, const nlohmann::json& attrs, const std::vector<Array<double>>& inputs,
                        std::vector<bool> needs = {}, double eps = 1e-6) {
    if (!op_def(op).backward<double>()) return std::numeric_limits<double>::infinity();
    if (needs.empty())  // every input slot the op differentiates
        for (std::size_t i = 0; i < inputs.size(); ++i) needs.push_back(op_def(op).has_grad(i));
    const Graph graph = op_graph<double>(op, attrs, inputs);
    GradcheckOptions o;
    o.eps = eps;
    std::vector<Array<double>> G;
    for (std::size_t k = 0; k < graph.outputs().size(); ++k) {
        const ValueInfo& y = graph.value(graph.outputs()[k]);
        G.push_back(random_array<double>(y.shape, 77 + k));
        o.output_grads[y.name] = Tensor(G.back());
    }
    for (std::size_t i = 0; i < inputs.size(); ++i)
        if (needs[i]) o.wrt.push_back("in" + std::to_string(i));
    const GradcheckResult r = attngraph::gradcheck(graph, o);
    BOOST_TEST_MESSAGE(op << " " << attrs.dump() << ": gradcheck\n" << r.report());

    std::vector<Array<float>> inputs_f32;
    for (const auto& x : inputs) inputs_f32.push_back(Tensor(x).cast(DType::f32).as<float>());
    backward_all<float>(op, attrs, inputs_f32, G, needs);
    const std::vector<Array<double>> analytic = backward_all<double>(op, attrs, inputs, G, needs);
    for (std::size_t k = 0; k < o.wrt.size(); ++k)
        BOOST_TEST(same_bits(analytic[k], r.at(o.wrt[k]).analytic.as<double>()),
                   op << ": gradcheck's analytic dL/d" << o.wrt[k] << " is not the backward's");
    return r.max_rel_error;
}

}  // namespace attngraph::test
