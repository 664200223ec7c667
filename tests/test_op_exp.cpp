// Exp: shape rule, forward against hand-computed values and a plain loop over std:: math
// (f64, f32; bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_exp)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("Exp", nullptr, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Exp", nullptr, {{}})[0] == Shape{}));
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Exp", {a, a}, op_attrs("Exp", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::exp(a).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y = run_one("Exp", nullptr, {array_of({3}, {0, 1, -1})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({3}, {1, 2.718281828459045, 0.36787944117144233})) < 1e-15);
}

// NaN, ±inf and magnitudes past what float or double can hold: std::exp's answers, and no
// undefined path through xsimd's exp (UBSan, in the asan build, reports one)
BOOST_AUTO_TEST_CASE(non_finite_and_huge_arguments) {
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> x = {nan, inf, -inf, 1e30, -1e30, 1000, -1000, 700, -745, 88, -103, 0.5};
    for (DType dtype : {DType::f64, DType::f32}) BOOST_TEST_CONTEXT(to_string(dtype)) {
            const Doubles y = run_one("Exp", nullptr, {array_of({x.size()}, x)}, dtype);
            for (std::size_t i = 0; i < x.size(); ++i) {
                const double in = dtype == DType::f32 ? static_cast<double>(static_cast<float>(x[i])) : x[i];
                const double want =
                    dtype == DType::f32 ? static_cast<double>(std::exp(static_cast<float>(in))) : std::exp(in);
                const double got = y[0].data()[i];
                if (std::isnan(want) || std::isinf(want))
                    BOOST_TEST((std::isnan(want) ? std::isnan(got) : got == want), "exp(" << x[i] << ") = " << got);
                else  // (subnormal results may flush to 0)
                    BOOST_TEST(std::abs(got - want) <= 4e-7 * want + (dtype == DType::f32 ? 1e-37 : 1e-300),
                               "exp(" << x[i] << ") = " << got);
            }
        }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -3, 3);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double x = in.data()[i];
        ref.data()[i] = std::exp(x);
    }
    check_against_reference("Exp", nullptr, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Exp", nullptr, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
