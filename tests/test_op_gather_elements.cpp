// GatherElements: shape rule, forward against ONNX's examples and a plain loop (f64, f32;
// bit-identical at 1, 2, 4 and 8 threads), bad indices as ValueErrors, backward against the
// engine's gradcheck and by hand where several elements read one position (their gradients
// add up). ScatterElements shares its rule and positions: its own tests run them too.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_gather_elements)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
json axis(int a) {
    return {{"axis", a}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_is_the_indices) {
    BOOST_TEST((infer("GatherElements", axis(0), {{3, 3}, {2, 3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("GatherElements", axis(-1), {{2, 8, 4}, {2, 8, 9}})[0] == Shape{2, 8, 9}));  // longer on axis
    BOOST_CHECK_THROW(infer("GatherElements", axis(0), {{3, 3}, {2}}), ShapeError);                // rank
    BOOST_CHECK_THROW(infer("GatherElements", axis(0), {{3, 3}, {2, 4}}), ShapeError);             // too long
    BOOST_CHECK_THROW(infer("GatherElements", axis(2), {{3, 3}, {2, 3}}), ShapeError);             // axis
    BOOST_CHECK_THROW(infer("GatherElements", axis(0), {{}, {}}), ShapeError);
    GraphBuilder g("t");
    Value d = g.input("d", zeros(DType::f32, {3, 3}));
    Value i = g.input("i", zeros(DType::f32, {2, 3}));
    BOOST_TEST((attngraph::gather_elements(d, i).shape() == Shape{2, 3}));
    BOOST_TEST(!op_def("GatherElements").has_grad(1));
}

BOOST_AUTO_TEST_CASE(forward_onnx_examples) {
    // ONNX's GatherElements examples (its operator documentation and node tests)
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles a =
            run_one("GatherElements", axis(1), {array_of({2, 2}, {1, 2, 3, 4}), array_of({2, 2}, {0, 0, 1, 0})}, dt);
        BOOST_TEST(rel_diff(a[0], array_of({2, 2}, {1, 1, 4, 3})) == 0.0);
        const Doubles b =
            run_one("GatherElements", axis(0),
                    {array_of({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), array_of({2, 3}, {1, 2, 0, 2, 0, 0})}, dt);
        BOOST_TEST(rel_diff(b[0], array_of({2, 3}, {4, 8, 3, 7, 2, 3})) == 0.0);
        // negative indices count from the end
        const Doubles c =
            run_one("GatherElements", axis(0),
                    {array_of({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), array_of({2, 3}, {-1, -2, 0, -2, 0, 0})}, dt);
        BOOST_TEST(rel_diff(c[0], array_of({2, 3}, {7, 5, 3, 4, 2, 3})) == 0.0);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // a router's top-2 scores read from (4, 6, 8) along the last axis, and rows read along
    // axis 1 of a (3, 10, 5) tensor into (3, 7, 4): indices shorter than data on the other axes
    const Array<double> scores = uniform_array({4, 6, 8}, 1);
    Array<double> top = Array<double>::from_shape({4, 6, 2});
    for (std::size_t e = 0; e < top.size(); ++e)
        top.data()[e] = static_cast<double>((e * 5 + 3) % 8) - (e % 3 == 0 ? 8 : 0);
    Array<double> want = Array<double>::from_shape({4, 6, 2});
    for (std::size_t e = 0; e < top.size(); ++e) {
        const auto k = static_cast<std::size_t>(top.data()[e] < 0 ? top.data()[e] + 8 : top.data()[e]);
        want.data()[e] = scores.data()[(e / 2) * 8 + k];
    }
    check_against_reference("GatherElements", axis(-1), {scores, top}, {want}, 0, 1e-7);

    const Array<double> data = uniform_array({3, 10, 5}, 2);
    Array<double> rows = Array<double>::from_shape({3, 7, 4});
    for (std::size_t e = 0; e < rows.size(); ++e) rows.data()[e] = static_cast<double>((e * 7) % 10);
    Array<double> ref = Array<double>::from_shape({3, 7, 4});
    for (std::size_t b = 0; b < 3; ++b)
        for (std::size_t i = 0; i < 7; ++i)
            for (std::size_t k = 0; k < 4; ++k) {
                const std::size_t e = (b * 7 + i) * 4 + k;
                ref.data()[e] = data.data()[(b * 10 + static_cast<std::size_t>(rows.data()[e])) * 5 + k];
            }
    check_against_reference("GatherElements", axis(1), {data, rows}, {ref}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(bad_indices_are_value_errors) {
    const Array<double> data = array_of({1, 5}, {1, 2, 3, 4, 5});
    for (double bad : {5.0, -6.0, 1.5, std::numeric_limits<double>::quiet_NaN()})
        BOOST_CHECK_THROW(run_one("GatherElements", axis(1), {data, array_of({1, 2}, {1, bad})}, DType::f64),
                          ValueError);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    const Array<double> idx = array_of({2, 3}, {2, 0, 1, 0, 2, 3});
    BOOST_TEST(gradcheck("GatherElements", axis(0), {uniform_array({4, 3}, 1), idx}, {true, false}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_adds_the_gradients_of_a_position_read_twice) {
    // y = data at [1, 3, 1, -1] along axis 0: dy [1, 2, 3, 4] gives position 1 1 + 3 and
    // position 3 2 + 4 (-1 is 3), the others nothing
    const Array<double> data = array_of({4}, {10, 20, 30, 40}), idx = array_of({4}, {1, 3, 1, -1});
    BOOST_TEST(rel_diff(run_one("GatherElements", axis(0), {data, idx}, DType::f64)[0],
                        array_of({4}, {20, 40, 20, 40})) == 0.0);
    const auto d =
        backward_all<double>("GatherElements", axis(0), {data, idx}, {array_of({4}, {1, 2, 3, 4})}, {true, false});
    BOOST_TEST(rel_diff(d[0], array_of({4}, {0, 4, 0, 6})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
