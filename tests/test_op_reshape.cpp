// Reshape: shape rule (one -1), forward keeps row-major order, backward against finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_reshape)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(std::vector<int> shape) {
    const nlohmann::json j = {{"shape", shape}};
    op_attrs("Reshape", j);  // throws GraphError for attributes that do not parse
    return j;
}
nlohmann::json keeping(int keep_leading, std::vector<int> shape) {
    const nlohmann::json j = {{"shape", shape}, {"keep_leading", keep_leading}};
    op_attrs("Reshape", j);  // throws GraphError for attributes that do not parse
    return j;
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
    BOOST_CHECK_THROW(op_attrs("Reshape", nlohmann::json::object()), GraphError);
}

BOOST_AUTO_TEST_CASE(keep_leading_keeps_the_first_axes_whatever_their_size) {
    // (B, n, d) -> (B, n, h, d_k) for any B and n, with no batch written into `shape`
    BOOST_TEST((infer("Reshape", keeping(1, {-1, 2, 4}), {{2, 4, 8}})[0] == Shape{2, 4, 2, 4}));
    BOOST_TEST((infer("Reshape", keeping(1, {-1, 2, 4}), {{3, 4, 8}})[0] == Shape{3, 4, 2, 4}));
    BOOST_TEST((infer("Reshape", keeping(1, {-1, 8}), {{3, 4, 2, 4}})[0] == Shape{3, 4, 8}));
    BOOST_TEST((infer("Reshape", keeping(2, {6}), {{2, 5, 2, 3}})[0] == Shape{2, 5, 6}));
    BOOST_TEST((infer("Reshape", keeping(3, {}), {{2, 5, 6}})[0] == Shape{2, 5, 6}));
    // 0 keeps meaning a zero-length axis
    BOOST_TEST((infer("Reshape", attrs({0, 4}), {{0, 2, 2}})[0] == Shape{0, 4}));
    BOOST_TEST((infer("Reshape", keeping(1, {0, 3}), {{2, 0}})[0] == Shape{2, 0, 3}));
    BOOST_CHECK_THROW(infer("Reshape", keeping(1, {-1, 3}), {{2, 4, 8}}), ShapeError);  // 32 % 3
    BOOST_CHECK_THROW(infer("Reshape", keeping(4, {-1}), {{2, 4, 8}}), ShapeError);
    BOOST_CHECK_THROW(infer("Reshape", keeping(-1, {-1}), {{2, 4, 8}}), ShapeError);
    // keep_trailing: merge the axes between, (B, g, r, n, m) -> (B, g·r, n, m)
    const auto both = [](int lead, int trail, std::vector<int> shape) {
        const nlohmann::json j = {{"shape", shape}, {"keep_leading", lead}, {"keep_trailing", trail}};
        op_attrs("Reshape", j);  // throws GraphError for attributes that do not parse
        return j;
    };
    BOOST_TEST((infer("Reshape", both(1, 2, {-1}), {{2, 3, 4, 5, 6}})[0] == Shape{2, 12, 5, 6}));
    BOOST_TEST((infer("Reshape", both(2, 2, {1}), {{2, 3, 5, 6}})[0] == Shape{2, 3, 1, 5, 6}));
    BOOST_TEST((infer("Reshape", both(0, 1, {3, -1}), {{6, 7}})[0] == Shape{3, 2, 7}));
    BOOST_CHECK_THROW(infer("Reshape", both(2, 2, {-1}), {{2, 3, 4}}), ShapeError);
    BOOST_TEST(gradcheck("Reshape", both(1, 1, {-1}), {random_array({2, 3, 2, 2}, 4)}) < 1e-8);
    const Array<double> x = array_of({2, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    const auto y = forward_all<double>("Reshape", keeping(1, {2, -1}), {x});
    BOOST_TEST(max_diff(y[0], array_of({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})) == 0.0);
    BOOST_TEST(gradcheck("Reshape", keeping(2, {-1}), {random_array({2, 3, 2, 2}, 3)}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(forward_keeps_row_major_order) {
    const Array<double> x = array_of({2, 3}, {1, 2, 3, 4, 5, 6});
    const auto y = forward_all<double>("Reshape", attrs({3, -1}), {x});
    BOOST_TEST(max_diff(y[0], array_of({3, 2}, {1, 2, 3, 4, 5, 6})) == 0.0);
    BOOST_TEST(y[0](2, 0) == 5.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Reshape", attrs({-1, 2}), {random_array({2, 3, 2}, 1)}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
