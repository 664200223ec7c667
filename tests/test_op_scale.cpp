// Scale: shape rule (any shape, unchanged; factor required), forward against hand-computed
// numbers, and against a plain-loop reference on random shapes.
#include <cmath>
#include <limits>

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_scale)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(scale_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    const json f = {{"factor", 0.5}};
    BOOST_TEST((infer("Scale", f, {{3, 4}}).at(0) == Shape{3, 4}));
    BOOST_TEST((infer("Scale", f, {{2, 3, 4, 5}}).at(0) == Shape{2, 3, 4, 5}));
    BOOST_TEST((infer("Scale", f, {{7}}).at(0) == Shape{7}));
    BOOST_TEST((infer("Scale", f, {{}}).at(0) == Shape{}));
    BOOST_TEST((infer("Scale", {{"factor", 2}}, {{0, 3}}).at(0) == Shape{0, 3}));  // an integer is a number

    BOOST_CHECK_THROW(op_attrs("Scale", nullptr), GraphError);  // factor is required
    BOOST_CHECK_THROW(op_attrs("Scale", json::object()), GraphError);
    BOOST_CHECK_THROW(op_attrs("Scale", {{"factor", "0.5"}}), GraphError);  // a string
    BOOST_CHECK_THROW(op_attrs("Scale", {{"factor", true}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Scale", {{"factor", nullptr}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Scale", {{"factor", {0.5}}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Scale", {{"factor", 0.5}, {"bias", 1}}), GraphError);  // unknown attribute
    try {
        op_attrs("Scale", json::object());
        BOOST_FAIL("no GraphError");
    } catch (const GraphError& e) {
        BOOST_TEST(std::string(e.what()).find("factor") != std::string::npos, e.what());
    }

    // a non-finite factor (only possible from C++) is refused when the node is added
    GraphBuilder g;
    Value x = g.input("x", Tensor(literal<float>({2}, {1, 2})));
    BOOST_CHECK_THROW(scale(x, std::numeric_limits<double>::infinity()), GraphError);
    BOOST_CHECK_THROW(scale(x, std::nan("")), GraphError);
    BOOST_CHECK_THROW(g.node("Scale", {x, x}, op_attrs("Scale", f)), GraphError);
    BOOST_CHECK_THROW(g.node("Scale", {x}, ops::SoftmaxAttrs{}), GraphError);  // attributes of another type
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    // 0.5 · [[2,-4],[1,0]] = [[1,-2],[0.5,0]]
    check_close(forward<T>("Scale", {{"factor", 0.5}}, {literal<T>({2, 2}, {2, -4, 1, 0})}), {2, 2}, {1, -2, 0.5, 0},
                0);
    // -3 · a 3-D tensor
    check_close(forward<T>("Scale", {{"factor", -3}}, {literal<T>({2, 1, 2}, {1, -2, 0.25, 4})}), {2, 1, 2},
                {-3, 6, -0.75, -12}, 0);
    // 1/sqrt(2) · the seed's head1.S_raw row [0, 1.414214, 0.707107] = [0, 1.00000031, 0.50000015]
    check_close(forward<T>("Scale", {{"factor", 0.7071067811865476}}, {literal<T>({1, 3}, {0, 1.414214, 0.707107})}),
                {1, 3}, {0, 1.0000003094, 0.5000001547}, std::is_same_v<T, float> ? 2e-7 : 1e-10);
    check_close(forward<T>("Scale", {{"factor", 0}}, {literal<T>({3}, {5, -7, 1e30})}), {3}, {0, 0, 0}, 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    const std::vector<Shape> shapes = {{1}, {3, 4}, {2, 3, 4}, {300, 301}, {2, 2, 2, 2, 2}};
    const std::vector<double> factors = {0.125, -2.5, 0.7071067811865476, 1e-3};
    std::uint64_t seed = 500;
    for (const auto& s : shapes)
        for (double f : factors) {
            BOOST_TEST_CONTEXT("x " << shape_str(s) << ", factor " << f) {
                const auto x = random_array<T>(s, ++seed);
                std::vector<double> want(x.size());
                // the op multiplies in T by the factor rounded to T
                for (std::size_t i = 0; i < x.size(); ++i) want[i] = static_cast<T>(static_cast<T>(f) * x.data()[i]);
                check_close(forward<T>("Scale", {{"factor", f}}, {x}), s, want, 0);
            }
        }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
