// Permute: shape rule, forward against index loops, backward against finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_permute)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(std::vector<int> perm) {
    const nlohmann::json j = {{"perm", perm}};
    op_attrs("Permute", j);  // throws GraphError for attributes that do not parse
    return j;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Permute", attrs({2, 0, 1}), {{2, 3, 4}})[0] == Shape{4, 2, 3}));
    BOOST_TEST((infer("Permute", attrs({0, 2, 1, 3}), {{2, 5, 3, 4}})[0] == Shape{2, 3, 5, 4}));
    BOOST_TEST((infer("Permute", attrs({-1, 0}), {{2, 3}})[0] == Shape{3, 2}));
    BOOST_CHECK_THROW(infer("Permute", attrs({1, 0}), {{2, 3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Permute", attrs({0, 0, 1}), {{2, 3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Permute", attrs({0, 1, 3}), {{2, 3, 4}}), ShapeError);
}

BOOST_AUTO_TEST_CASE(forward_moves_axes) {
    const Array<double> x = random_array({2, 3, 4}, 1);
    const auto y = forward_all<double>("Permute", attrs({2, 0, 1}), {x})[0];
    BOOST_TEST((Shape(y.shape().begin(), y.shape().end()) == Shape{4, 2, 3}));
    double worst = 0;
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 3; ++j)
            for (std::size_t k = 0; k < 4; ++k) worst = std::max(worst, std::abs(y(k, i, j) - x(i, j, k)));
    BOOST_TEST(worst == 0.0);
    // heads into a batch axis: (B, n, h, d) -> (B, h, n, d)
    const Array<double> q = array_of({1, 2, 2, 1}, {1, 2, 3, 4});  // token 0: heads 1,2; token 1: heads 3,4
    BOOST_TEST(max_diff(forward_all<double>("Permute", attrs({0, 2, 1, 3}), {q})[0],
                        array_of({1, 2, 2, 1}, {1, 3, 2, 4})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Permute", attrs({2, 0, 1}), {random_array({2, 3, 4}, 1)}) < 1e-8);
    BOOST_TEST(gradcheck("Permute", attrs({0, 2, 3, 1, 4}), {random_array({2, 3, 2, 1, 2}, 2)}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
