// CumSum: shape rule, forward against hand-computed sums (every combination of exclusive and
// reverse; inf and NaN as numpy.cumsum has them) and a plain loop along each axis of a 3-D
// array (f64, f32; bit-identical at 1, 2, 4 and 8 threads), backward against the engine's
// gradcheck and against torch.cumsum's gradient.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_cumsum)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();

json attrs(int axis, bool exclusive = false, bool reverse = false) {
    return {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_keeps_the_shape) {
    BOOST_TEST((infer("CumSum", attrs(1), {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("CumSum", attrs(-3), {{2, 3, 4}})[0] == Shape{2, 3, 4}));
    BOOST_CHECK_THROW(infer("CumSum", attrs(2), {{2, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("CumSum", attrs(0), {{}}), ShapeError);  // a scalar has no axis
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_TEST((attngraph::cumsum(a, -1, true, true).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // ONNX CumSum's examples: x = [1, 2, 3, 4, 5]
    const Array<double> x = array_of({5}, {1, 2, 3, 4, 5});
    for (DType dt : {DType::f64, DType::f32}) {
        BOOST_TEST(rel_diff(run_one("CumSum", attrs(0), {x}, dt)[0], array_of({5}, {1, 3, 6, 10, 15})) == 0.0);
        BOOST_TEST(rel_diff(run_one("CumSum", attrs(0, true), {x}, dt)[0], array_of({5}, {0, 1, 3, 6, 10})) == 0.0);
        BOOST_TEST(rel_diff(run_one("CumSum", attrs(0, false, true), {x}, dt)[0], array_of({5}, {15, 14, 12, 9, 5})) ==
                   0.0);
        BOOST_TEST(rel_diff(run_one("CumSum", attrs(0, true, true), {x}, dt)[0], array_of({5}, {14, 12, 9, 5, 0})) ==
                   0.0);
    }
    // along axis 0 of (2, 3): the columns' sums
    const Array<double> m = array_of({2, 3}, {1, 2, 3, 4, 5, 6});
    BOOST_TEST(rel_diff(run_one("CumSum", attrs(0), {m}, DType::f64)[0], array_of({2, 3}, {1, 2, 3, 5, 7, 9})) == 0.0);
    // numpy.cumsum([1, inf, 2, nan, 3]) = [1, inf, inf, nan, nan]: an inf stays inf, a NaN
    // spoils only what follows it
    const Doubles y = run_one("CumSum", attrs(0), {array_of({5}, {1, inf, 2, nan, 3})}, DType::f32);
    BOOST_TEST(y[0](0) == 1.0);
    BOOST_TEST(y[0](1) == inf);
    BOOST_TEST(y[0](2) == inf);
    BOOST_TEST(std::isnan(y[0](3)));
    BOOST_TEST(std::isnan(y[0](4)));
    const Doubles r = run_one("CumSum", attrs(0, false, true), {array_of({4}, {1, nan, 2, 3})}, DType::f64);
    BOOST_TEST((std::isnan(r[0](0)) && std::isnan(r[0](1)) && r[0](2) == 5.0 && r[0](3) == 3.0));
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // (3, 300, 41) summed along each axis: axis 2's lines are contiguous, axis 1 has 41 columns
    // of 300, axis 0 has 12,300 columns in blocks; every flag combination. The values are
    // multiples of 1/8 in [-2, 2], so every running sum (|sum| <= 600) is exact in f32 as well:
    // both dtypes must give the loop's numbers exactly
    const Shape s = {3, 300, 41};
    Array<double> x = uniform_array(s, 1, -2, 2);
    for (double& v : x) v = std::round(v * 8) / 8;
    const std::size_t strides[3] = {300 * 41, 41, 1};
    for (int axis = 0; axis < 3; ++axis)
        for (bool exclusive : {false, true})
            for (bool reverse : {false, true}) {
                Array<double> ref = x;
                const std::size_t len = s[static_cast<std::size_t>(axis)], st = strides[axis];
                for (std::size_t i = 0; i < x.size(); ++i) {
                    const std::size_t pos = (i / st) % len;
                    const std::size_t start = i - pos * st;  // the line's first element
                    double sum = 0;
                    for (std::size_t j = 0; j < len; ++j) {
                        const bool in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
                        if (in) sum += x.data()[start + j * st];
                    }
                    ref.data()[i] = sum;
                }
                check_against_reference("CumSum", attrs(axis, exclusive, reverse), {x}, {ref}, 0, 0);
            }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("CumSum", attrs(1), {uniform_array({2, 5, 3}, 2)}) < 1e-8);
    BOOST_TEST(gradcheck("CumSum", attrs(0, true, true), {uniform_array({4, 3}, 3)}) < 1e-8);
    BOOST_TEST(gradcheck("CumSum", attrs(-1, false, true), {uniform_array({3, 6}, 4)}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_is_torchs) {
    // PyTorch 1.13: x = [[1, 2, 3], [4, 5, 6]], G = [[1, 10, 100], [1000, 1e4, 1e5]];
    // torch.cumsum(x, 1).backward(G): [[111, 110, 100], [111000, 110000, 100000]];
    // torch.cumsum(x, 0).backward(G): [[1001, 10010, 100100], [1000, 10000, 100000]]
    const Array<double> x = array_of({2, 3}, {1, 2, 3, 4, 5, 6});
    const Array<double> G = array_of({2, 3}, {1, 10, 100, 1000, 1e4, 1e5});
    BOOST_TEST(rel_diff(backward_all<double>("CumSum", attrs(1), {x}, {G}, {true})[0],
                        array_of({2, 3}, {111, 110, 100, 111000, 110000, 100000})) == 0.0);
    BOOST_TEST(rel_diff(backward_all<double>("CumSum", attrs(0), {x}, {G}, {true})[0],
                        array_of({2, 3}, {1001, 10010, 100100, 1000, 10000, 100000})) == 0.0);
    // exclusive and reverse by hand: y = [x1 + x2, x2, 0] along the row, so dx = [0, g0, g0 + g1]
    BOOST_TEST(rel_diff(backward_all<double>("CumSum", attrs(1, true, true), {x}, {G}, {true})[0],
                        array_of({2, 3}, {0, 1, 11, 0, 1000, 11000})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
