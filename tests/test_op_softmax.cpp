// Softmax: shape rule (axis in range), forward against hand-computed numbers (including
// axis 0, large inputs that overflow without the max subtraction, a fully masked row), and
// against a plain-loop reference on random shapes and every axis.
#include <cmath>
#include <cstring>
#include <limits>

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/builder.hpp"
#include "engine/softmax_kernel.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_softmax)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using Types = boost::mpl::list<float, double>;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(softmax_op)

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Softmax", nullptr, {{3, 4}}).at(0) == Shape{3, 4}));  // axis defaults to -1
    BOOST_TEST((infer("Softmax", {{"axis", 0}}, {{3, 4}}).at(0) == Shape{3, 4}));
    BOOST_TEST((infer("Softmax", {{"axis", -3}}, {{2, 3, 4}}).at(0) == Shape{2, 3, 4}));
    BOOST_TEST((infer("Softmax", {{"axis", 2}}, {{2, 3, 4}}).at(0) == Shape{2, 3, 4}));
    BOOST_TEST((infer("Softmax", nullptr, {{5}}).at(0) == Shape{5}));

    BOOST_CHECK_THROW(infer("Softmax", {{"axis", 2}}, {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Softmax", {{"axis", -3}}, {{3, 4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Softmax", nullptr, {{}}), ShapeError);  // a scalar has no axis
    try {
        infer("Softmax", {{"axis", 5}}, {{3, 4}});
        BOOST_FAIL("no ShapeError");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("axis 5") != std::string::npos, msg);
        BOOST_TEST(msg.find("rank 2") != std::string::npos, msg);
    }

    BOOST_CHECK_THROW(op_attrs("Softmax", {{"axis", 1.5}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Softmax", {{"axis", "-1"}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Softmax", {{"axis", true}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Softmax", {{"axis", 4294967295LL}}), GraphError);  // does not fit an int
    BOOST_CHECK_THROW(op_attrs("Softmax", {{"dim", 1}}), GraphError);
    BOOST_CHECK_THROW(op_attrs("Softmax", json::array({1})), GraphError);

    GraphBuilder g;
    Value x = g.input("x", Tensor(literal<float>({2}, {1, 2})));
    BOOST_CHECK_THROW(g.node("Softmax", {x, x}, op_attrs("Softmax")), GraphError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_by_hand, T, Types) {
    const double tol = std::is_same_v<T, float> ? 1e-7 : 1e-15;
    const double ln3 = std::log(3.0);
    // softmax([0, ln 3]) = [1, 3] / 4
    check_close(forward<T>("Softmax", nullptr, {literal<T>({1, 2}, {0, ln3})}), {1, 2}, {0.25, 0.75}, tol);
    // equal entries: uniform
    check_close(forward<T>("Softmax", nullptr, {literal<T>({2, 2}, {0, 0, 1, 1})}), {2, 2}, {0.5, 0.5, 0.5, 0.5}, tol);
    // softmax([0, 1, 2]) = [1, e, e^2] / (1 + e + e^2) = [0.090031, 0.244728, 0.665241] (the seed's head1.A row 3)
    check_close(forward<T>("Softmax", nullptr, {literal<T>({3}, {0, 1, 2})}), {3},
                {0.0900305732, 0.2447284711, 0.6652409558}, std::is_same_v<T, float> ? 1e-7 : 1e-10);
    // large inputs: exp(1000) overflows without the max subtraction
    check_close(forward<T>("Softmax", nullptr, {literal<T>({2}, {1000, 1000 + ln3})}), {2}, {0.25, 0.75},
                std::is_same_v<T, float> ? 1e-4 : 1e-12);  // 1000 + ln 3 is rounded to T
    // axis 0 on (2,2): columns [0, ln 3] and [0, 0]
    check_close(forward<T>("Softmax", {{"axis", 0}}, {literal<T>({2, 2}, {0, 0, ln3, 0})}), {2, 2},
                {0.25, 0.5, 0.75, 0.5}, tol);
    // middle axis of (1,2,2): x[0] = [[0, 0], [ln 3, 0]]
    check_close(forward<T>("Softmax", {{"axis", 1}}, {literal<T>({1, 2, 2}, {0, 0, ln3, 0})}), {1, 2, 2},
                {0.25, 0.5, 0.75, 0.5}, tol);
    // a fully masked row gives zeros, a partly masked row ignores -inf
    const double inf = std::numeric_limits<double>::infinity();
    check_close(forward<T>("Softmax", nullptr, {literal<T>({2, 3}, {-inf, -inf, -inf, -inf, 0, ln3})}), {2, 3},
                {0, 0, 0, 0, 0.25, 0.75}, tol);
}

// A row with a NaN gives NaN (as numpy's and PyTorch's softmax give), also where every other
// value is -inf and the maximum alone would call the row fully masked: short rows, rows with a
// tail, along axis 0, and on a span (a NaN score the fused step keeps; a NaN sink column).
BOOST_AUTO_TEST_CASE_TEMPLATE(nan_rows_give_nan, T, Types) {
    const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    for (std::size_t len : {3u, 20u}) {
        std::vector<T> masked(2 * len, -inf), mixed(2 * len);
        masked[len + len - 1] = nan;  // row 0 all -inf, row 1 -inf and a NaN
        for (std::size_t j = 0; j < 2 * len; ++j) mixed[j] = j == 1 ? nan : static_cast<T>(j % 5);
        for (const auto& [x, row0_nan] : {std::pair{masked, false}, std::pair{mixed, true}})
            BOOST_TEST_CONTEXT("len " << len << (row0_nan ? ", finite and NaN" : ", -inf and NaN")) {
                const auto y = forward<T>("Softmax", nullptr, {literal<T>({2, len}, std::vector<double>(x.begin(), x.end()))});
                for (std::size_t j = 0; j < len; ++j) {
                    if (row0_nan) {  // row 1 finite
                        BOOST_TEST(std::isnan(y.data()[j]) == true, "row 0, " << j);
                        BOOST_TEST(std::isfinite(y.data()[len + j]) == true, "row 1, " << j);
                    } else {
                        BOOST_TEST(y.data()[j] == T(0), "row 0, " << j);
                        BOOST_TEST(std::isnan(y.data()[len + j]) == true, "row 1, " << j);
                    }
                }
                // the same rows along axis 0 (the strided path)
                std::vector<T> xt(2 * len);
                for (std::size_t r = 0; r < 2; ++r)
                    for (std::size_t j = 0; j < len; ++j) xt[j * 2 + r] = x[r * len + j];
                const auto yt =
                    forward<T>("Softmax", {{"axis", 0}}, {literal<T>({len, 2}, std::vector<double>(xt.begin(), xt.end()))});
                for (std::size_t j = 0; j < len; ++j) {
                    BOOST_TEST(std::isnan(yt.data()[j * 2]) == row0_nan, "axis 0, row 0, " << j);
                    BOOST_TEST(std::isnan(yt.data()[j * 2 + 1]) == !row0_nan, "axis 0, row 1, " << j);
                    if (!row0_nan) BOOST_TEST(yt.data()[j * 2] == T(0), "axis 0, row 0, " << j);
                }
            }
    }
    // spans: a NaN inside [lo, hi) of a row -inf elsewhere; an empty span with a NaN sink
    const std::size_t len = 20, lo = 4, hi = 9;
    std::vector<T> x(hi - lo, -inf), y(hi - lo, T(42));
    x[2] = nan;
    softmax_spans<T>(x.data(), 0, y.data(), 0, lo, 1, &lo, &hi, len, T(1), false);
    for (T v : y) BOOST_TEST(std::isnan(v) == true);
    T last = nan, none = T(42);
    const std::size_t at = 3;
    softmax_spans<T>(&none, 0, &none, 0, at, 1, &at, &at, len, T(1), false, &last);
    BOOST_TEST(std::isnan(last) == true);
    last = -inf;
    softmax_spans<T>(&none, 0, &none, 0, at, 1, &at, &at, len, T(1), false, &last);
    BOOST_TEST(last == T(0));  // every value -inf: fully masked
}

// y = exp(x - max) / sum exp(x - max) along `axis`, in double
template <class T>
std::vector<double> softmax_reference(const Array<T>& x, std::size_t axis) {
    const Shape s(x.shape().begin(), x.shape().end());
    const auto st = strides_of(s);
    std::vector<double> y(x.size());
    for (std::size_t f = 0; f < x.size(); ++f) {
        if (unravel(f, s)[axis] != 0) continue;  // f starts a line along axis
        double mx = -INFINITY, sum = 0;
        for (std::size_t i = 0; i < s[axis]; ++i) mx = std::max(mx, static_cast<double>(x.data()[f + i * st[axis]]));
        for (std::size_t i = 0; i < s[axis]; ++i) sum += std::exp(x.data()[f + i * st[axis]] - mx);
        for (std::size_t i = 0; i < s[axis]; ++i) y[f + i * st[axis]] = std::exp(x.data()[f + i * st[axis]] - mx) / sum;
    }
    return y;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_random_against_loops, T, Types) {
    const std::vector<Shape> shapes = {{1}, {7}, {3, 4}, {1, 5}, {4, 1}, {2, 3, 4}, {300, 257}, {3, 2, 5, 4}};
    std::uint64_t seed = 700;
    for (const auto& s : shapes) {
        auto x = random_array<T>(s, ++seed);
        for (auto& v : x) v *= T(8);  // spread the logits
        for (int axis = -static_cast<int>(s.size()); axis < static_cast<int>(s.size()); ++axis) {
            BOOST_TEST_CONTEXT("x " << shape_str(s) << ", axis " << axis) {
                const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(s.size()) : axis);
                check_close(forward<T>("Softmax", {{"axis", axis}}, {x}), s, softmax_reference(x, ax),
                            std::is_same_v<T, float> ? 1e-6 : 1e-14);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_row_sum_against_a_long_double_loop, T, Types) {
    // the backward's rowsum(y ⊙ dy) in 16 partial sums: every length's body and tail
    for (std::size_t len : {0u, 1u, 15u, 16u, 17u, 33u, 150u, 1000u}) {
        const auto y = random_array<T>({len + 1}, 900 + len), dy = random_array<T>({len + 1}, 950 + len);
        long double want = 0, scale = 0;
        for (std::size_t i = 0; i < len; ++i) {
            want += static_cast<long double>(y[i]) * static_cast<long double>(dy[i]);
            scale += std::fabs(static_cast<long double>(y[i]) * static_cast<long double>(dy[i]));
        }
        const T got = softmax_backward_dot(y.data(), dy.data(), len);
        BOOST_TEST_CONTEXT("len " << len) {
            BOOST_TEST(std::fabs(static_cast<long double>(got) - want) <=
                       (std::is_same_v<T, float> ? 1e-6L : 1e-15L) * (scale + 1e-30L));
            if (len == 0) BOOST_TEST(got == T(0));
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_row_sum_over_a_span_has_the_whole_rows_bits, T, Types) {
    // a masked row: y = 0 outside [lo, lo + len); the sum over the span alone has the same
    // bits as the whole row's, for every lo and len modulo 16 (and empty spans)
    constexpr std::size_t m = 100;
    const auto dy = random_array<T>({m}, 977);
    for (std::size_t lo = 0; lo <= 40; ++lo) {
        for (std::size_t len = 0; lo + len <= m; len += 1 + len / 8) {
            std::vector<T> y(m, T(0));
            const auto vals = random_array<T>({m}, 978 + lo);
            std::copy_n(vals.begin() + static_cast<std::ptrdiff_t>(lo), len, y.begin() + static_cast<std::ptrdiff_t>(lo));
            const T whole = softmax_backward_dot(y.data(), dy.data(), m);
            const T span = softmax_backward_dot(y.data() + lo, dy.data() + lo, len);
            BOOST_TEST_CONTEXT("lo " << lo << ", len " << len) {
                BOOST_TEST(std::memcmp(&whole, &span, sizeof(T)) == 0);
                if (len == 0) BOOST_TEST(span == T(0));
            }
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
