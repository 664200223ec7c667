// Max: shape rule (numpy broadcasting), forward against hand-computed values (NaN, ties) and a
// plain loop with broadcasting (f64, f32; bit-identical at 1, 2, 4 and 8 threads), backward
// against the engine's gradcheck and against torch.maximum's gradient on ties and NaN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_max)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts) {
    BOOST_TEST((infer("Max", nullptr, {{2, 3}, {3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Max", nullptr, {{2, 1, 4}, {3, 1}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("Max", nullptr, {{}, {5}})[0] == Shape{5}));
    BOOST_CHECK_THROW(infer("Max", nullptr, {{2, 3}, {4}}), ShapeError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    Value b = g.input("b", zeros(DType::f32, {3}));
    BOOST_CHECK_THROW(g.node("Max", {a}, op_attrs("Max", nullptr), "one"), GraphError);
    BOOST_TEST((attngraph::maximum(a, b).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // numpy.maximum: a NaN on either side gives NaN
    const Array<double> a = array_of({2, 3}, {1, -2, 3, nan, 0.5, -1});
    const Array<double> b = array_of({3}, {2, -3, nan});
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles y = run_one("Max", nullptr, {a, b}, dt);
        const std::vector<double> want = {2, -2, nan, nan, 0.5, nan};
        for (std::size_t i = 0; i < want.size(); ++i)
            if (std::isnan(want[i]))
                BOOST_TEST(std::isnan(y[0].data()[i]), i);
            else
                BOOST_TEST(y[0].data()[i] == want[i], i);
        const Doubles z = run_one("Max", nullptr, {b, a}, dt);  // NaN from either operand
        for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::isnan(z[0].data()[i]) == std::isnan(want[i]), i);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements (several fixed chunks) broadcast against a row and against a column
    const Array<double> x = uniform_array({3, 50, 81}, 1, -4, 4);
    const Array<double> row = uniform_array({81}, 2, -4, 4), col = uniform_array({50, 1}, 3, -4, 4);
    Array<double> by_row = x, by_col = x;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = x.data()[i], r = row.data()[i % 81], c = col.data()[(i / 81) % 50];
        by_row.data()[i] = v > r ? v : r;
        by_col.data()[i] = c > v ? c : v;
    }
    check_against_reference("Max", nullptr, {x, row}, {by_row}, 0, 1e-6);
    check_against_reference("Max", nullptr, {col, x}, {by_col}, 0, 1e-6);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (random values: no ties; the broadcast operand's gradient sums over its broadcast axes)
    BOOST_TEST(gradcheck("Max", nullptr, {uniform_array({2, 3, 4}, 2), uniform_array({3, 4}, 3)}) < 1e-7);
    BOOST_TEST(gradcheck("Max", nullptr, {uniform_array({2, 1, 4}, 4), uniform_array({3, 1}, 5)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_splits_ties_and_gives_nan_to_both_as_torch) {
    // PyTorch 1.13: a = [1, 2, nan, 3, 1], b = [1, 3, 1, nan, 0], torch.maximum(a, b).sum()
    // .backward() gives a.grad = [0.5, 0, 1, 1, 1], b.grad = [0.5, 1, 1, 1, 0]
    const Array<double> a = array_of({5}, {1, 2, nan, 3, 1}), b = array_of({5}, {1, 3, 1, nan, 0});
    const auto d = backward_all<double>("Max", nullptr, {a, b}, {array_of({5}, {1, 1, 1, 1, 1})}, {true, true});
    BOOST_TEST(rel_diff(d[0], array_of({5}, {0.5, 0, 1, 1, 1})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({5}, {0.5, 1, 1, 1, 0})) == 0.0);
    // broadcast: b = 2 against a = [1, 2, 3] gets 0 + 0.5 + 0 = 0.5 of dy = 1 each
    const auto e = backward_all<double>("Max", nullptr, {array_of({3}, {1, 2, 3}), array_of({1}, {2})},
                                        {array_of({3}, {1, 1, 1})}, {true, true});
    BOOST_TEST(rel_diff(e[0], array_of({3}, {0, 0.5, 1})) == 0.0);
    BOOST_TEST(rel_diff(e[1], array_of({1}, {1.5})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
