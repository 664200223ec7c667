// RMSNormalization: shape rule (ONNX: axis to the last normalized; scale broadcasts to the
// normalized shape), forward against hand-computed values and a plain loop (f64, f32;
// bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_rms_normalization)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("RMSNormalization", nullptr, {{2, 3, 4}, {4}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("RMSNormalization", {{"axis", 1}}, {{2, 3, 4}, {3, 4}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("RMSNormalization", {{"axis", -2}}, {{2, 3, 4}, {1, 4}})[0] == Shape{2, 3, 4}));
    BOOST_CHECK_THROW(infer("RMSNormalization", nullptr, {{2, 3, 4}, {3}}), ShapeError);
    BOOST_CHECK_THROW(infer("RMSNormalization", nullptr, {{2, 3, 4}, {2, 4}}), ShapeError);  // more than axis -1
    BOOST_CHECK_THROW(infer("RMSNormalization", {{"axis", 3}}, {{2, 3, 4}, {4}}), ShapeError);
    BOOST_CHECK_THROW(infer("RMSNormalization", {{"epsilon", -1}}, {{2, 3, 4}, {4}}), ShapeError);
    try {
        infer("RMSNormalization", nullptr, {{2, 3, 4}, {3}});
    } catch (const ShapeError& e) {
        BOOST_TEST(std::string(e.what()).find(
                       "scale (3) does not broadcast to the normalized shape (4) of x (2x3x4)") != std::string::npos,
                   e.what());
    }
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {2, 4})), s = g.param("s", zeros(DType::f32, {4}));
    BOOST_TEST((attngraph::rms_norm(x, s).shape() == Shape{2, 4}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // row [3, 4]: mean square 12.5, eps 0 -> [3, 4] / sqrt(12.5); scale [1, 2]
    const Doubles y =
        run_one("RMSNormalization", {{"epsilon", 0}}, {array_of({1, 2}, {3, 4}), array_of({2}, {1, 2})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({1, 2}, {3 / std::sqrt(12.5), 8 / std::sqrt(12.5)})) < 1e-15);
}

// y = x / sqrt(mean over the last `norm_axes` axes of x² + eps) * scale (scale of the normalized shape)
Array<double> reference(const Array<double>& x, const Array<double>& scale, std::size_t n, double eps) {
    Array<double> y = x;
    for (std::size_t r = 0; r < x.size() / n; ++r) {
        double sq = 0;
        for (std::size_t i = 0; i < n; ++i) sq += x.data()[r * n + i] * x.data()[r * n + i];
        const double inv = 1 / std::sqrt(sq / static_cast<double>(n) + eps);
        for (std::size_t i = 0; i < n; ++i) y.data()[r * n + i] = x.data()[r * n + i] * inv * scale.data()[i];
    }
    return y;
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> x = uniform_array({6, 40, 64}, 1), s64 = uniform_array({64}, 2),
                        s2 = uniform_array({40, 64}, 3);
    check_against_reference("RMSNormalization", nullptr, {x, s64}, {reference(x, s64, 64, 1e-5)}, 1e-12, 1e-5);
    check_against_reference("RMSNormalization", {{"axis", 1}, {"epsilon", 0.1}}, {x, s2},
                            {reference(x, s2, 40 * 64, 0.1)}, 1e-12, 1e-5);
    // a scale (1, 64) over axes 1.. broadcasts along axis 1
    Array<double> s_b = Array<double>::from_shape({40, 64});
    for (std::size_t i = 0; i < 40; ++i)
        for (std::size_t j = 0; j < 64; ++j) s_b(i, j) = s64(j);
    check_against_reference("RMSNormalization", {{"axis", -2}},
                            {x, array_of({1, 64}, std::vector<double>(s64.begin(), s64.end()))},
                            {reference(x, s_b, 40 * 64, 1e-5)}, 1e-12, 1e-5);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("RMSNormalization", nullptr, {uniform_array({2, 3, 4}, 1), uniform_array({4}, 2)}) < 1e-7);
    BOOST_TEST(gradcheck("RMSNormalization", {{"axis", 1}, {"epsilon", 0.01}},
                          {uniform_array({2, 3, 4}, 3), uniform_array({1, 4}, 4)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
