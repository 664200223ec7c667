// Sigmoid: shape rule, forward against hand-computed values and a plain loop over std:: math
// (f64, f32; bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_sigmoid)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Sigmoid", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Sigmoid", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Sigmoid", {a, a}, op_attrs("Sigmoid", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::sigmoid(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // 1 / (1 + e^-x): 0.5 at 0; e^-2 = 0.1353352832366127; -40 gives 4.248354255291589e-18
    const Doubles y = run_one("Sigmoid", nullptr, {array_of({4}, {0, 2, -2, -40})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({4}, {0.5, 0.8807970779778823, 0.11920292202211755, 4.248354255291589e-18})) <
               1e-15);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -8, 8);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = 1 / (1 + std::exp(-in.data()[i]));
    check_against_reference("Sigmoid", nullptr, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Sigmoid", nullptr, {uniform_array({2, 3, 4}, 2, -4, 4)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
