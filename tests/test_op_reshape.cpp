// Reshape: shape rule (one -1), forward keeps row-major order, backward against finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "support/op_check.hpp"

using namespace attngraph;
using namespace attngraph::test;

namespace {
std::any attrs(std::vector<int> shape) {
    return OpRegistry::instance().get("Reshape").parse_attrs({{"shape", shape}}, "test");
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Reshape", attrs({-1, 3}), {{2, 3, 2}})[0] == Shape{4, 3}));
    BOOST_TEST((infer("Reshape", attrs({2, -1, 2, 2}), {{2, 5, 4}})[0] == Shape{2, 5, 2, 2}));
    BOOST_TEST((infer("Reshape", attrs({12}), {{3, 4}})[0] == Shape{12}));
    BOOST_CHECK_THROW(infer("Reshape", attrs({-1, -1}), {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Reshape", attrs({5, -1}), {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Reshape", attrs({2, 5}), {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Reshape", attrs({-2, 6}), {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(OpRegistry::instance().get("Reshape").parse_attrs(nlohmann::json::object(), "t"), GraphError);
}

BOOST_AUTO_TEST_CASE(forward_keeps_row_major_order) {
    const Array<double> x = array_of({2, 3}, {1, 2, 3, 4, 5, 6});
    const auto y = forward("Reshape", attrs({3, -1}), {x});
    BOOST_TEST(max_diff(y[0], array_of({3, 2}, {1, 2, 3, 4, 5, 6})) == 0.0);
    BOOST_TEST(y[0](2, 0) == 5.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Reshape", attrs({-1, 2}), {random_array({2, 3, 2}, 1)}) < 1e-8);
}
