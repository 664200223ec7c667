// MatMul: shape rule (batched, numpy broadcasting of the leading axes), forward against
// hand-computed numbers, and against a plain-loop reference on random shapes.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_matmul)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;

BOOST_AUTO_TEST_SUITE(matmul_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("MatMul", nullptr, {{3, 2}, {2, 4}}).at(0) == Shape{3, 4}));
    BOOST_TEST((infer("MatMul", nullptr, {{1, 1}, {1, 1}}).at(0) == Shape{1, 1}));
    BOOST_TEST((infer("MatMul", nullptr, {{5, 3, 2}, {2, 4}}).at(0) == Shape{5, 3, 4}));
    BOOST_TEST((infer("MatMul", nullptr, {{3, 2}, {5, 2, 4}}).at(0) == Shape{5, 3, 4}));
    BOOST_TEST((infer("MatMul", nullptr, {{2, 1, 3, 2}, {4, 2, 5}}).at(0) == Shape{2, 4, 3, 5}));
    BOOST_TEST((infer("MatMul", nullptr, {{1, 6, 3, 2}, {7, 1, 2, 5}}).at(0) == Shape{7, 6, 3, 5}));
    BOOST_TEST((infer("MatMul", nullptr, {{3, 0}, {0, 4}}).at(0) == Shape{3, 4}));  // k = 0

    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{3, 2}, {3, 4}}), ShapeError);  // inner differs
    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{3}, {3, 4}}), ShapeError);     // 1-D
    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{3, 4}, {4}}), ShapeError);
    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{}, {}}), ShapeError);
    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{2, 3, 2}, {3, 2, 4}}), ShapeError);  // batch 2 vs 3
    BOOST_CHECK_THROW(infer("MatMul", nullptr, {{2, 1, 3, 2}, {3, 4, 2, 5}}), ShapeError);

    try {
        infer("MatMul", nullptr, {{3, 2}, {3, 4}});
        BOOST_FAIL("no ShapeError");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("(3x2) · (3x4)") != std::string::npos, msg);
    }

    BOOST_CHECK_THROW(op_attrs("MatMul", {{"transpose_b", true}}), GraphError);

    GraphBuilder g;
    Value x = g.input("x", Tensor(literal<float>({2, 2}, {1, 2, 3, 4})));
    BOOST_CHECK_THROW(g.node("MatMul", {x}, op_attrs("MatMul")), GraphError);
    BOOST_CHECK_THROW(g.node("MatMul", {x, x, x}, op_attrs("MatMul")), GraphError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    // [[1,2],[3,4]]·[[5,6],[7,8]] = [[1*5+2*7, 1*6+2*8], [3*5+4*7, 3*6+4*8]] = [[19,22],[43,50]]
    check_close(forward<T>("MatMul", nullptr, {literal<T>({2, 2}, {1, 2, 3, 4}), literal<T>({2, 2}, {5, 6, 7, 8})}),
                {2, 2}, {19, 22, 43, 50}, 0);
    // (1,3)·(3,2): [1,-1,2]·[[1,2],[3,4],[5,6]] = [1-3+10, 2-4+12] = [8, 10]
    check_close(forward<T>("MatMul", nullptr, {literal<T>({1, 3}, {1, -1, 2}), literal<T>({3, 2}, {1, 2, 3, 4, 5, 6})}),
                {1, 2}, {8, 10}, 0);
    // a (1,2,2) = [[1,0],[0,2]] broadcast against three b's (3,2,2):
    //   [[1,1],[1,1]] -> [[1,1],[2,2]];  [[2,0],[0,2]] -> [[2,0],[0,4]];  [[0,1],[1,0]] -> [[0,1],[2,0]]
    check_close(
        forward<T>("MatMul", nullptr,
                   {literal<T>({1, 2, 2}, {1, 0, 0, 2}), literal<T>({3, 2, 2}, {1, 1, 1, 1, 2, 0, 0, 2, 0, 1, 1, 0})}),
        {3, 2, 2}, {1, 1, 2, 2, 2, 0, 0, 4, 0, 1, 2, 0}, 0);
    // a (2,1,2) = [[[1,2]], [[3,4]]] times a 2-D b (2,1) = [[1],[1]]: [[[3]], [[7]]]
    check_close(forward<T>("MatMul", nullptr, {literal<T>({2, 1, 2}, {1, 2, 3, 4}), literal<T>({2, 1}, {1, 1})}),
                {2, 1, 1}, {3, 7}, 0);
    // both batched, broadcast both ways: a (2,1,1,2), b (1,2,2,1) -> (2,2,1,1)
    //   a0 = [1,2], a1 = [3,4];  b0 = [5,6]ᵀ, b1 = [-1,1]ᵀ
    //   c[0][0] = 1*5+2*6 = 17, c[0][1] = -1+2 = 1, c[1][0] = 15+24 = 39, c[1][1] = -3+4 = 1
    check_close(forward<T>("MatMul", nullptr,
                           {literal<T>({2, 1, 1, 2}, {1, 2, 3, 4}), literal<T>({1, 2, 2, 1}, {5, 6, -1, 1})}),
                {2, 2, 1, 1}, {17, 1, 39, 1}, 0);
    // k = 0: an empty sum is 0
    check_close(forward<T>("MatMul", nullptr, {Array<T>::from_shape({2, 0}), Array<T>::from_shape({0, 3})}), {2, 3},
                {0, 0, 0, 0, 0, 0}, 0);
}

