// Softplus: shape rule, forward against values worked out to 40 digits (mpmath) and a plain
// loop (f64, f32; bit-identical at 1, 2, 4 and 8 threads) — large x without overflow, very
// negative x without flushing to 0 —, backward against the engine's gradcheck and against
// the logistic function's values.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_softplus)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();

// |got - want| <= rel·|want| + tiny element by element: relative also for the tiny values
// (rel_diff measures those against 1)
void check_relative(const Array<double>& got, const Array<double>& want, double rel, double tiny = 0) {
    BOOST_TEST_REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(std::abs(got(i) - want(i)) <= rel * std::abs(want(i)) + tiny,
                   i << ": " << got(i) << ", want " << want(i));
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Softplus", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Softplus", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Softplus", {a, a}, op_attrs("Softplus", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::softplus(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // ln(1 + e^x) to 40 digits (mpmath), rounded to double
    const Array<double> x = array_of({9}, {0, 1, -1, 2.5, -20, 30, -100, 800, -800});
    const Array<double> want =
        array_of({9}, {0.6931471805599453, 1.3132616875182228, 0.3132616875182228, 2.5788897342925496,
                       2.061153620314381e-09, 30.000000000000092, 3.720075976020836e-44, 800, 0});
    check_relative(run_one("Softplus", nullptr, {x}, DType::f64)[0], want, 1e-15);
    // f32: e^800 overflows float, the result must not (ln(1 + e^x) computed naively is inf);
    // e^-100 is a subnormal float (steps of 1.4e-45)
    check_relative(run_one("Softplus", nullptr, {x}, DType::f32)[0], want, 3e-7, 1.5e-45);
    const Doubles special = run_one("Softplus", nullptr, {array_of({3}, {inf, -inf, nan})}, DType::f64);
    BOOST_TEST(special[0](0) == inf);
    BOOST_TEST(special[0](1) == 0.0);
    BOOST_TEST(std::isnan(special[0](2)));
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -30, 30);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = std::log(1 + std::exp(in.data()[i]));
    check_against_reference("Softplus", nullptr, {in}, {ref}, 1e-12, 1e-6);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Softplus", nullptr, {uniform_array({2, 3, 4}, 2, -6, 6)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_is_the_logistic_function) {
    // d/dx ln(1 + e^x) = 1 / (1 + e^-x), to 40 digits (mpmath); tiny but not 0 far below 0
    const Array<double> x = array_of({7}, {0, 1, -1, 2.5, -20, 30, -100});
    const Array<double> want = array_of({7}, {0.5, 0.7310585786300049, 0.2689414213699951, 0.9241418199787564,
                                              2.0611536181902037e-09, 0.9999999999999064, 3.720075976020836e-44});
    const auto d = backward_all<double>("Softplus", nullptr, {x}, {array_of({7}, {1, 1, 1, 1, 1, 1, 1})}, {true});
    check_relative(d[0], want, 1e-15);
}

BOOST_AUTO_TEST_SUITE_END()
