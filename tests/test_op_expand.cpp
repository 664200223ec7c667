// Expand: shape rule (ONNX: x and `shape` broadcast together), forward against hand-computed
// values and a plain loop (f64, f32; bit-identical at 1, 2 and 4 threads), backward against
// the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_expand)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Expand", {{"shape", {2, 3}}}, {{3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Expand", {{"shape", {2, 1, 1}}}, {{3, 4}})[0] == Shape{2, 3, 4}));  // a 1 keeps x's axis
    BOOST_TEST((infer("Expand", {{"shape", {4}}}, {{2, 1}})[0] == Shape{2, 4}));
    BOOST_CHECK_THROW(infer("Expand", {{"shape", {2, 4}}}, {{3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Expand", {{"shape", {-1, 3}}}, {{3}}), ShapeError);
    BOOST_CHECK_THROW(op_attrs("Expand", nullptr), GraphError);  // shape is required
    try {
        infer("Expand", {{"shape", {2, 4}}}, {{3}});
    } catch (const ShapeError& e) {
        BOOST_TEST(std::string(e.what()).find("x (3) does not broadcast to shape [2x4]") != std::string::npos,
                   e.what());
    }
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {3, 1}));
    BOOST_TEST((attngraph::expand(x, {2, 3, 5}).shape() == Shape{2, 3, 5}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Doubles y = run_one("Expand", {{"shape", {2, 3}}}, {array_of({2, 1}, {7, 8})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({2, 3}, {7, 7, 7, 8, 8, 8})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> x = uniform_array({50, 1}, 1);
    Array<double> ref = Array<double>::from_shape({4, 50, 81});
    for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t j = 0; j < 50; ++j)
            for (std::size_t k = 0; k < 81; ++k) ref(i, j, k) = x(j, 0);
    check_against_reference("Expand", {{"shape", {4, 1, 81}}}, {x}, {ref}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Expand", {{"shape", {2, 3, 4}}}, {uniform_array({3, 1}, 1)}) < 1e-8);
    BOOST_TEST(gradcheck("Expand", {{"shape", {2, 3}}}, {uniform_array({2, 3}, 2)}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
