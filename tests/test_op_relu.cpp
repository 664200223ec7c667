// Relu: shape rule, forward against hand-computed values and a plain loop (f64, f32;
// bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_relu)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Relu", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Relu", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Relu", {a, a}, op_attrs("Relu", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::relu(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y = run_one("Relu", nullptr, {array_of({5}, {0, 1.5, -2, 3e-5, -1e-7})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({5}, {0, 1.5, 0, 3e-5, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = std::max(in.data()[i], 0.0);
    check_against_reference("Relu", nullptr, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (uniform values: none within the finite difference's step of the kink at 0)
    BOOST_TEST(gradcheck("Relu", nullptr, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
