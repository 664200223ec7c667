// Alibi: y = x - slope[h]·|i + offset - j| from (h) slopes at run time: shape rule, forward
// against hand-computed numbers, backward (x and slopes) against finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_alibi)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(int offset) {
    const nlohmann::json j = {{"offset", offset}};
    op_attrs("Alibi", j);  // throws GraphError for attributes that do not parse
    return j;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Alibi", attrs(0), {{2, 3, 4, 5}, {3}})[0] == Shape{2, 3, 4, 5}));
    BOOST_TEST((infer("Alibi", attrs(0), {{3, 1, 5}, {3}})[0] == Shape{3, 1, 5}));
    BOOST_CHECK_THROW(infer("Alibi", attrs(0), {{2, 3, 4, 5}, {2}}), ShapeError);
    BOOST_CHECK_THROW(infer("Alibi", attrs(0), {{4, 5}, {4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Alibi", attrs(0), {{2, 4, 5}, {2, 1}}), ShapeError);
}

BOOST_AUTO_TEST_CASE(forward_by_hand) {
    // two heads, slopes 0.5 and 0.25, x = 0, 2 queries, 3 keys
    const Array<double> x = array_of({2, 2, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    const Array<double> slopes = array_of({2}, {0.5, 0.25});
    const auto y = forward_all<double>("Alibi", attrs(0), {x, slopes})[0];
    BOOST_TEST(max_diff(y, array_of({2, 2, 3}, {0, -0.5, -1, -0.5, 0, -0.5, 0, -0.25, -0.5, -0.25, 0, -0.25})) == 0.0);
    // offset 2: query 0 sits at position 2 (one new token after two cached ones)
    const auto shifted =
        forward_all<double>("Alibi", attrs(2), {array_of({1, 1, 3}, {1, 1, 1}), array_of({1}, {0.5})})[0];
    BOOST_TEST(max_diff(shifted, array_of({1, 1, 3}, {0, 0.5, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Alibi", attrs(0), {random_array({2, 3, 4, 5}, 1), random_array({3}, 2)}) < 1e-8);
    BOOST_TEST(gradcheck("Alibi", attrs(3), {random_array({2, 1, 4}, 3), random_array({2}, 4)}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(slope_gradient_of_long_rows_in_f32) {
    // dslopes[h] = −Σ dy·|i − j| over the batch, queries and keys: here 2·300·300 terms per
    // head of about |i − j| each (dy near 1, as a seeded score has it), about 9e6 in all, which
    // f32 partial sums rounded by tens; against the same f32 dy summed in double
    const std::size_t n = 300;
    Array<float> x = Array<float>::from_shape({2, 2, n, n}), slopes = Array<float>::from_shape({2});
    std::fill(x.begin(), x.end(), 0.0f);
    slopes(0) = 0.5f, slopes(1) = 0.25f;
    Array<double> G = random_array<double>({2, 2, n, n}, 5);
    for (auto& v : G) v = static_cast<double>(static_cast<float>(1.0 + 1e-3 * v));  // f32 values
    std::vector<double> want(2, 0.0);
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t h = 0; h < 2; ++h)
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < n; ++j)
                    want[h] -= G(b, h, i, j) * std::abs(static_cast<double>(i) - static_cast<double>(j));
    const auto got = backward_all<float>("Alibi", attrs(0), {x, slopes}, {G}, {false, true})[0];
    for (std::size_t h = 0; h < 2; ++h)
        BOOST_TEST(std::abs(got(h) - want[h]) <= 1e-7 * std::abs(want[h]), h << ": " << got(h) << " vs " << want[h]);
}

BOOST_AUTO_TEST_SUITE_END()
