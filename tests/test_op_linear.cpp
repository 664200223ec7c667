// Linear: shape rule, forward against hand-computed numbers, and against a plain-loop
// reference on random shapes (2-D and 3-D x, bias (out) and (1, out), none).
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_linear)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;

BOOST_AUTO_TEST_SUITE(linear_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Linear", nullptr, {{3, 4}, {4, 2}}).at(0) == Shape{3, 2}));
    BOOST_TEST((infer("Linear", nullptr, {{3, 4}, {4, 2}, {2}}).at(0) == Shape{3, 2}));
    BOOST_TEST((infer("Linear", nullptr, {{3, 4}, {4, 2}, {1, 2}}).at(0) == Shape{3, 2}));
    BOOST_TEST((infer("Linear", nullptr, {{5, 3, 4}, {4, 7}, {7}}).at(0) == Shape{5, 3, 7}));
    BOOST_TEST((infer("Linear", nullptr, {{2, 5, 3, 4}, {4, 1}, {1, 1}}).at(0) == Shape{2, 5, 3, 1}));
    BOOST_TEST((infer("Linear", nullptr, {{4}, {4, 6}}).at(0) == Shape{6}));

    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {5, 2}}), ShapeError);          // in differs
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {4}}), ShapeError);             // W 1-D
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {1, 4, 2}}), ShapeError);       // W 3-D
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{}, {4, 2}}), ShapeError);              // x scalar
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {4, 2}, {3}}), ShapeError);     // b wrong length
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {4, 2}, {2, 1}}), ShapeError);  // b a column
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {4, 2}, {3, 2}}), ShapeError);  // b per row
    BOOST_CHECK_THROW(infer("Linear", nullptr, {{3, 4}, {4, 2}, {1, 1, 2}}), ShapeError);

    // the message names both shapes
    try {
        infer("Linear", nullptr, {{3, 4}, {5, 2}});
        BOOST_FAIL("no ShapeError");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("3x4") != std::string::npos, msg);
        BOOST_TEST(msg.find("5x2") != std::string::npos, msg);
    }

    BOOST_CHECK_THROW(op_attrs("Linear", {{"bias", true}}), GraphError);  // Linear has no attributes
    BOOST_CHECK_THROW(op_attrs("Linear", nlohmann::json::array()), GraphError);
}

BOOST_AUTO_TEST_CASE(arity_through_the_builder) {
    GraphBuilder g;
    Value x = g.input("x", Tensor(literal<float>({2, 2}, {1, 2, 3, 4})));
    BOOST_CHECK_THROW(g.node("Linear", {x}, op_attrs("Linear")), GraphError);
    BOOST_CHECK_THROW(g.node("Linear", {x, x, x, x}, op_attrs("Linear")), GraphError);
}

// x = [[1,2],[3,4]], W = [[1,0,2],[0,1,-1]]:
//   x·W = [[1, 2, 0], [3, 4, 2]];  + b = [10, 20, 30] -> [[11, 22, 30], [13, 24, 32]]
BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    const auto x = literal<T>({2, 2}, {1, 2, 3, 4});
    const auto w = literal<T>({2, 3}, {1, 0, 2, 0, 1, -1});
    check_close(forward<T>("Linear", nullptr, {x, w}), {2, 3}, {1, 2, 0, 3, 4, 2}, 0);
    check_close(forward<T>("Linear", nullptr, {x, w, literal<T>({3}, {10, 20, 30})}), {2, 3}, {11, 22, 30, 13, 24, 32},
                0);
    check_close(forward<T>("Linear", nullptr, {x, w, literal<T>({1, 3}, {10, 20, 30})}), {2, 3},
                {11, 22, 30, 13, 24, 32}, 0);
    // the same rows as a 3-D x (2, 1, 2), and (1, 2, 2)
    check_close(forward<T>("Linear", nullptr, {literal<T>({2, 1, 2}, {1, 2, 3, 4}), w, literal<T>({3}, {10, 20, 30})}),
                {2, 1, 3}, {11, 22, 30, 13, 24, 32}, 0);
    check_close(
        forward<T>("Linear", nullptr, {literal<T>({1, 2, 2}, {1, 2, 3, 4}), w, literal<T>({1, 3}, {10, 20, 30})}),
        {1, 2, 3}, {11, 22, 30, 13, 24, 32}, 0);
    // fractions: [0.5, -1.5]·[[2, 0.25], [1, -4]] + [0.125, 0] = [1 - 1.5 + 0.125, 0.125 + 6] = [-0.375, 6.125]
    check_close(forward<T>("Linear", nullptr,
                           {literal<T>({1, 2}, {0.5, -1.5}), literal<T>({2, 2}, {2, 0.25, 1, -4}),
                            literal<T>({2}, {0.125, 0})}),
                {1, 2}, {-0.375, 6.125}, 0);
    // in = 0: x·W is an empty sum, y is the bias on every row
    check_close(forward<T>("Linear", nullptr,
                           {Array<T>::from_shape({2, 0}), Array<T>::from_shape({0, 3}), literal<T>({3}, {1, -2, 3})}),
                {2, 3}, {1, -2, 3, 1, -2, 3}, 0);
}

// y[r, j] = sum_i x[r, i] W[i, j] + b[j], in double, over the flattened leading axes of x
template <class T>
std::vector<double> linear_reference(const Array<T>& x, const Array<T>& w, const Array<T>* b) {
    const std::size_t k = w.shape()[0], n = w.shape()[1], m = x.size() / k;
    std::vector<double> y(m * n);
    for (std::size_t r = 0; r < m; ++r)
        for (std::size_t j = 0; j < n; ++j) {
            double s = b ? static_cast<double>(b->data()[j]) : 0.0;
            for (std::size_t i = 0; i < k; ++i) s += static_cast<double>(x.data()[r * k + i]) * w.data()[i * n + j];
            y[r * n + j] = s;
        }
    return y;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    struct Case {
        Shape x;
        std::size_t out;
        int bias;  // 0 none, 1 (out), 2 (1, out)
    };
    const std::vector<Case> cases = {
        {{3, 4}, 2, 2},       {{1, 1}, 1, 0},     {{7, 5}, 3, 1},       {{2, 3, 8}, 6, 1},
        {{4, 2, 3, 5}, 9, 2}, {{300, 33}, 17, 1}, {{5, 61, 16}, 40, 2}, {{6}, 4, 1},
    };
    std::uint64_t seed = 10;
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT("x " << shape_str(c.x) << ", out " << c.out << ", bias kind " << c.bias) {
            const auto x = random_array<T>(c.x, ++seed);
            const auto w = random_array<T>({c.x.back(), c.out}, ++seed);
            const auto b = random_array<T>(c.bias == 2 ? Shape{1, c.out} : Shape{c.out}, ++seed);
            std::vector<Array<T>> in = {x, w};
            if (c.bias) in.push_back(b);
            Shape ys = c.x;
            ys.back() = c.out;
            check_close(forward<T>("Linear", nullptr, in), ys, linear_reference(x, w, c.bias ? &b : nullptr),
                        tol_for<T>(c.x.back()));
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
