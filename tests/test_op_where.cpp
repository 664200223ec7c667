// Where: shape rule (three-way broadcasting), forward against hand-computed values and a plain
// loop (f64, f32; bit-identical at 1, 2 and 4 threads), backward against the engine's
// gradcheck, which does not perturb the condition (no gradient).
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_where)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts_three_ways) {
    BOOST_TEST((infer("Where", nullptr, {{2, 3}, {3}, {}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Where", nullptr, {{4, 1}, {1, 5}, {2, 1, 1}})[0] == Shape{2, 4, 5}));
    try {
        infer("Where", nullptr, {{2, 3}, {4}, {3}});
        BOOST_FAIL("no error");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("(2x3), (4), (3)") != std::string::npos, msg);
    }
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // a causal keep written as where(q >= kv, s, -1e9): cond (3, 1) over a (1, 3) and a scalar
    const Doubles y =
        run_one("Where", nullptr, {array_of({3, 1}, {1, 0, 2}), array_of({1, 3}, {10, 20, 30}), array_of({}, {-1})},
                DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({3, 3}, {10, 20, 30, -1, -1, -1, 10, 20, 30})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // cond (3, 50, 1) broadcast over a (50, 81) and b (3, 1, 81)
    Array<double> c = uniform_array({3, 50, 1}, 1);
    for (auto& v : c) v = v > 0 ? 1.0 : 0.0;
    const Array<double> a = uniform_array({50, 81}, 2), b = uniform_array({3, 1, 81}, 3);
    Array<double> ref = Array<double>::from_shape({3, 50, 81});
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 50; ++j)
            for (std::size_t k = 0; k < 81; ++k) ref(i, j, k) = c(i, j, 0) != 0 ? a(j, k) : b(i, 0, k);
    check_against_reference("Where", nullptr, {c, a, b}, {ref}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    Array<double> c = uniform_array({2, 3, 4}, 1);
    for (auto& v : c) v = v > 0 ? 1.0 : 0.0;
    std::vector<Tensor> in{Tensor(c), Tensor(uniform_array({3, 1}, 2)), Tensor(uniform_array({2, 3, 4}, 3))};
    const GradcheckResult r = gradcheck_op("Where", nullptr, in);
    BOOST_TEST(r.entries.size() == 2u);  // in1, in2: the condition in0 is not perturbed
    BOOST_CHECK_THROW(r.at("in0"), GraphError);
    BOOST_TEST(r.max_rel_error < 1e-8);
    // through the harness too: the definition's backward against the executor's, bit for bit
    BOOST_TEST(gradcheck("Where", nullptr, {c, uniform_array({3, 1}, 2), uniform_array({2, 3, 4}, 3)}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
