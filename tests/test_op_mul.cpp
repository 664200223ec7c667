// Mul: shape rule (numpy broadcasting), forward against hand-computed values and plain loops
// (f64, f32; bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_mul)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts) {
    BOOST_TEST((infer("Mul", nullptr, {{2, 3}, {3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Mul", nullptr, {{2, 1, 4}, {3, 1}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("Mul", nullptr, {{}, {5}})[0] == Shape{5}));
    BOOST_CHECK_THROW(infer("Mul", nullptr, {{2, 3}, {4}}), ShapeError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3})), b = g.input("b", zeros(DType::f32, {4}));
    try {
        attngraph::mul(a, b).named("y");
        BOOST_FAIL("no error");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("(Mul)") != std::string::npos);
        BOOST_TEST(msg.find("2x3") != std::string::npos);
        BOOST_TEST(msg.find("(4)") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y = run_one("Mul", nullptr, {array_of({3}, {2, -1.5, 0}), array_of({3}, {3, 4, 7})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({3}, {6, -6, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // same shapes, 12,150 elements (several fixed chunks)
    const Array<double> a = uniform_array({3, 50, 81}, 1), b = uniform_array({3, 50, 81}, 2, -1, 1);
    Array<double> same = a;
    for (std::size_t i = 0; i < a.size(); ++i) same.data()[i] = a.data()[i] * b.data()[i];
    check_against_reference("Mul", nullptr, {a, b}, {same});
    // broadcast both ways: a (3, 50, 1) with b (81): y[i, j, k] = a[i, j, 0] ⋈ b[k]
    const Array<double> c = uniform_array({3, 50, 1}, 3), d = uniform_array({81}, 4, -1, 1);
    Array<double> outer = Array<double>::from_shape({3, 50, 81});
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 50; ++j)
            for (std::size_t k = 0; k < 81; ++k) outer(i, j, k) = c(i, j, 0) * d(k);
    check_against_reference("Mul", nullptr, {c, d}, {outer});
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Mul", nullptr, {uniform_array({2, 3}, 1), uniform_array({2, 3}, 2, -1, 1)}) < 1e-7);
    BOOST_TEST(gradcheck("Mul", nullptr, {uniform_array({2, 3, 4}, 3), uniform_array({3, 1}, 4, -1, 1)}) < 1e-7);
    BOOST_TEST(gradcheck("Mul", nullptr, {uniform_array({1, 4}, 5), uniform_array({3, 1}, 6, -1, 1)}) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
