// Erf: shape rule, forward against hand-computed values and a plain loop over std:: math
// (f64, f32; bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Erf", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Erf", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Erf", {a, a}, op_attrs("Erf", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::erf(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y = run_one("Erf", nullptr, {array_of({3}, {0, 1, -2})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({3}, {0, 0.8427007929497149, -0.9953222650189527})) < 1e-15);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double x = in.data()[i];
        ref.data()[i] = std::erf(x);
    }
    check_against_reference("Erf", nullptr, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Erf", nullptr, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
}
