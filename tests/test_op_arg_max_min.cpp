// ArgMax and ArgMin (ops/reduce.hpp's ArgReduceOp): shape rule, forward against hand-computed
// positions (ties first or last, NaN as numpy counts it, keepdims, every axis) and a plain loop
// (f64, f32; bit-identical at 1, 2, 4 and 8 threads); no gradient.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_arg_max_min)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
json attrs(int axis, int keepdims = 1, int last = 0) {
    return {{"axis", axis}, {"keepdims", keepdims}, {"select_last_index", last}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_drops_or_keeps_the_axis) {
    for (const char* op : {"ArgMax", "ArgMin"}) {
        BOOST_TEST((infer(op, attrs(1), {{2, 3, 4}})[0] == Shape{2, 1, 4}), op);
        BOOST_TEST((infer(op, attrs(-1, 0), {{2, 3, 4}})[0] == Shape{2, 3}), op);
        BOOST_TEST((infer(op, attrs(0, 0), {{5}})[0] == Shape{}), op);
        BOOST_CHECK_THROW(infer(op, attrs(3), {{2, 3, 4}}), ShapeError);
        BOOST_CHECK_THROW(infer(op, attrs(0, 2), {{2, 3}}), ShapeError);
        BOOST_CHECK_THROW(infer(op, attrs(0), {{}}), ShapeError);
        BOOST_TEST(!op_def(op).has_grad(0), op);
    }
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {2, 3}));
    BOOST_TEST((argmax(x, 1, false).shape() == Shape{2}));
    BOOST_TEST((argmin(x, 0).shape() == Shape{1, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // rows: a tie of maxima at 1 and 3 (and of minima at 0 and 2); a NaN at 2 (numpy: 2 for
    // both); NaNs at 0 and 3; all equal
    const Array<double> x = array_of({4, 4}, {1, 5, 1, 5, -2, 3, nan, 9, nan, 0, 1, nan, 7, 7, 7, 7});
    struct Want {
        const char* op;
        int last;
        std::vector<double> positions;
    };
    for (const Want& w : {Want{"ArgMax", 0, {1, 2, 0, 0}}, Want{"ArgMax", 1, {3, 2, 3, 3}},
                          Want{"ArgMin", 0, {0, 2, 0, 0}}, Want{"ArgMin", 1, {2, 2, 3, 3}}})
        for (DType dt : {DType::f64, DType::f32})
            BOOST_TEST(rel_diff(run_one(w.op, attrs(1, 0, w.last), {x}, dt)[0], array_of({4}, w.positions)) == 0.0,
                       w.op << " select_last_index " << w.last);
    // along axis 0 of a (3, 2): columns [4, -1, 4] and [0, 2, -5]
    const Array<double> c = array_of({3, 2}, {4, 0, -1, 2, 4, -5});
    BOOST_TEST(rel_diff(run_one("ArgMax", attrs(0), {c}, DType::f64)[0], array_of({1, 2}, {0, 1})) == 0.0);
    BOOST_TEST(rel_diff(run_one("ArgMin", attrs(0), {c}, DType::f64)[0], array_of({1, 2}, {1, 2})) == 0.0);
    BOOST_TEST(rel_diff(run_one("ArgMax", attrs(0, 1, 1), {c}, DType::f64)[0], array_of({1, 2}, {2, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // (3, 50, 81) along each axis; values rounded to halves, so that ties occur
    Array<double> x = uniform_array({3, 50, 81}, 1, -4, 4);
    for (double& v : x) v = std::round(v * 2) / 2;
    const std::size_t dims[3] = {3, 50, 81}, strides[3] = {50 * 81, 81, 1};
    for (int axis = 0; axis < 3; ++axis) {
        const std::size_t len = dims[axis], st = strides[axis];
        Shape ys = {3, 50, 81};
        ys[static_cast<std::size_t>(axis)] = 1;
        Array<double> mx = Array<double>::from_shape(ys), mn = Array<double>::from_shape(ys);
        std::size_t r = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            if ((i / st) % len != 0) continue;  // i: the first element of a line along the axis
            std::size_t bmax = 0, bmin = 0;
            for (std::size_t j = 1; j < len; ++j) {
                if (x.data()[i + j * st] > x.data()[i + bmax * st]) bmax = j;
                if (x.data()[i + j * st] < x.data()[i + bmin * st]) bmin = j;
            }
            mx.data()[r] = double(bmax);
            mn.data()[r++] = double(bmin);
        }
        check_against_reference("ArgMax", attrs(axis), {x}, {mx}, 0, 0);
        check_against_reference("ArgMin", attrs(axis), {x}, {mn}, 0, 0);
    }
}

BOOST_AUTO_TEST_SUITE_END()
