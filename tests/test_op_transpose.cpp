// Transpose: shape rule (default: last two axes swapped; perm), forward against
// hand-computed numbers, and against a plain-loop reference on random shapes and perms.
#include <algorithm>

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_transpose)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(transpose_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Transpose", nullptr, {{2, 3}}).at(0) == Shape{3, 2}));
    BOOST_TEST((infer("Transpose", nullptr, {{5, 2, 3}}).at(0) == Shape{5, 3, 2}));
    BOOST_TEST((infer("Transpose", {{"perm", {2, 0, 1}}}, {{2, 3, 4}}).at(0) == Shape{4, 2, 3}));
    BOOST_TEST((infer("Transpose", {{"perm", {1, 0, 2}}}, {{2, 3, 4}}).at(0) == Shape{3, 2, 4}));
    BOOST_TEST((infer("Transpose", {{"perm", {-1, 0, 1}}}, {{2, 3, 4}}).at(0) == Shape{4, 2, 3}));  // negative axes
    BOOST_TEST((infer("Transpose", {{"perm", json::array({0})}}, {{7}}).at(0) == Shape{7}));
    BOOST_TEST((infer("Transpose", {{"perm", nullptr}}, {{2, 3}}).at(0) == Shape{3, 2}));  // null: the default

    BOOST_CHECK_THROW(infer("Transpose", nullptr, {{7}}), ShapeError);                      // 1-D, no perm
    BOOST_CHECK_THROW(infer("Transpose", nullptr, {{}}), ShapeError);                       // scalar
    BOOST_CHECK_THROW(infer("Transpose", {{"perm", {1, 0}}}, {{2, 3, 4}}), ShapeError);     // wrong length
    BOOST_CHECK_THROW(infer("Transpose", {{"perm", {0, 0, 1}}}, {{2, 3, 4}}), ShapeError);  // repeated axis
    BOOST_CHECK_THROW(infer("Transpose", {{"perm", {0, 1, 3}}}, {{2, 3, 4}}), ShapeError);  // out of range
    BOOST_CHECK_THROW(infer("Transpose", {{"perm", {0, -4, 1}}}, {{2, 3, 4}}), ShapeError);

    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", "1,0"}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", 1}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", {1.5, 0}}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", {true, false}}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", {"1", "0"}}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", {1, 0}}, {"axes", {1, 0}}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Transpose", {{"perm", {5000000000LL, 0}}}), GraphError);

    GraphBuilder g;
    Value x = g.input("x", Tensor(literal<float>({2, 2}, {1, 2, 3, 4})));
    BOOST_CHECK_THROW(g.node("Transpose", {x, x}, op_attrs("Transpose")), GraphError);
    BOOST_CHECK_THROW(g.node("Transpose", {}, op_attrs("Transpose")), GraphError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    // [[1,2,3],[4,5,6]]ᵀ = [[1,4],[2,5],[3,6]]
    check_close(forward<T>("Transpose", nullptr, {literal<T>({2, 3}, {1, 2, 3, 4, 5, 6})}), {3, 2}, {1, 4, 2, 5, 3, 6},
                0);
    // batched: each (2,2) slice transposed: [[1,2],[3,4]] -> [[1,3],[2,4]], [[5,6],[7,8]] -> [[5,7],[6,8]]
    check_close(forward<T>("Transpose", nullptr, {literal<T>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}), {2, 2, 2},
                {1, 3, 2, 4, 5, 7, 6, 8}, 0);
    // (2,1,3) with perm [2,0,1] -> (3,2,1): y[i][j][0] = x[j][0][i]
    //   x = [[[1,2,3]], [[4,5,6]]] -> y = [[[1],[4]], [[2],[5]], [[3],[6]]]
    check_close(forward<T>("Transpose", {{"perm", {2, 0, 1}}}, {literal<T>({2, 1, 3}, {1, 2, 3, 4, 5, 6})}), {3, 2, 1},
                {1, 4, 2, 5, 3, 6}, 0);
    // (2,2,2) with perm [1,0,2]: swaps the two leading axes:
    //   x[0] = [[1,2],[3,4]], x[1] = [[5,6],[7,8]] -> y[0] = [[1,2],[5,6]], y[1] = [[3,4],[7,8]]
    check_close(forward<T>("Transpose", {{"perm", {1, 0, 2}}}, {literal<T>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}),
                {2, 2, 2}, {1, 2, 5, 6, 3, 4, 7, 8}, 0);
    // the identity perm on 1-D
    check_close(forward<T>("Transpose", {{"perm", json::array({0})}}, {literal<T>({3}, {-1, 0.5, 2})}), {3},
                {-1, 0.5, 2}, 0);
}

// y[i_0, ..., i_{r-1}] = x[j] with j[perm[a]] = i_a
template <class T>
std::vector<double> transpose_reference(const Array<T>& x, const std::vector<std::size_t>& perm) {
    const Shape xs(x.shape().begin(), x.shape().end());
    Shape ys(xs.size());
    for (std::size_t a = 0; a < xs.size(); ++a) ys[a] = xs[perm[a]];
    const auto xstr = strides_of(xs);
    std::vector<double> y(x.size());
    for (std::size_t f = 0; f < y.size(); ++f) {
        const auto yi = unravel(f, ys);
        std::size_t off = 0;
        for (std::size_t a = 0; a < yi.size(); ++a) off += yi[a] * xstr[perm[a]];
        y[f] = x.data()[off];
    }
    return y;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    const std::vector<Shape> shapes = {{1, 1},     {3, 5},       {4, 7, 2},      {2, 3, 4, 5},
                                       {300, 257}, {3, 130, 70}, {2, 1, 6, 1, 3}};
    std::uint64_t seed = 100;
    std::mt19937 rng(7);
    for (const auto& s : shapes) {
        const auto x = random_array<T>(s, ++seed);
        // default: the last two axes swapped
        std::vector<std::size_t> swap(s.size());
        for (std::size_t i = 0; i < s.size(); ++i) swap[i] = i;
        std::swap(swap[s.size() - 1], swap[s.size() - 2]);
        Shape ys = s;
        std::swap(ys[s.size() - 1], ys[s.size() - 2]);
        BOOST_TEST_CONTEXT("x " << shape_str(s) << ", default perm") {
            check_close(forward<T>("Transpose", nullptr, {x}), ys, transpose_reference(x, swap), 0);
        }
        // three random permutations
        for (int trial = 0; trial < 3; ++trial) {
            std::vector<std::size_t> p = swap;
            std::shuffle(p.begin(), p.end(), rng);
            json perm = json::array();
            Shape ps(s.size());
            for (std::size_t a = 0; a < p.size(); ++a) {
                perm.push_back(static_cast<int>(p[a]));
                ps[a] = s[p[a]];
            }
            BOOST_TEST_CONTEXT("x " << shape_str(s) << ", perm " << perm.dump()) {
                check_close(forward<T>("Transpose", {{"perm", perm}}, {x}), ps, transpose_reference(x, p), 0);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(scalar_with_empty_perm) {
    // a 0-D tensor with perm [] is the identity (and must not crash)
    Array<double> x = Array<double>::from_shape({});
    x() = 2.5;
    BOOST_TEST((infer("Transpose", {{"perm", json::array()}}, {{}}).at(0) == Shape{}));
    const auto y = forward<double>("Transpose", {{"perm", json::array()}}, {x});
    BOOST_TEST(y.size() == 1u);
    BOOST_TEST(y.data()[0] == 2.5);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
