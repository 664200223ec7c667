// ReduceSum: shape rule (ONNX axes / keepdims / noop_with_empty_axes), forward against
// hand-computed values and a plain loop (f64, f32; bit-identical at 1, 2 and 4 threads),
// backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_reduce_sum)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("ReduceSum", nullptr, {{2, 3, 4}})[0] == Shape{1, 1, 1}));
    BOOST_TEST((infer("ReduceSum", {{"keepdims", 0}}, {{2, 3, 4}})[0] == Shape{}));
    BOOST_TEST((infer("ReduceSum", {{"axes", {1}}}, {{2, 3, 4}})[0] == Shape{2, 1, 4}));
    BOOST_TEST((infer("ReduceSum", {{"axes", {-1, 0}}, {"keepdims", 0}}, {{2, 3, 4}})[0] == Shape{3}));
    BOOST_TEST(
        (infer("ReduceSum", {{"axes", json::array()}, {"noop_with_empty_axes", 1}}, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_CHECK_THROW(infer("ReduceSum", {{"axes", {3}}}, {{2, 3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("ReduceSum", {{"axes", {1, -2}}}, {{2, 3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("ReduceSum", {{"keepdims", 2}}, {{2, 3}}), ShapeError);
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {2, 3}));
    BOOST_TEST((attngraph::reduce_sum(x, {0}, false).shape() == Shape{3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({2, 3}, {1, 2, 3, 4, 5, 6});
    BOOST_TEST(rel_diff(run_one("ReduceSum", {{"axes", {0}}, {"keepdims", 0}}, {x}, DType::f64)[0],
                        array_of({3}, {5, 7, 9})) < 1e-15);
    BOOST_TEST(rel_diff(run_one("ReduceSum", {{"axes", {1}}}, {x}, DType::f64)[0], array_of({2, 1}, {6, 15})) < 1e-15);
    BOOST_TEST(rel_diff(run_one("ReduceSum", nullptr, {x}, DType::f64)[0], array_of({1, 1}, {21})) < 1e-15);
    BOOST_TEST(rel_diff(run_one("ReduceSum", {{"noop_with_empty_axes", 1}}, {x}, DType::f64)[0], x) == 0.0);
}

// y[kept] = sum over the axes listed, by plain nested loops over a (A, B, C) array
Array<double> reference(const Array<double>& x, bool r0, bool r1, bool r2) {
    const std::size_t A = x.shape()[0], B = x.shape()[1], C = x.shape()[2];
    Array<double> y = Array<double>::from_shape({r0 ? 1 : A, r1 ? 1 : B, r2 ? 1 : C});
    for (std::size_t i = 0; i < y.shape()[0]; ++i)
        for (std::size_t j = 0; j < y.shape()[1]; ++j)
            for (std::size_t k = 0; k < y.shape()[2]; ++k) {
                double s = 0.0;
                double count = 0;
                for (std::size_t a = 0; a < A; ++a)
                    for (std::size_t b = 0; b < B; ++b)
                        for (std::size_t c = 0; c < C; ++c) {
                            if ((!r0 && a != i) || (!r1 && b != j) || (!r2 && c != k)) continue;
                            const double v = x(a, b, c);
                            s += v;
                            ++count;
                        }
                (void)count;
                y(i, j, k) = s;
            }
    return y;
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> x = uniform_array({40, 30, 50}, 1);
    check_against_reference("ReduceSum", {{"axes", {-1}}}, {x}, {reference(x, false, false, true)}, 1e-12, 1e-5);
    check_against_reference("ReduceSum", {{"axes", {0, 2}}}, {x}, {reference(x, true, false, true)}, 1e-12, 1e-5);
    check_against_reference("ReduceSum", {{"axes", {1}}}, {x}, {reference(x, false, true, false)}, 1e-12, 1e-5);
    check_against_reference("ReduceSum", nullptr, {x}, {reference(x, true, true, true)}, 1e-11, 1e-4);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    const Array<double> x = uniform_array({2, 3, 4}, 2);  // distinct values: no ties
    BOOST_TEST(gradcheck("ReduceSum", nullptr, {x}) < 1e-7);
    BOOST_TEST(gradcheck("ReduceSum", {{"axes", {1}}, {"keepdims", 0}}, {x}) < 1e-7);
    BOOST_TEST(gradcheck("ReduceSum", {{"axes", {0, -1}}}, {x}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
