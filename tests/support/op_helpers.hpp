#pragma once
// Helpers for the per-op tests: literal and random arrays, running one op directly through
// its OpDef and through the executor, and plain-loop index arithmetic for the references.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/op.hpp"
#include "engine/tensor.hpp"

namespace attngraph::test {

/// Parsed attributes of `op` from JSON (null: none given).
inline std::any op_attrs(const std::string& op, const nlohmann::json& j = nullptr) {
    return OpRegistry::instance().get(op).parse_attrs(j, "test node");
}

/// The op's shape rule on `in`, attributes given as JSON.
inline std::vector<Shape> infer(const std::string& op, const nlohmann::json& attrs, const std::vector<Shape>& in) {
    return OpRegistry::instance().get(op).infer_shapes(op_attrs(op, attrs), in);
}

/// An array of `shape` holding `values` in row-major order.
template <class T>
Array<T> literal(const Shape& shape, const std::vector<double>& values) {
    Array<T> a = Array<T>::from_shape(shape);
    BOOST_REQUIRE_EQUAL(a.size(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) a.data()[i] = static_cast<T>(values[i]);
    return a;
}

/// Uniform(-1, 1) values from a seeded std::mt19937_64.
template <class T>
Array<T> random_array(const Shape& shape, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    Array<T> a = Array<T>::from_shape(shape);
    for (auto& v : a) v = static_cast<T>(dist(rng));
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

/// Runs `op` on `inputs` directly through OpDef::forward (outputs shaped by the shape rule).
template <class T>
std::vector<Array<T>> forward_direct(const std::string& op, const nlohmann::json& attrs,
                                     const std::vector<Array<T>>& inputs) {
    const OpDef& def = OpRegistry::instance().get(op);
    const std::any a = op_attrs(op, attrs);
    std::vector<Shape> shapes;
    for (const auto& x : inputs) shapes.emplace_back(x.shape().begin(), x.shape().end());
    const std::vector<Shape> out_shapes = def.infer_shapes(a, shapes);
    std::vector<Array<T>> outs;
    for (const auto& s : out_shapes) outs.push_back(Array<T>::from_shape(s));
    std::vector<const Array<T>*> in;
    for (const auto& x : inputs) in.push_back(&x);
    std::vector<Array<T>*> out;
    for (auto& y : outs) out.push_back(&y);
    def.forward<T>()(a, In<T>(in), Out<T>(out));
    return outs;
}

/// Runs `op` on `inputs` as a one-node graph through GraphBuilder and the executor.
template <class T>
Array<T> forward_graph(const std::string& op, const nlohmann::json& attrs, const std::vector<Array<T>>& inputs,
                       int threads = 1) {
    GraphBuilder g("one_" + op, dtype_of<T>());
    std::vector<Value> xs;
    for (std::size_t i = 0; i < inputs.size(); ++i) xs.push_back(g.input("x" + std::to_string(i), Tensor(inputs[i])));
    g.output(g.node(op, xs, op_attrs(op, attrs), "y"));
    const Graph graph = g.build();
    RunOptions o;
    o.threads = threads;
    const RunResult r = run(graph, o);
    return r.at(graph, "y").template as<T>();
}

/// Runs `op` both ways, checks that they agree bit for bit, returns the result.
template <class T>
Array<T> forward(const std::string& op, const nlohmann::json& attrs, const std::vector<Array<T>>& inputs) {
    Array<T> direct = forward_direct<T>(op, attrs, inputs).at(0);
    const Array<T> via_graph = forward_graph<T>(op, attrs, inputs);
    BOOST_TEST((Tensor(direct) == Tensor(via_graph)), op << ": OpDef::forward and the executor differ");
    return direct;
}

/// Checks `got` against a double reference of the same shape within `tol`, element by element.
template <class T>
void check_close(const Array<T>& got, const Shape& shape, const std::vector<double>& want, double tol) {
    BOOST_TEST_REQUIRE(Shape(got.shape().begin(), got.shape().end()) == shape);
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

}  // namespace attngraph::test
