// Floor, Ceil, Round and Sign, the step functions (ops/elementwise.hpp's StepOp): shape rule,
// forward against hand-computed values (halves, ±0, ±inf, NaN, 1e30) and a plain loop of the C
// library's floor, ceil, nearbyint and of comparisons (f64, f32; bit-identical at 1, 2, 4 and 8
// threads); no gradient: the slot has none, and a graph through one gives its input none.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_step_functions)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();

struct StepFunction {
    const char* op;
    std::function<Value(const Value&)> build;
    std::vector<double> want;  // at `points` below
};

const std::vector<double> points = {2.5, -2.5, 0.5, -0.5, 1.5, 0.4, -0.4, 3, -0.0, 0, 1e30, -7.25, inf, -inf, nan};
const std::vector<StepFunction> step_functions = {
    // numpy.floor, numpy.ceil (−0.5, −0.4 and −0 give −0)
    {"Floor",
     [](const Value& x) { return attngraph::floor(x); },
     {2, -3, 0, -1, 1, 0, -1, 3, -0.0, 0, 1e30, -8, inf, -inf, nan}},
    {"Ceil",
     [](const Value& x) { return attngraph::ceil(x); },
     {3, -2, 1, -0.0, 2, 1, -0.0, 3, -0.0, 0, 1e30, -7, inf, -inf, nan}},
    // numpy.round and torch.round: halves to the even neighbour (C's round takes them away from 0)
    {"Round",
     [](const Value& x) { return attngraph::round(x); },
     {2, -2, 0, -0.0, 2, 0, -0.0, 3, -0.0, 0, 1e30, -7, inf, -inf, nan}},
    // numpy.sign: 0 at ±0 (+0 both), NaN at NaN (torch.sign gives 0 there)
    {"Sign", [](const Value& x) { return attngraph::sign(x); }, {1, -1, 1, -1, 1, 1, -1, 1, 0, 0, 1, -1, 1, -1, nan}},
};
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    for (const auto& s : step_functions) {
        BOOST_TEST((infer(s.op, nullptr, {{2, 3}})[0] == Shape{2, 3}), s.op);
        BOOST_TEST((infer(s.op, nullptr, {{}})[0] == Shape{}), s.op);
        GraphBuilder g("t");
        Value a = g.input("a", zeros(DType::f32, {2, 3}));
        BOOST_CHECK_THROW(g.node(s.op, {a, a}, op_attrs(s.op, nullptr), "two"), GraphError);
        BOOST_TEST((s.build(a).shape() == Shape{2, 3}), s.op);
        BOOST_TEST(!op_def(s.op).has_grad(0), s.op);
    }
    // the C functions stay usable next to the ops'
    BOOST_TEST(floor(2.5) == 2.0);
    BOOST_TEST(ceil(2.5) == 3.0);
    BOOST_TEST(round(2.5) == 3.0);
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    for (const auto& s : step_functions)
        for (DType dt : {DType::f64, DType::f32}) {
            const Doubles y = run_one(s.op, nullptr, {array_of({points.size()}, points)}, dt);
            for (std::size_t i = 0; i < points.size(); ++i) {
                // (f32 holds 1e30 only rounded: the input and the result are that float)
                const double got = y[0](i), w = dt == DType::f32 ? double(float(s.want[i])) : s.want[i];
                if (std::isnan(w))
                    BOOST_TEST(std::isnan(got), s.op << " " << i);
                else
                    BOOST_TEST((got == w && std::signbit(got) == std::signbit(w)), s.op << " " << i << ": " << got);
            }
        }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    auto loop = [&](double (*f)(double)) {
        Array<double> ref = in;
        for (double& v : ref) v = f(v);
        return ref;
    };
    check_against_reference("Floor", nullptr, {in}, {loop([](double v) { return std::floor(v); })});
    check_against_reference("Ceil", nullptr, {in}, {loop([](double v) { return std::ceil(v); })});
    check_against_reference("Round", nullptr, {in}, {loop([](double v) { return std::nearbyint(v); })});
    check_against_reference("Sign", nullptr, {in}, {loop([](double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; })});
}

BOOST_AUTO_TEST_CASE(a_graph_through_one_gives_its_input_no_gradient) {
    // y = f(x) + 3x: dy/dx is 3, from the second term only (torch's gradient of each f is 0)
    for (const auto& s : step_functions) {
        GraphBuilder g("t", DType::f64);
        Value x = g.input("x", Tensor(uniform_array({4}, 3, -3, 3)));
        g.output(add(s.build(x), scale(x, 3.0)).named("y"));
        const Graph graph = g.build();
        RunOptions keep;
        keep.keep_all = true;
        const Gradients grads = backward(graph, run(graph, keep));
        for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(grads.at("x").at_flat(i) == 3.0, s.op);
    }
}

BOOST_AUTO_TEST_SUITE_END()
