// The backward of every op against central finite differences in float64 (gradcheck) on
// random shapes, and against gradients worked out by hand.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"

BOOST_AUTO_TEST_SUITE(test_grad_ops)

using namespace attngraph;
namespace bdata = boost::unit_test::data;
using nlohmann::json;

namespace {

constexpr double tolerance = 1e-6;

Tensor rand(const Shape& s, std::uint64_t seed) {
    return graphs::random_tensor(s, DType::f64, seed);
}

std::size_t dim(std::mt19937& rng, std::size_t lo = 1, std::size_t hi = 5) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
}

void check(const std::string& op, const json& attrs, const std::vector<Tensor>& inputs) {
    std::string shapes;
    for (const auto& t : inputs) shapes += (shapes.empty() ? "" : ", ") + shape_str(t.shape());
    BOOST_TEST_CONTEXT(op << " " << attrs.dump() << " on (" << shapes << ")") {
        const GradcheckResult r = gradcheck_op(op, attrs, inputs);
        BOOST_TEST(r.entries.size() == inputs.size());
        BOOST_TEST(r.max_rel_error <= tolerance, r.report());
        // the check is not vacuous: some gradient is far from zero
        double largest = 0;
        for (const auto& e : r.entries)
            for (std::size_t i = 0; i < e.numeric.size(); ++i)
                largest = std::max(largest, std::abs(e.numeric.at_flat(i)));
        BOOST_TEST(largest > 1e-3);
    }
}

Tensor vec(std::initializer_list<double> v, Shape shape) {
    Array<double> a = Array<double>::from_shape(shape);
    std::copy(v.begin(), v.end(), a.begin());
    return a;
}

}  // namespace

// ---- gradcheck on random shapes ----------------------------------------------------------

