#pragma once
// Running one op as a graph (a single node over input tensors "in0", "in1", ...) through the
// executor, in f32 or f64, at a given thread count; and the engine's gradcheck on it. For the
// tests of the vocabulary ops (tests/test_op_<name>.cpp); the reference values come from
// plain loops written in each test.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/op.hpp"

namespace attngraph::test {

using Doubles = std::vector<Array<double>>;

/// Seeded uniform(lo, hi) values.
inline Array<double> uniform_array(const Shape& shape, unsigned seed, double lo = -1, double hi = 1) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    Array<double> a = Array<double>::from_shape(shape);
    for (auto& v : a) v = u(rng);
    return a;
}

/// `op`'s attributes parsed from JSON as a graph file gives them.
inline NodeAttrs op_attrs(const std::string& op, const nlohmann::json& attrs) {
    return OpRegistry::instance().get(op).parse_attrs(attrs, "test of " + op);
}

/// The outputs of one `op` node over `inputs`, computed in `dtype` at `threads` threads, as double.
inline Doubles run_one(const std::string& op, const nlohmann::json& attrs, const Doubles& inputs, DType dtype,
                       int threads = 1) {
    GraphBuilder g("one_" + op, dtype);
    std::vector<Value> in;
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(g.input("in" + std::to_string(i), Tensor(inputs[i]).cast(dtype)));
        shapes.emplace_back(inputs[i].shape().begin(), inputs[i].shape().end());
    }
    const NodeAttrs a = op_attrs(op, attrs);
    Value y = g.node(op, in, a, "y");
    const std::size_t outputs = OpRegistry::instance().get(op).infer_shapes(a, shapes).size();
    std::vector<std::string> names;
    for (std::size_t k = 0; k < outputs; ++k) {
        Value v = outputs == 1 ? y : y[static_cast<int>(k)];
        g.output(v);
        names.push_back(v.name());
    }
    const Graph graph = g.build();
    RunOptions o;
    o.threads = threads;
    const RunResult r = run(graph, o);
    Doubles out;
    for (const auto& name : names) out.push_back(r.at(graph, name).cast(DType::f64).as<double>());
    return out;
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

/// Whether two arrays hold the same bits (NaN equal to NaN).
inline bool same_bits(const Array<double>& a, const Array<double>& b) {
    if (a.shape() != b.shape()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = a.data()[i], y = b.data()[i];
        if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
        if (x == 0 && std::signbit(x) != std::signbit(y)) return false;
    }
    return true;
}

/// @brief Checks `op` on `inputs` against `expected` (plain-loop reference, f64): the f64 run
/// to `tol64`, the f32 run to `tol32`, and the f64 run at 1, 2 and 4 threads bit for bit.
inline void check_against_reference(const std::string& op, const nlohmann::json& attrs, const Doubles& inputs,
                                    const Doubles& expected, double tol64 = 1e-12, double tol32 = 1e-5) {
    const Doubles y64 = run_one(op, attrs, inputs, DType::f64, 1);
    const Doubles y32 = run_one(op, attrs, inputs, DType::f32, 1);
    BOOST_TEST_REQUIRE(y64.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
        BOOST_TEST(rel_diff(y64[k], expected[k]) <= tol64, op << " output " << k << " f64");
        BOOST_TEST(rel_diff(y32[k], expected[k]) <= tol32, op << " output " << k << " f32");
    }
    for (int threads : {2, 4}) {
        const Doubles yt = run_one(op, attrs, inputs, DType::f64, threads);
        for (std::size_t k = 0; k < expected.size(); ++k)
            BOOST_TEST(same_bits(yt[k], y64[k]), op << " output " << k << " at " << threads << " threads");
    }
}

/// The engine's gradcheck (f64, central differences) of one `op` node: the largest relative error.
inline double grad_error(const std::string& op, const nlohmann::json& attrs, const Doubles& inputs) {
    std::vector<Tensor> t;
    for (const auto& a : inputs) t.emplace_back(a);
    const GradcheckResult r = gradcheck_op(op, attrs, t);
    BOOST_TEST_MESSAGE(op << ":\n" << r.report());
    return r.max_rel_error;
}

/// The shapes `op` infers for inputs of `shapes` (throws its ShapeError).
inline std::vector<Shape> shapes_of(const std::string& op, const nlohmann::json& attrs,
                                    const std::vector<Shape>& shapes) {
    return OpRegistry::instance().get(op).infer_shapes(op_attrs(op, attrs), shapes);
}

/// An f64 array of `shape` holding `values` (row-major).
inline Array<double> values_of(const Shape& shape, const std::vector<double>& values) {
    Array<double> a = Array<double>::from_shape(shape);
    std::copy(values.begin(), values.end(), a.data());
    return a;
}

}  // namespace attngraph::test
