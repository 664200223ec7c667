// Slice: shape rule, forward against hand-picked entries, backward against finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_slice)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(const nlohmann::json& j) {
    op_attrs("Slice", j);  // throws GraphError for attributes that do not parse
    return j;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Slice", attrs({{"start", 2}, {"end", 4}}), {{2, 6}})[0] == Shape{2, 2}));
    BOOST_TEST((infer("Slice", attrs({{"axis", 0}, {"start", 1}, {"end", 3}}), {{3, 5}})[0] == Shape{2, 5}));
    BOOST_TEST((infer("Slice", attrs({{"axis", 1}, {"start", -2}, {"end", -1}}), {{2, 6, 3}})[0] == Shape{2, 1, 3}));
    BOOST_CHECK_THROW(infer("Slice", attrs({{"start", 4}, {"end", 4}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Slice", attrs({{"start", 0}, {"end", 7}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Slice", attrs({{"axis", 2}, {"start", 0}, {"end", 1}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Slice", attrs({{"start", 0}, {"end", 1}}), {{}}), ShapeError);
    BOOST_CHECK_THROW(attrs({{"start", 0}}), GraphError);  // end is required
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13});
    BOOST_TEST(max_diff(forward_all<double>("Slice", attrs({{"start", 1}, {"end", 3}}), {x})[0],
                        array_of({2, 2}, {1, 2, 11, 12})) == 0.0);
    BOOST_TEST(max_diff(forward_all<double>("Slice", attrs({{"axis", 0}, {"start", 1}, {"end", 2}}), {x})[0],
                        array_of({1, 4}, {10, 11, 12, 13})) == 0.0);
    // a middle axis of (2, 3, 2)
    const Array<double> z = array_of({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    BOOST_TEST(max_diff(forward_all<double>("Slice", attrs({{"axis", 1}, {"start", 1}, {"end", 3}}), {z})[0],
                        array_of({2, 2, 2}, {2, 3, 4, 5, 8, 9, 10, 11})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Slice", attrs({{"start", 1}, {"end", 3}}), {random_array({3, 5}, 1)}) < 1e-8);
    BOOST_TEST(gradcheck("Slice", attrs({{"axis", 1}, {"start", 0}, {"end", 2}}), {random_array({2, 3, 4}, 2)}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
