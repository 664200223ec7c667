// LayerNormalization: shape rule (ONNX: axis to the last normalized; scale and bias broadcast
// to the normalized shape; Mean and InvStdDev outputs with stats = 1), forward against
// hand-computed values and a plain loop (f64, f32; bit-identical at 1, 2 and 4 threads),
// backward against the engine's gradcheck, through the Mean and InvStdDev outputs too.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_layer_normalization)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST(infer("LayerNormalization", nullptr, {{2, 3, 4}, {4}}).size() == 1u);
    const auto three = infer("LayerNormalization", {{"axis", 1}, {"stats", 1}}, {{2, 3, 4}, {3, 4}, {4}});
    BOOST_TEST(three.size() == 3u);
    BOOST_TEST((three[0] == Shape{2, 3, 4}));
    BOOST_TEST((three[1] == Shape{2, 1, 1}));
    BOOST_TEST((three[2] == Shape{2, 1, 1}));
    BOOST_CHECK_THROW(infer("LayerNormalization", nullptr, {{2, 3, 4}, {4}, {3}}), ShapeError);
    BOOST_CHECK_THROW(infer("LayerNormalization", nullptr, {{2, 3, 4}, {5}}), ShapeError);
    BOOST_CHECK_THROW(infer("LayerNormalization", {{"axis", -4}}, {{2, 3, 4}, {4}}), ShapeError);
    BOOST_CHECK_THROW(infer("LayerNormalization", {{"stats", 2}}, {{2, 3, 4}, {4}}), ShapeError);
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {2, 4})), s = g.param("s", zeros(DType::f32, {4}));
    BOOST_TEST((attngraph::layer_norm(x, s, s).shape() == Shape{2, 4}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // row [1, 3]: mean 2, variance 1, eps 0 -> [-1, 1]; scale [2, 3], bias [10, 20]
    const Doubles y =
        run_one("LayerNormalization", {{"epsilon", 0}, {"stats", 1}},
                {array_of({1, 2}, {1, 3}), array_of({2}, {2, 3}), array_of({2}, {10, 20})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({1, 2}, {8, 23})) < 1e-15);
    BOOST_TEST(rel_diff(y[1], array_of({1, 1}, {2})) < 1e-15);
    BOOST_TEST(rel_diff(y[2], array_of({1, 1}, {1})) < 1e-15);
}

// rows of n: (x - mean) / sqrt(var + eps) * scale + bias; with the means and 1/sqrt(var + eps)
Doubles reference(const Array<double>& x, const Array<double>& scale, const Array<double>& bias, std::size_t n,
                  double eps) {
    Array<double> y = x;
    const std::size_t rows = x.size() / n;
    Array<double> mean = Array<double>::from_shape({rows}), inv = Array<double>::from_shape({rows});
    for (std::size_t r = 0; r < rows; ++r) {
        double s = 0, v = 0;
        for (std::size_t i = 0; i < n; ++i) s += x.data()[r * n + i];
        const double mu = s / static_cast<double>(n);
        for (std::size_t i = 0; i < n; ++i) v += (x.data()[r * n + i] - mu) * (x.data()[r * n + i] - mu);
        const double k = 1 / std::sqrt(v / static_cast<double>(n) + eps);
        for (std::size_t i = 0; i < n; ++i)
            y.data()[r * n + i] = (x.data()[r * n + i] - mu) * k * scale.data()[i] + bias.data()[i];
        mean(r) = mu;
        inv(r) = k;
    }
    return {y, mean, inv};
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> x = uniform_array({6, 40, 64}, 1, -2, 3);
    const Array<double> s = uniform_array({64}, 2), b = uniform_array({64}, 3);
    Doubles ref = reference(x, s, b, 64, 1e-5);
    ref[1].reshape({6, 40, 1});
    ref[2].reshape({6, 40, 1});
    check_against_reference("LayerNormalization", {{"stats", 1}}, {x, s, b}, ref, 1e-12, 1e-5);
    check_against_reference("LayerNormalization", nullptr, {x, s, b}, {ref[0]}, 1e-12, 1e-5);
    // axis 1: rows of 40·64; no bias
    const Array<double> s2 = uniform_array({40, 64}, 4);
    const Doubles ref2 = reference(x, s2, array_of({40 * 64}, std::vector<double>(40 * 64, 0.0)), 40 * 64, 1e-3);
    check_against_reference("LayerNormalization", {{"axis", 1}, {"epsilon", 1e-3}}, {x, s2}, {ref2[0]}, 1e-12, 1e-5);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    const Array<double> x = uniform_array({2, 3, 4}, 1);
    BOOST_TEST(gradcheck("LayerNormalization", nullptr, {x, uniform_array({4}, 2), uniform_array({4}, 3)}) < 1e-7);
    BOOST_TEST(gradcheck("LayerNormalization", {{"axis", 1}}, {x, uniform_array({1, 4}, 4)}) < 1e-7);
    // every output gets a random output gradient: Mean and InvStdDev contribute to dx
    BOOST_TEST(gradcheck("LayerNormalization", {{"stats", 1}, {"epsilon", 0.01}},
                          {x, uniform_array({4}, 5), uniform_array({4}, 6)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
