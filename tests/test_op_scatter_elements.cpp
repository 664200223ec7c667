// ScatterElements: shape rule, forward against ONNX's examples and a plain loop (f64, f32;
// bit-identical at 1, 2, 4 and 8 threads), bad indices as ValueErrors, backward against the
// engine's gradcheck and by hand where two updates name one position (the later one is kept).
// The reductions (add, mul, max, min): ONNX's examples, a plain loop with repeated positions,
// gradcheck, and by hand: a zero factor, ties and NaN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_scatter_elements)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
json axis(int a) {
    return {{"axis", a}};
}
json reducing(int a, const std::string& r) {
    return {{"axis", a}, {"reduction", r}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_is_datas) {
    BOOST_TEST((infer("ScatterElements", axis(0), {{3, 3}, {2, 3}, {2, 3}})[0] == Shape{3, 3}));
    BOOST_TEST((infer("ScatterElements", axis(-1), {{1, 8, 4}, {1, 2, 4}, {1, 2, 4}})[0] == Shape{1, 8, 4}));
    BOOST_CHECK_THROW(infer("ScatterElements", axis(0), {{3, 3}, {2, 3}, {3, 3}}), ShapeError);  // two shapes
    BOOST_CHECK_THROW(infer("ScatterElements", axis(0), {{3, 3}, {2}, {2}}), ShapeError);        // rank
    BOOST_CHECK_THROW(infer("ScatterElements", axis(0), {{3, 3}, {2, 4}, {2, 4}}), ShapeError);  // too long
    BOOST_CHECK_THROW(infer("ScatterElements", axis(2), {{3, 3}, {2, 3}, {2, 3}}), ShapeError);  // axis
    BOOST_CHECK_THROW(infer("ScatterElements", axis(0), {{}, {}, {}}), ShapeError);
    GraphBuilder g("t");
    Value d = g.input("d", zeros(DType::f32, {3, 3}));
    Value i = g.input("i", zeros(DType::f32, {2, 3}));
    Value u = g.input("u", zeros(DType::f32, {2, 3}));
    BOOST_TEST((attngraph::scatter_elements(d, i, u).shape() == Shape{3, 3}));
    BOOST_TEST(!op_def("ScatterElements").has_grad(1));
}

BOOST_AUTO_TEST_CASE(forward_onnx_examples) {
    // ONNX's ScatterElements examples (its operator documentation)
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles a = run_one("ScatterElements", axis(0),
                                  {array_of({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0}), array_of({2, 3}, {1, 0, 2, 0, 2, 1}),
                                   array_of({2, 3}, {1.0, 1.1, 1.2, 2.0, 2.1, 2.2})},
                                  dt);
        const double tol = dt == DType::f32 ? 1e-7 : 0;
        BOOST_TEST(rel_diff(a[0], array_of({3, 3}, {2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2})) <= tol);
        const Doubles b =
            run_one("ScatterElements", axis(1),
                    {array_of({1, 5}, {1, 2, 3, 4, 5}), array_of({1, 2}, {1, 3}), array_of({1, 2}, {1.1, 2.1})}, dt);
        BOOST_TEST(rel_diff(b[0], array_of({1, 5}, {1, 1.1, 3, 2.1, 5})) <= tol);
        // negative indices count from the end
        const Doubles c =
            run_one("ScatterElements", axis(1),
                    {array_of({1, 5}, {1, 2, 3, 4, 5}), array_of({1, 2}, {1, -3}), array_of({1, 2}, {1.1, 2.1})}, dt);
        BOOST_TEST(rel_diff(c[0], array_of({1, 5}, {1, 1.1, 2.1, 4, 5})) <= tol);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // a KV cache (2, 3, 64, 16) written at 5 positions along axis 2 (a permutation's first five:
    // no position twice), and along the last axis
    const Array<double> data = uniform_array({2, 3, 64, 16}, 1), upd = uniform_array({2, 3, 5, 16}, 2);
    const int pos[5] = {7, -1, 30, 0, 12};
    Array<double> idx = Array<double>::from_shape({2, 3, 5, 16});
    for (std::size_t e = 0; e < idx.size(); ++e) idx.data()[e] = pos[(e / 16) % 5];
    Array<double> ref = data;
    for (std::size_t e = 0; e < idx.size(); ++e) {
        const std::size_t b = e / (3 * 5 * 16), h = (e / (5 * 16)) % 3, p = (e / 16) % 5, k = e % 16;
        const std::size_t at = static_cast<std::size_t>((pos[p] + 64) % 64);
        ref.data()[((b * 3 + h) * 64 + at) * 16 + k] = upd.data()[e];
    }
    check_against_reference("ScatterElements", axis(2), {data, idx, upd}, {ref}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(bad_indices_are_value_errors) {
    const Array<double> data = array_of({1, 5}, {1, 2, 3, 4, 5}), upd = array_of({1, 2}, {1.1, 2.1});
    for (double bad : {5.0, -6.0, 1.5, std::numeric_limits<double>::quiet_NaN()})
        BOOST_CHECK_THROW(run_one("ScatterElements", axis(1), {data, array_of({1, 2}, {1, bad}), upd}, DType::f64),
                          ValueError);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (distinct positions: a permutation's rows)
    const Array<double> idx = array_of({2, 3}, {2, 0, 1, 0, 2, 3});
    BOOST_TEST(gradcheck("ScatterElements", axis(0), {uniform_array({4, 3}, 1), idx, uniform_array({2, 3}, 2)},
                         {true, false, true}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_gives_a_position_written_twice_to_the_later_update) {
    // y = data with updates [u0, u1, u2] at [1, 3, 1] along axis 0: y[1] = u2 (the later), y[3] = u1
    const Array<double> data = array_of({4}, {1, 2, 3, 4}), idx = array_of({3}, {1, 3, 1}),
                        upd = array_of({3}, {10, 20, 30});
    BOOST_TEST(rel_diff(run_one("ScatterElements", axis(0), {data, idx, upd}, DType::f64)[0],
                        array_of({4}, {1, 30, 3, 20})) == 0.0);
    const auto d = backward_all<double>("ScatterElements", axis(0), {data, idx, upd}, {array_of({4}, {1, 2, 3, 4})},
                                        {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({4}, {1, 0, 3, 0})) == 0.0);  // written positions get none
    BOOST_TEST(rel_diff(d[1], array_of({3}, {0, 4, 2})) == 0.0);     // u0 was overwritten: 0
}

BOOST_AUTO_TEST_CASE(reductions_onnx_examples) {
    // ONNX's examples of ScatterElements with a reduction (opsets 16 and 18): two updates at column 1
    const Array<double> data = array_of({1, 5}, {1, 2, 3, 4, 5}), idx = array_of({1, 2}, {1, 1}),
                        upd = array_of({1, 2}, {1.1, 2.1});
    const std::map<std::string, double> col1 = {
        {"add", 2 + 1.1 + 2.1}, {"mul", 2 * 1.1 * 2.1}, {"max", 2.1}, {"min", 1.1}};
    for (DType dt : {DType::f64, DType::f32})
        for (const auto& [r, v] : col1) {
            const Doubles y = run_one("ScatterElements", reducing(1, r), {data, idx, upd}, dt);
            BOOST_TEST(rel_diff(y[0], array_of({1, 5}, {1, v, 3, 4, 5})) <= (dt == DType::f32 ? 1e-7 : 1e-15), r);
        }
    BOOST_CHECK_THROW(infer("ScatterElements", reducing(0, "sum"), {{3, 3}, {2, 3}, {2, 3}}), GraphError);
}

BOOST_AUTO_TEST_CASE(reductions_match_a_plain_loop) {
    // (4, 6, 5) written along axis 1 by (4, 9, 5) updates: 9 writes into 6 rows, so rows repeat
    const Array<double> data = uniform_array({4, 6, 5}, 3, 0.5, 1.5), upd = uniform_array({4, 9, 5}, 4, 0.5, 1.5);
    Array<double> idx = Array<double>::from_shape({4, 9, 5});
    for (std::size_t e = 0; e < idx.size(); ++e) idx.data()[e] = static_cast<double>((e * 7 + e / 5) % 6) - 3;
    for (const std::string r : {"add", "mul", "max", "min"}) {
        Array<double> ref = data;
        for (std::size_t e = 0; e < idx.size(); ++e) {
            const std::size_t b = e / 45, k = e % 5;
            const auto row = static_cast<std::size_t>(idx.data()[e] + 6) % 6;
            double& y = ref.data()[(b * 6 + row) * 5 + k];
            const double u = upd.data()[e];
            y = r == "add" ? y + u : r == "mul" ? y * u : r == "max" ? std::max(y, u) : std::min(y, u);
        }
        BOOST_TEST_CONTEXT(r) {
            check_against_reference("ScatterElements", reducing(1, r), {data, idx, upd}, {ref}, 0, 1e-6);
        }
    }
}

BOOST_AUTO_TEST_CASE(reductions_backward_match_finite_differences) {
    // positions repeat (three writes to row 1); the values are apart, so max and min have no ties
    const Array<double> idx = array_of({3, 2}, {1, 0, 1, 2, 1, 0});
    for (const std::string r : {"add", "mul", "max", "min"})
        BOOST_TEST(gradcheck("ScatterElements", reducing(0, r),
                             {uniform_array({3, 2}, 5, 0.5, 1.5), idx, uniform_array({3, 2}, 6, 0.5, 1.5)},
                             {true, false, true}) < 1e-8,
                   r);
}

BOOST_AUTO_TEST_CASE(reductions_backward_by_hand) {
    // mul with a zero factor: y = 3·0·2 = 0; dx = dy·0·2, du0 = dy·3·2, du1 = dy·3·0 (no division)
    const Array<double> idx = array_of({2}, {0, 0}), dy = array_of({1}, {1.5});
    auto d = backward_all<double>("ScatterElements", reducing(0, "mul"),
                                  {array_of({1}, {3}), idx, array_of({2}, {0, 2})}, {dy}, {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({1}, {0})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({2}, {9, 0})) == 0.0);
    // max with ties: data 2, updates 2, 1, 2: y = 2, shared by data and updates 0 and 2
    const Array<double> idx3 = array_of({3}, {0, 0, 0}), dy3 = array_of({1}, {3});
    d = backward_all<double>("ScatterElements", reducing(0, "max"),
                             {array_of({1}, {2}), idx3, array_of({3}, {2, 1, 2})}, {dy3}, {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({1}, {1})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({3}, {1, 0, 1})) == 0.0);
    // min where an update wins alone: all of dy goes to it
    d = backward_all<double>("ScatterElements", reducing(0, "min"),
                             {array_of({1}, {2}), idx3, array_of({3}, {2, 1, 2})}, {dy3}, {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({1}, {0})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({3}, {0, 3, 0})) == 0.0);
    // add: dy to data and to every update
    d = backward_all<double>("ScatterElements", reducing(0, "add"),
                             {array_of({2}, {2, 5}), idx3, array_of({3}, {2, 1, 2})}, {array_of({2}, {3, 7})},
                             {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({2}, {3, 7})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({3}, {3, 3, 3})) == 0.0);
}

BOOST_AUTO_TEST_CASE(max_and_min_pass_nan_on) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Array<double> idx = array_of({2}, {0, 1});
    for (const std::string r : {"max", "min"}) {
        const Doubles y = run_one("ScatterElements", reducing(0, r),
                                  {array_of({3}, {1, nan, 4}), idx, array_of({2}, {nan, 5})}, DType::f64);
        BOOST_TEST(std::isnan(y[0].data()[0]), r);
        BOOST_TEST(std::isnan(y[0].data()[1]), r);
        BOOST_TEST(y[0].data()[2] == 4.0, r);
    }
}

BOOST_AUTO_TEST_SUITE_END()