BOOST_DATA_TEST_CASE(linear_random_shapes, bdata::make({1, 2, 3, 4, 5}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::size_t m = dim(rng), k = dim(rng), n = dim(rng), b0 = dim(rng, 1, 3);
    check("Linear", nullptr, {rand({m, k}, seed), rand({k, n}, seed + 100), rand({n}, seed + 200)});
    check("Linear", nullptr, {rand({b0, m, k}, seed), rand({k, n}, seed + 100), rand({1, n}, seed + 200)});
    check("Linear", nullptr, {rand({b0, m, k}, seed), rand({k, n}, seed + 100)});
}

BOOST_DATA_TEST_CASE(transpose_random_shapes, bdata::make({1, 2, 3, 4, 5}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::size_t a = dim(rng), b = dim(rng), c = dim(rng), d = dim(rng, 1, 3);
    check("Transpose", nullptr, {rand({a, b}, seed)});
    check("Transpose", nullptr, {rand({d, a, b}, seed)});
    check("Transpose", {{"perm", {2, 0, 1}}}, {rand({a, b, c}, seed)});
    check("Transpose", {{"perm", {1, 3, 0, -2}}}, {rand({d, a, b, c}, seed)});
}

BOOST_DATA_TEST_CASE(matmul_random_shapes, bdata::make({1, 2, 3, 4, 5}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::size_t m = dim(rng), k = dim(rng), n = dim(rng), b0 = dim(rng, 2, 3), b1 = dim(rng, 2, 3);
    check("MatMul", nullptr, {rand({m, k}, seed), rand({k, n}, seed + 1)});
    check("MatMul", nullptr, {rand({b0, m, k}, seed), rand({b0, k, n}, seed + 1)});
    // broadcasting: a over b's batch, b over a's, and both ways at once (batch b0 x b1)
    check("MatMul", nullptr, {rand({m, k}, seed), rand({b0, k, n}, seed + 1)});
    check("MatMul", nullptr, {rand({b0, m, k}, seed), rand({k, n}, seed + 1)});
    check("MatMul", nullptr, {rand({b0, 1, m, k}, seed), rand({b1, k, n}, seed + 1)});
    check("MatMul", nullptr, {rand({1, b1, m, k}, seed), rand({b0, 1, k, n}, seed + 1)});
}

BOOST_DATA_TEST_CASE(scale_random_shapes, bdata::make({1, 2, 3}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    check("Scale", {{"factor", -0.7 * seed}}, {rand({dim(rng), dim(rng)}, seed)});
    check("Scale", {{"factor", 1.3}}, {rand({dim(rng), dim(rng), dim(rng)}, seed)});
}

BOOST_DATA_TEST_CASE(softmax_random_shapes, bdata::make({1, 2, 3, 4, 5}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::size_t a = dim(rng, 2, 5), b = dim(rng, 2, 5), c = dim(rng, 2, 5);
    check("Softmax", nullptr, {rand({a, b}, seed)});
    check("Softmax", {{"axis", 0}}, {rand({a, b, c}, seed)});
    check("Softmax", {{"axis", 1}}, {rand({a, b, c}, seed)});
    check("Softmax", {{"axis", -1}}, {rand({a, b, c}, seed)});
}

BOOST_DATA_TEST_CASE(concat_random_shapes, bdata::make({1, 2, 3, 4, 5}), seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::size_t a = dim(rng), b = dim(rng), c1 = dim(rng), c2 = dim(rng), c3 = dim(rng);
    check("Concat", nullptr, {rand({a, c1}, seed), rand({a, c2}, seed + 1), rand({a, c3}, seed + 2)});
    check("Concat", {{"axis", 1}}, {rand({a, c1, b}, seed), rand({a, c2, b}, seed + 1), rand({a, c3, b}, seed + 2)});
    check("Concat", {{"axis", 0}}, {rand({c1, a}, seed), rand({c2, a}, seed + 1)});
    check("Concat", nullptr, {rand({a, b}, seed)});
}

// ---- by hand -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(scale_by_hand) {
    // y = 2.5 x, G = [[1, -2, 0.5]]: dL/dx = 2.5 G
    GraphBuilder g("scale", DType::f64);
    Value x = g.input("x", vec({3, 1, 4}, {1, 3}));
    g.output(scale(x, 2.5).named("y"));
    const Graph graph = g.build();
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = backward(graph, run(graph, keep), {{"y", vec({1, -2, 0.5}, {1, 3})}});
    const Tensor& dx = grads.at("x");
    BOOST_TEST(dx.at_flat(0) == 2.5);
    BOOST_TEST(dx.at_flat(1) == -5.0);
    BOOST_TEST(dx.at_flat(2) == 1.25);
    BOOST_TEST(grads.at("y").at_flat(1) == -2.0);  // dL/dy is G itself
}

BOOST_AUTO_TEST_CASE(softmax_of_two_by_hand) {
    // x = [ln 3, 0]: y = [0.75, 0.25]. With G = [1, 0], L = y0 = 1 / (1 + e^(x1 - x0)):
    // dL/dx0 = y0 (1 - y0) = 0.1875, dL/dx1 = -0.1875.
    GraphBuilder g("softmax2", DType::f64);
    Value x = g.input("x", vec({std::log(3.0), 0.0}, {1, 2}));
    g.output(softmax(x).named("y"));
    const Graph graph = g.build();
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = backward(graph, run(graph, keep), {{"y", vec({1, 0}, {1, 2})}});
    BOOST_TEST(std::abs(grads.at("x").at_flat(0) - 0.1875) <= 1e-15);
    BOOST_TEST(std::abs(grads.at("x").at_flat(1) + 0.1875) <= 1e-15);
    // with G all ones, L = y0 + y1 = 1 whatever x: the gradient is zero
    const Gradients ones = backward(graph, run(graph, keep));
    BOOST_TEST(std::abs(ones.at("x").at_flat(0)) <= 1e-16);
}

BOOST_AUTO_TEST_CASE(linear_by_hand) {
    // y = x·W + b with x (2x2), W (2x1), b (1), G = [[1], [2]]:
    // dx = G·Wᵀ, dW = xᵀ·G, db = sum of G's rows = 3
    GraphBuilder g("linear", DType::f64);
    Value x = g.input("x", vec({1, 2, 3, 4}, {2, 2}));
    Value w = g.param("W", vec({5, 6}, {2, 1}));
    Value b = g.param("b", vec({7}, {1}));
    g.output(linear(x, w, b).named("y"));
    const Graph graph = g.build();
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = backward(graph, run(graph, keep), {{"y", vec({1, 2}, {2, 1})}});
    const std::vector<double> dx = {5, 6, 10, 12}, dw = {1 * 1 + 3 * 2, 2 * 1 + 4 * 2};
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(grads.at("x").at_flat(i) == dx[i]);
    for (std::size_t i = 0; i < 2; ++i) BOOST_TEST(grads.at("W").at_flat(i) == dw[i]);
    BOOST_TEST(grads.at("b").at_flat(0) == 3.0);
}

BOOST_AUTO_TEST_CASE(fully_masked_softmax_row_has_zero_gradient) {
    const double inf = std::numeric_limits<double>::infinity();
    GraphBuilder g("masked", DType::f64);
    Value x = g.input("x", vec({-inf, -inf, 1, 2}, {2, 2}));
    g.output(softmax(x).named("y"));
    const Graph graph = g.build();
    RunOptions keep;
    keep.keep_all = true;
    const Gradients grads = backward(graph, run(graph, keep), {{"y", vec({1, -1, 1, -1}, {2, 2})}});
    BOOST_TEST(grads.at("x").at_flat(0) == 0.0);
    BOOST_TEST(grads.at("x").at_flat(1) == 0.0);
    BOOST_TEST(std::isfinite(grads.at("x").at_flat(2)));
    BOOST_TEST(grads.at("x").at_flat(2) != 0.0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_grad_ops
