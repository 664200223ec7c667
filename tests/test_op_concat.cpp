// Concat: shape rule (any number of inputs, equal outside the axis), forward against
// hand-computed numbers (3 inputs on a middle axis), and against a plain-loop reference.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_concat)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(concat_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Concat", nullptr, {{2, 3}, {2, 4}}).at(0) == Shape{2, 7}));  // axis defaults to -1
    BOOST_TEST((infer("Concat", {{"axis", 0}}, {{2, 3}, {5, 3}}).at(0) == Shape{7, 3}));
    BOOST_TEST((infer("Concat", {{"axis", 1}}, {{2, 1, 4}, {2, 2, 4}, {2, 3, 4}}).at(0) == Shape{2, 6, 4}));
    BOOST_TEST((infer("Concat", {{"axis", -2}}, {{2, 1, 4}, {2, 0, 4}}).at(0) == Shape{2, 1, 4}));
    BOOST_TEST((infer("Concat", nullptr, {{3, 2}}).at(0) == Shape{3, 2}));  // one input
    std::vector<Shape> many(10, Shape{1, 2});
    BOOST_TEST((infer("Concat", {{"axis", 0}}, many).at(0) == Shape{10, 2}));

    BOOST_CHECK_THROW(infer("Concat", nullptr, {{2, 3}, {3, 3}}), ShapeError);     // differ off the axis
    BOOST_CHECK_THROW(infer("Concat", nullptr, {{2, 3}, {2, 3, 1}}), ShapeError);  // ranks differ
    BOOST_CHECK_THROW(infer("Concat", {{"axis", 1}}, {{2, 1, 4}, {2, 2, 5}}), ShapeError);
    BOOST_CHECK_THROW(infer("Concat", {{"axis", 2}}, {{2, 3}, {2, 3}}), ShapeError);  // axis out of range
    BOOST_CHECK_THROW(infer("Concat", nullptr, {{}, {}}), ShapeError);                // scalars
    try {
        infer("Concat", nullptr, {{2, 3}, {2, 3}, {4, 3}});
        BOOST_FAIL("no ShapeError");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("input 2 (4x3)") != std::string::npos, msg);
        BOOST_TEST(msg.find("(2x3)") != std::string::npos, msg);
    }

    BOOST_CHECK_THROW(op_attrs("Concat", {{"axis", "last"}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Concat", {{"axis", 0.5}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Concat", {{"axis", 0}, {"axes", 0}}), GraphError);

    GraphBuilder g;
    BOOST_CHECK_THROW(g.node("Concat", {}, op_attrs("Concat")), GraphError);
    BOOST_CHECK_THROW(concat({}), GraphError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    // [[1,2]] | [[3]] = [[1,2,3]]
    check_close(forward<T>("Concat", nullptr, {literal<T>({1, 2}, {1, 2}), literal<T>({1, 1}, {3})}), {1, 3}, {1, 2, 3},
                0);
    // axis 0: [[1,2]] over [[3,4],[5,6]]
    check_close(forward<T>("Concat", {{"axis", 0}}, {literal<T>({1, 2}, {1, 2}), literal<T>({2, 2}, {3, 4, 5, 6})}),
                {3, 2}, {1, 2, 3, 4, 5, 6}, 0);
    // three inputs on the middle axis of (2, ., 2):
    //   x1 (2,1,2) = [[[1,2]], [[3,4]]]
    //   x2 (2,2,2) = [[[5,6],[7,8]], [[9,10],[11,12]]]
    //   x3 (2,1,2) = [[[13,14]], [[15,16]]]
    //   -> (2,4,2) = [[[1,2],[5,6],[7,8],[13,14]], [[3,4],[9,10],[11,12],[15,16]]]
    check_close(forward<T>("Concat", {{"axis", 1}},
                           {literal<T>({2, 1, 2}, {1, 2, 3, 4}), literal<T>({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12}),
                            literal<T>({2, 1, 2}, {13, 14, 15, 16})}),
                {2, 4, 2}, {1, 2, 5, 6, 7, 8, 13, 14, 3, 4, 9, 10, 11, 12, 15, 16}, 0);
    // the seed's O_concat: head1.O row [0.5, 0.8] | head2.O row [0.25, 0.75]
    check_close(
        forward<T>("Concat", {{"axis", -1}}, {literal<T>({1, 2}, {0.5, 0.8}), literal<T>({1, 2}, {0.25, 0.75})}),
        {1, 4}, {static_cast<T>(0.5), static_cast<T>(0.8), 0.25, 0.75}, 0);
    // an empty input contributes nothing
    check_close(forward<T>("Concat", {{"axis", 0}}, {literal<T>({1, 2}, {1, 2}), Array<T>::from_shape({0, 2})}), {1, 2},
                {1, 2}, 0);
}

// y[.., j, ..] = x_i[.., j - offset_i, ..] for the input i whose range holds j
template <class T>
std::vector<double> concat_reference(const std::vector<Array<T>>& xs, std::size_t axis, Shape& ys) {
    ys = Shape(xs[0].shape().begin(), xs[0].shape().end());
    ys[axis] = 0;
    for (const auto& x : xs) ys[axis] += x.shape()[axis];
    std::vector<double> y(element_count(ys));
    for (std::size_t f = 0; f < y.size(); ++f) {
        auto idx = unravel(f, ys);
        std::size_t i = 0;
        while (idx[axis] >= xs[i].shape()[axis]) idx[axis] -= xs[i++].shape()[axis];
        const Shape xs_shape(xs[i].shape().begin(), xs[i].shape().end());
        const auto st = strides_of(xs_shape);
        std::size_t off = 0;
        for (std::size_t a = 0; a < idx.size(); ++a) off += idx[a] * st[a];
        y[f] = xs[i].data()[off];
    }
    return y;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    struct Case {
        Shape base;
        int axis;
        std::vector<std::size_t> lens;
    };
    const std::vector<Case> cases = {
        {{3, 0}, -1, {2, 2}},       {{0, 4}, 0, {1, 3, 2}},
        {{2, 0, 3}, 1, {1, 2, 3}},  {{2, 3, 0}, 2, {4, 1}},
        {{0}, 0, {5, 1, 2, 7}},     {{5, 2, 0, 3}, -2, {2, 3, 4}},
        {{300, 0}, -1, {100, 150}}, {{3, 2, 0, 7}, 2, {1, 1, 1, 1, 1}},
    };
    std::uint64_t seed = 900;
    for (const auto& c : cases) {
        const std::size_t ax = static_cast<std::size_t>(c.axis < 0 ? c.axis + static_cast<int>(c.base.size()) : c.axis);
        std::vector<Array<T>> xs;
        for (std::size_t len : c.lens) {
            Shape s = c.base;
            s[ax] = len;
            xs.push_back(random_array<T>(s, ++seed));
        }
        BOOST_TEST_CONTEXT("base " << shape_str(c.base) << ", axis " << c.axis << ", " << c.lens.size() << " inputs") {
            Shape ys;
            const auto want = concat_reference(xs, ax, ys);
            check_close(forward<T>("Concat", {{"axis", c.axis}}, xs), ys, want, 0);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
