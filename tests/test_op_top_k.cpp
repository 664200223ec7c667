// TopK: shape rule, forward against hand-computed picks (ties by position, NaN above every
// number, smallest), a plain loop along each axis (f64, f32; bit-identical at 1, 2, 4 and 8
// threads), backward against the engine's gradcheck and torch.topk's gradient.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_top_k)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
json attrs(int k, int axis = -1, int largest = 1) {
    return {{"k", k}, {"axis", axis}, {"largest", largest}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_cuts_the_axis_to_k) {
    const auto s = infer("TopK", attrs(2), {{3, 5}});
    BOOST_TEST_REQUIRE(s.size() == 2u);
    BOOST_TEST((s[0] == Shape{3, 2} && s[1] == Shape{3, 2}));
    BOOST_TEST((infer("TopK", attrs(3, 0), {{3, 5}})[1] == Shape{3, 5}));
    BOOST_CHECK_THROW(infer("TopK", attrs(0), {{3, 5}}), ShapeError);
    BOOST_CHECK_THROW(infer("TopK", attrs(6), {{3, 5}}), ShapeError);
    BOOST_CHECK_THROW(infer("TopK", attrs(1, 2), {{3, 5}}), ShapeError);
    BOOST_CHECK_THROW(infer("TopK", attrs(1), {{}}), ShapeError);
    BOOST_CHECK_THROW(infer("TopK", {{"axis", 0}}, {{3, 5}}), GraphError);  // k is required
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {4, 6}));
    const auto picked = topk(x, 2, 0, false);
    BOOST_TEST((picked[0].shape() == Shape{2, 6} && picked[1].shape() == Shape{2, 6}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // rows: [3, 1, 3, 2] (a tie: position 0 first), [nan, 5, -1, nan] (NaN above every number:
    // the NaNs first by position; last for the smallest)
    const Array<double> x = array_of({2, 4}, {3, 1, 3, 2, nan, 5, -1, nan});
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles big = run_one("TopK", attrs(3), {x}, dt);
        BOOST_TEST(rel_diff(big[1], array_of({2, 3}, {0, 2, 3, 0, 3, 1})) == 0.0);
        BOOST_TEST(rel_diff(big[0], array_of({2, 3}, {3, 3, 2, nan, nan, 5})) == 0.0);
        const Doubles small = run_one("TopK", attrs(3, 1, 0), {x}, dt);
        BOOST_TEST(rel_diff(small[1], array_of({2, 3}, {1, 3, 0, 2, 1, 0})) == 0.0);
        BOOST_TEST(rel_diff(small[0], array_of({2, 3}, {1, 2, 3, -1, 5, nan})) == 0.0);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // (3, 50, 81) along each axis, k = 5 (3 along the first); halves, so that ties occur
    Array<double> x = uniform_array({3, 50, 81}, 1, -4, 4);
    for (double& v : x) v = std::round(v * 2) / 2;
    const std::size_t dims[3] = {3, 50, 81}, strides[3] = {50 * 81, 81, 1};
    for (int axis = 0; axis < 3; ++axis)
        for (int largest : {1, 0}) {
            const std::size_t len = dims[axis], st = strides[axis], k = std::min<std::size_t>(5, len);
            Shape ys = {3, 50, 81};
            ys[static_cast<std::size_t>(axis)] = k;
            Array<double> vals = Array<double>::from_shape(ys), pos = Array<double>::from_shape(ys);
            for (std::size_t i = 0; i < x.size(); ++i) {
                if ((i / st) % len != 0) continue;  // i: a line's first element
                std::vector<std::size_t> order(len);
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
                    return largest ? x.data()[i + a * st] > x.data()[i + b * st]
                                   : x.data()[i + a * st] < x.data()[i + b * st];
                });
                // the output line: the same outer and inner coordinates, the axis cut to k
                const std::size_t outer = i / (len * st), inner = i % st;
                for (std::size_t j = 0; j < k; ++j) {
                    const std::size_t at = (outer * k + j) * st + inner;
                    vals.data()[at] = x.data()[i + order[j] * st];
                    pos.data()[at] = double(order[j]);
                }
            }
            check_against_reference("TopK", attrs(static_cast<int>(k), axis, largest), {x}, {vals, pos}, 0, 0);
        }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (distinct random values: no tie for the finite difference's step to flip)
    BOOST_TEST(gradcheck("TopK", attrs(2), {uniform_array({3, 5}, 2)}) < 1e-8);
    BOOST_TEST(gradcheck("TopK", attrs(2, 0, 0), {uniform_array({4, 3}, 3)}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_is_torchs) {
    // PyTorch 1.13: x = [[3, 1, 3, 2]], v, i = torch.topk(x, 3); (v * [1, 10, 100]).sum()
    // .backward() gives x.grad = [[1, 0, 10, 100]]
    const Array<double> x = array_of({1, 4}, {3, 1, 3, 2});
    const auto d = backward_all<double>("TopK", attrs(3), {x},
                                        {array_of({1, 3}, {1, 10, 100}), array_of({1, 3}, {7, 7, 7})}, {true});
    BOOST_TEST(rel_diff(d[0], array_of({1, 4}, {1, 0, 10, 100})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
