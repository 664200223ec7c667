// LeakyRelu: shape rule and attributes, forward against hand-computed values and a plain loop
// (f64, f32; bit-identical at 1, 2, 4 and 8 threads), backward against the engine's gradcheck
// and against PyTorch's gradient at 0 and NaN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_leaky_relu)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_and_attributes) {
    BOOST_TEST((infer("LeakyRelu", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("LeakyRelu", {{"alpha", 0.2}}, {{}})[0] == Shape{}));
    BOOST_CHECK_THROW(op_attrs("LeakyRelu", {{"alpha", "small"}}), GraphError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("LeakyRelu", {a, a}, op_attrs("LeakyRelu", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::leaky_relu(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({6}, {-2, -0.5, 0, 0.5, 3, nan});
    // the default alpha is ONNX's 0.01: -2 -> -0.02, -0.5 -> -0.005
    const Doubles y = run_one("LeakyRelu", nullptr, {x}, DType::f64);
    const std::vector<double> want = {-0.02, -0.005, 0, 0.5, 3};
    for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::abs(y[0](i) - want[i]) <= 1e-17, i);
    BOOST_TEST(std::isnan(y[0](5)));
    const Doubles y2 = run_one("LeakyRelu", {{"alpha", 0.25}}, {x}, DType::f32);
    const std::vector<double> want2 = {-0.5, -0.125, 0, 0.5, 3};
    for (std::size_t i = 0; i < want2.size(); ++i) BOOST_TEST(y2[0](i) == want2[i], i);
    BOOST_TEST(std::isnan(y2[0](5)));
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = in.data()[i] > 0 ? in.data()[i] : 0.1 * in.data()[i];
    check_against_reference("LeakyRelu", {{"alpha", 0.1}}, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (uniform values: none within the finite difference's step of the kink at 0)
    BOOST_TEST(gradcheck("LeakyRelu", nullptr, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
    BOOST_TEST(gradcheck("LeakyRelu", {{"alpha", 0.3}}, {uniform_array({2, 3, 4}, 3, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_is_alpha_at_zero_and_nan_as_torch) {
    // PyTorch 1.13: x = [nan, 0, -1, 2], leaky_relu(x, 0.1).sum().backward() gives
    // x.grad = [0.1, 0.1, 0.1, 1]
    const Array<double> x = array_of({4}, {nan, 0, -1, 2});
    const auto d = backward_all<double>("LeakyRelu", {{"alpha", 0.1}}, {x}, {array_of({4}, {1, 1, 1, 1})}, {true});
    BOOST_TEST(rel_diff(d[0], array_of({4}, {0.1, 0.1, 0.1, 1})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
