// Abs: shape rule, forward against hand-computed values and a plain loop (f64, f32;
// bit-identical at 1, 2, 4 and 8 threads), backward against the engine's gradcheck and
// against PyTorch's gradient at 0 and NaN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_abs)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Abs", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Abs", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Abs", {a, a}, op_attrs("Abs", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::abs(a).shape() == Shape{2, 3}));
    BOOST_TEST(abs(-2) == 2);  // the C function stays usable next to the op's
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles y = run_one("Abs", nullptr, {array_of({7}, {0, 1.5, -2, 3e-5, -1e-7, -inf, nan})}, dt);
        BOOST_TEST(y[0](0) == 0.0);
        BOOST_TEST(y[0](1) == 1.5);
        BOOST_TEST(y[0](2) == 2.0);
        BOOST_TEST(y[0](3) == static_cast<double>(dt == DType::f32 ? 3e-5f : 3e-5));
        BOOST_TEST(y[0](4) == static_cast<double>(dt == DType::f32 ? 1e-7f : 1e-7));
        BOOST_TEST(y[0](5) == inf);
        BOOST_TEST(std::isnan(y[0](6)));  // numpy.abs(nan) is nan
    }
    // -0 becomes +0 (numpy.abs(-0.0) is 0.0)
    const Doubles z = run_one("Abs", nullptr, {array_of({1}, {-0.0})}, DType::f64);
    BOOST_TEST(!std::signbit(z[0](0)));
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = in.data()[i] < 0 ? -in.data()[i] : in.data()[i];
    check_against_reference("Abs", nullptr, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (uniform values: none within the finite difference's step of the kink at 0)
    BOOST_TEST(gradcheck("Abs", nullptr, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_is_the_sign_and_zero_at_zero_and_nan) {
    // PyTorch 1.13: x = [nan, 0, -1, 2], x.abs().sum().backward() gives x.grad = [0, 0, -1, 1]
    const Array<double> x = array_of({4}, {nan, 0, -1, 2});
    const auto d = backward_all<double>("Abs", nullptr, {x}, {array_of({4}, {1, 1, 1, 1})}, {true});
    BOOST_TEST(rel_diff(d[0], array_of({4}, {0, 0, -1, 1})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
