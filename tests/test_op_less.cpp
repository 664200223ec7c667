// Less: shape rule (numpy broadcasting), forward against hand-computed values (ties included)
// and a plain loop (f64, f32; bit-identical at 1, 2 and 4 threads); no gradient: the engine's
// gradcheck perturbs neither input, and autodiff gives them none.
#include <boost/test/unit_test.hpp>

#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_less)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts) {
    BOOST_TEST((infer("Less", nullptr, {{4, 1}, {1, 5}})[0] == Shape{4, 5}));
    BOOST_CHECK_THROW(infer("Less", nullptr, {{2, 3}, {4}}), ShapeError);
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y =
        run_one("Less", nullptr, {array_of({4}, {1, 3, 2, 0.5}), array_of({4}, {2, 1, 2, -1})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({4}, {1, 0, 0, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // position indices: q_idx (60, 1) against kv_idx (81), integers so that ties occur
    Array<double> q = Array<double>::from_shape({60, 1}), kv = Array<double>::from_shape({81});
    for (std::size_t i = 0; i < 60; ++i) q(i, 0) = static_cast<double>(i % 40);
    for (std::size_t j = 0; j < 81; ++j) kv(j) = static_cast<double>(j / 2);
    Array<double> ref = Array<double>::from_shape({60, 81});
    for (std::size_t i = 0; i < 60; ++i)
        for (std::size_t j = 0; j < 81; ++j) ref(i, j) = q(i, 0) < kv(j) ? 1.0 : 0.0;
    check_against_reference("Less", nullptr, {q, kv}, {ref}, 0, 0);
    const Array<double> a = uniform_array({3, 50, 81}, 1), b = uniform_array({3, 50, 81}, 2);
    Array<double> same = a;
    for (std::size_t i = 0; i < a.size(); ++i) same.data()[i] = a.data()[i] < b.data()[i] ? 1.0 : 0.0;
    check_against_reference("Less", nullptr, {a, b}, {same}, 0, 0);
}

BOOST_AUTO_TEST_CASE(inputs_have_no_gradient) {
    const GradcheckResult r =
        gradcheck_op("Less", nullptr, {Tensor(uniform_array({2, 3}, 1)), Tensor(uniform_array({3}, 2))});
    BOOST_TEST(r.entries.empty());
    // x -> Less(x, t) -> Mul with x: dL/dx comes from the Mul alone
    GraphBuilder g("t", DType::f64);
    Value x = g.input("x", Tensor(array_of({3}, {1, 2, 3}))), t = g.input("t", Tensor(array_of({3}, {2, 2, 2})));
    g.output(attngraph::mul(attngraph::less(x, t), x).named("y"));
    const Graph graph = g.build();
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = backward(graph, run(graph, keep), {}, {});
    Array<double> mask = array_of({3}, {0, 0, 0});
    for (std::size_t i = 0; i < 3; ++i) mask(i) = (i + 1.0) < 2.0 ? 1.0 : 0.0;
    BOOST_TEST(rel_diff(grads.at("x").as<double>(), mask) == 0.0);
    BOOST_TEST(rel_diff(grads.at("t").as<double>(), array_of({3}, {0, 0, 0})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
