// Clip: shape rule and attributes, forward against hand-computed values (both bounds, one,
// none, min > max, NaN) and a plain loop (f64, f32; bit-identical at 1, 2, 4 and 8 threads),
// backward against the engine's gradcheck and against torch.clamp's gradient at the bounds.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_clip)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_and_attributes) {
    BOOST_TEST((infer("Clip", {{"min", 0}, {"max", 6}}, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Clip", nullptr, {{4}})[0] == Shape{4}));  // both bounds may be absent
    BOOST_CHECK_THROW(op_attrs("Clip", {{"min", "zero"}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Clip", {{"lo", 0}}), GraphError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_CHECK_THROW(g.node("Clip", {a, a}, op_attrs("Clip", nullptr), "two"), GraphError);
    BOOST_TEST((attngraph::clip(a, 0.0, 6.0).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({8}, {-3, -1, -0.5, 0, 0.5, 1, 7, nan});
    for (DType dt : {DType::f64, DType::f32}) {
        // numpy.clip(x, -1, 1) (ReLU6-like bounds below: numpy.clip(x, 0, 6))
        const Doubles both = run_one("Clip", {{"min", -1}, {"max", 1}}, {x}, dt);
        const std::vector<double> want_both = {-1, -1, -0.5, 0, 0.5, 1, 1, nan};
        const Doubles relu6 = run_one("Clip", {{"min", 0}, {"max", 6}}, {x}, dt);
        const std::vector<double> want_relu6 = {0, 0, 0, 0, 0.5, 1, 6, nan};
        const Doubles lower = run_one("Clip", {{"min", 0.5}}, {x}, dt);
        const std::vector<double> want_lower = {0.5, 0.5, 0.5, 0.5, 0.5, 1, 7, nan};
        const Doubles upper = run_one("Clip", {{"max", -0.5}}, {x}, dt);
        const std::vector<double> want_upper = {-3, -1, -0.5, -0.5, -0.5, -0.5, -0.5, nan};
        const Doubles none = run_one("Clip", nullptr, {x}, dt);
        const std::vector<double> want_none = {-3, -1, -0.5, 0, 0.5, 1, 7, nan};
        // min > max: every value is max (ONNX Clip-13's rule; numpy.clip(x, 2, 1) is 1)
        const Doubles crossed = run_one("Clip", {{"min", 2}, {"max", 1}}, {x}, dt);
        const std::vector<double> want_crossed = {1, 1, 1, 1, 1, 1, 1, nan};
        const std::pair<const Doubles*, const std::vector<double>*> cases[] = {
            {&both, &want_both},   {&relu6, &want_relu6}, {&lower, &want_lower},
            {&upper, &want_upper}, {&none, &want_none},   {&crossed, &want_crossed}};
        for (const auto& [got, want] : cases)
            for (std::size_t i = 0; i < want->size(); ++i) {
                if (std::isnan((*want)[i]))
                    BOOST_TEST(std::isnan((*got)[0](i)), i);
                else
                    BOOST_TEST((*got)[0](i) == (*want)[i], i);
            }
    }
    const Doubles y = run_one("Clip", {{"min", -1}, {"max", 1}}, {array_of({2}, {-inf, inf})}, DType::f64);
    BOOST_TEST(y[0](0) == -1.0);
    BOOST_TEST(y[0](1) == 1.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements: several fixed chunks, so the thread-count check splits the work
    const Array<double> in = uniform_array({3, 50, 81}, 1, -4, 4);
    Array<double> ref = in;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double v = in.data()[i];
        ref.data()[i] = v < -1.5 ? -1.5 : v > 2.25 ? 2.25 : v;
    }
    check_against_reference("Clip", {{"min", -1.5}, {"max", 2.25}}, {in}, {ref});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (uniform values: none within the finite difference's step of a bound)
    BOOST_TEST(gradcheck("Clip", {{"min", -1}, {"max", 0.5}}, {uniform_array({2, 3, 4}, 2, -2, 2)}) < 1e-7);
    BOOST_TEST(gradcheck("Clip", {{"min", -1}}, {uniform_array({2, 3, 4}, 3, -2, 2)}) < 1e-7);
    BOOST_TEST(gradcheck("Clip", {{"max", 0.25}}, {uniform_array({2, 3, 4}, 4, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_passes_at_the_bounds_as_torch_clamp) {
    // PyTorch 1.13: x = [nan, 0, 1, 2, 3], x.clamp(1, 2).sum().backward() gives
    // x.grad = [0, 0, 1, 1, 0]: the bounds themselves pass the gradient, NaN does not
    const Array<double> x = array_of({5}, {nan, 0, 1, 2, 3});
    const Array<double> g = array_of({5}, {1, 1, 1, 1, 1});
    const auto d = backward_all<double>("Clip", {{"min", 1}, {"max", 2}}, {x}, {g}, {true});
    BOOST_TEST(rel_diff(d[0], array_of({5}, {0, 0, 1, 1, 0})) == 0.0);
    // min > max: y is max everywhere, no gradient anywhere
    const auto crossed = backward_all<double>("Clip", {{"min", 2}, {"max", 1}}, {x}, {g}, {true});
    BOOST_TEST(rel_diff(crossed[0], array_of({5}, {0, 0, 0, 0, 0})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