// c[batch.., i, j] = sum_p a[bcast(batch).., i, p] b[bcast(batch).., p, j], in double
template <class T>
std::vector<double> matmul_reference(const Array<T>& a, const Array<T>& b, Shape& cs) {
    const Shape as(a.shape().begin(), a.shape().end()), bs(b.shape().begin(), b.shape().end());
    const std::size_t m = as[as.size() - 2], k = as.back(), n = bs.back();
    const std::size_t rank = std::max(as.size(), bs.size());
    Shape batch(rank - 2);
    auto dim = [&](const Shape& s, std::size_t axis) {  // axis of the rank-aligned batch
        const std::size_t off = rank - s.size();
        return axis < off ? std::size_t{1} : s[axis - off];
    };
    for (std::size_t ax = 0; ax < rank - 2; ++ax) batch[ax] = std::max(dim(as, ax), dim(bs, ax));
    cs = batch;
    cs.push_back(m);
    cs.push_back(n);
    const std::size_t batches = element_count(batch);
    std::vector<double> c(batches * m * n);
    for (std::size_t bi = 0; bi < batches; ++bi) {
        const auto idx = unravel(bi, batch);
        std::size_t ao = 0, bo = 0;  // flat batch index into a and b
        for (std::size_t ax = 0; ax < rank - 2; ++ax) {
            const std::size_t da = dim(as, ax), db = dim(bs, ax);
            ao = ao * da + (da == 1 ? 0 : idx[ax]);
            bo = bo * db + (db == 1 ? 0 : idx[ax]);
        }
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) {
                double s = 0;
                for (std::size_t p = 0; p < k; ++p)
                    s += static_cast<double>(a.data()[ao * m * k + i * k + p]) * b.data()[bo * k * n + p * n + j];
                c[(bi * m + i) * n + j] = s;
            }
    }
    return c;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    const std::vector<std::pair<Shape, Shape>> cases = {
        {{3, 2}, {2, 4}},
        {{1, 7}, {7, 1}},
        {{200, 33}, {33, 150}},  // more rows than one GEMM block
        {{5, 3, 2}, {2, 4}},
        {{3, 2}, {5, 2, 4}},
        {{4, 6, 5}, {4, 5, 3}},
        {{2, 1, 3, 8}, {4, 8, 5}},
        {{1, 3, 9, 4}, {2, 1, 4, 6}},
        {{3, 1, 2, 130, 16}, {1, 2, 1, 16, 20}},
    };
    std::uint64_t seed = 300;
    for (const auto& [sa, sb] : cases) {
        BOOST_TEST_CONTEXT("a " << shape_str(sa) << " · b " << shape_str(sb)) {
            const auto a = random_array<T>(sa, ++seed);
            const auto b = random_array<T>(sb, ++seed);
            Shape cs;
            const auto want = matmul_reference(a, b, cs);
            check_close(forward<T>("MatMul", nullptr, {a, b}), cs, want, tol_for<T>(sa.back()));
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
