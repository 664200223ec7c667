// Conv: shape rule and its errors, forward against ONNX's documented examples and a direct
// plain-loop convolution (1, 2 and 3 spatial axes; strides, uneven pads, dilations, groups,
// a depthwise one; f64 and f32, bit-identical at 1, 2, 4 and 8 threads; patches large enough to
// go in column chunks), backward against the engine's gradcheck, the direct loop's partial
// derivatives and, for a 1-D case, by hand.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_conv)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {

/// The convolution by its definition: for every output element, the sum over its group's input
/// channels and every kernel offset of W times x at o·stride − pad + q·dilation (skipped
/// outside x), plus b. With dy: also dx and dW, each product's two partial derivatives.
Array<double> direct_conv(const Array<double>& x, const Array<double>& w, const Array<double>* b,
                          const std::vector<int>& stride, const std::vector<int>& pads, const std::vector<int>& dil,
                          int group, const Array<double>* dy = nullptr, Array<double>* dx = nullptr,
                          Array<double>* dw = nullptr) {
    const Shape xs = shape_of(x), ws = shape_of(w);
    const std::size_t k = xs.size() - 2, N = xs[0], C = xs[1], M = ws[0], Cg = C / group, Mg = M / group;
    Shape ys = {N, M};
    for (std::size_t d = 0; d < k; ++d)
        ys.push_back((xs[d + 2] + pads[d] + pads[d + k] - dil[d] * (ws[d + 2] - 1) - 1) / stride[d] + 1);
    Array<double> y = Array<double>::from_shape(ys);
    std::vector<std::size_t> o(k), q(k);
    const auto next = [](std::vector<std::size_t>& idx, const Shape& lim, std::size_t from) {
        for (std::size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < lim[d + from]) return true;
            idx[d] = 0;
        }
        return false;
    };
    std::size_t flat = 0;
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t m = 0; m < M; ++m) {
            std::fill(o.begin(), o.end(), 0);
            do {
                double s = b ? b->data()[m] : 0.0;
                for (std::size_t c = 0; c < Cg; ++c) {
                    const std::size_t ci = (m / Mg) * Cg + c;
                    std::fill(q.begin(), q.end(), 0);
                    do {
                        long xoff = 0, woff = 0;
                        bool inside = true;
                        for (std::size_t d = 0; d < k; ++d) {
                            const long p = long(o[d]) * stride[d] - pads[d] + long(q[d]) * dil[d];
                            inside = inside && p >= 0 && p < long(xs[d + 2]);
                            xoff = xoff * long(xs[d + 2]) + p;
                            woff = woff * long(ws[d + 2]) + long(q[d]);
                        }
                        if (inside) {
                            const std::size_t xsp = x.size() / (N * C), wsp = w.size() / (M * Cg);
                            const std::size_t wi = (m * Cg + c) * wsp + std::size_t(woff),
                                              xi = (n * C + ci) * xsp + std::size_t(xoff);
                            s += w.data()[wi] * x.data()[xi];
                            if (dy) {
                                dx->data()[xi] += w.data()[wi] * dy->data()[flat];
                                dw->data()[wi] += x.data()[xi] * dy->data()[flat];
                            }
                        }
                    } while (next(q, ws, 2));
                }
                y.data()[flat++] = s;
            } while (next(o, ys, 2));
        }
    return y;
}

/// The direct loop's output with dx and dW for output gradient dy (no bias).
struct Direct {
    Array<double> y, dx, dw;
};
Direct direct_with_gradients(const Array<double>& x, const Array<double>& w, const Array<double>& dy,
                             const std::vector<int>& stride, const std::vector<int>& pads, const std::vector<int>& dil,
                             int group) {
    Direct d;
    d.dx = Array<double>::from_shape(shape_of(x));
    d.dw = Array<double>::from_shape(shape_of(w));
    std::fill(d.dx.data(), d.dx.data() + d.dx.size(), 0.0);
    std::fill(d.dw.data(), d.dw.data() + d.dw.size(), 0.0);
    d.y = direct_conv(x, w, nullptr, stride, pads, dil, group, &dy, &d.dx, &d.dw);
    return d;
}

json conv_attrs(const std::vector<int>& stride, const std::vector<int>& pads, const std::vector<int>& dil, int group) {
    return {{"strides", stride}, {"pads", pads}, {"dilations", dil}, {"group", group}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_and_its_errors) {
    BOOST_TEST((infer("Conv", nullptr, {{1, 1, 5, 5}, {1, 1, 3, 3}})[0] == Shape{1, 1, 3, 3}));
    BOOST_TEST((infer("Conv", {{"pads", {1, 1, 1, 1}}}, {{1, 1, 5, 5}, {1, 1, 3, 3}})[0] == Shape{1, 1, 5, 5}));
    // a vision transformer's patch embedding: 16x16 patches, stride 16
    BOOST_TEST((infer("Conv", {{"strides", {16, 16}}}, {{2, 3, 224, 224}, {768, 3, 16, 16}, {768}})[0] ==
                Shape{2, 768, 14, 14}));
    // Whisper's front end: Conv1d k 3, pad 1, stride 2
    BOOST_TEST(
        (infer("Conv", {{"strides", {2}}, {"pads", {1, 1}}}, {{1, 80, 3000}, {384, 80, 3}})[0] == Shape{1, 384, 1500}));
    BOOST_TEST((infer("Conv", {{"dilations", {2}}, {"group", 2}}, {{1, 4, 9}, {6, 2, 3}})[0] == Shape{1, 6, 5}));
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{1, 5, 5}, {1, 3, 3}}), ShapeError);        // W's channels
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{1, 1, 5}, {1, 1, 3, 3}}), ShapeError);     // ranks differ
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{1, 1, 2, 2}, {1, 1, 3, 3}}), ShapeError);  // kernel too big
    BOOST_CHECK_THROW(infer("Conv", {{"group", 3}}, {{1, 4, 9}, {6, 2, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Conv", {{"strides", {1, 1}}}, {{1, 1, 9}, {1, 1, 3}}), ShapeError);  // 2 strides
    BOOST_CHECK_THROW(infer("Conv", {{"strides", {0}}}, {{1, 1, 9}, {1, 1, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Conv", {{"pads", {-1, 0}}}, {{1, 1, 9}, {1, 1, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{1, 1, 9}, {2, 1, 3}, {3}}), ShapeError);  // bias length
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{1, 9}, {1, 9}}), ShapeError);
    BOOST_CHECK_THROW(infer("Conv", {{"dilations", {1 << 30}}}, {{0, 1, 9}, {1, 1, std::size_t(1) << 40}}), ShapeError);
    BOOST_CHECK_THROW(infer("Conv", nullptr, {{0, 1, std::size_t(1) << 62}, {1, 1, 3}}), ShapeError);
    GraphBuilder g("t");
    Value x = g.input("x", zeros(DType::f32, {1, 3, 32, 32}));
    Value w = g.param("w", zeros(DType::f32, {8, 3, 4, 4}));
    Value b = g.param("b", zeros(DType::f32, {8}));
    ops::ConvAttrs patches, padded;
    patches.strides = {4, 4};
    padded.pads = {1, 1, 2, 2};
    BOOST_TEST((attngraph::conv(x, w, b, patches).shape() == Shape{1, 8, 8, 8}));
    BOOST_TEST((attngraph::conv(x, w, padded).shape() == Shape{1, 8, 32, 32}));
}

BOOST_AUTO_TEST_CASE(forward_onnx_examples) {
    // ONNX's Conv examples (its operator documentation): x 0..24 or 0..34, W a 3x3 of ones
    std::vector<double> x25(25), x35(35);
    for (std::size_t i = 0; i < 35; ++i) x35[i] = double(i);
    std::copy(x35.begin(), x35.begin() + 25, x25.begin());
    const Array<double> ones = array_of({1, 1, 3, 3}, std::vector<double>(9, 1.0));
    for (DType dt : {DType::f64, DType::f32}) {
        BOOST_TEST(rel_diff(run_one("Conv", {{"pads", {1, 1, 1, 1}}}, {array_of({1, 1, 5, 5}, x25), ones}, dt)[0],
                            array_of({1, 1, 5, 5}, {12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                                    117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84})) == 0.0);
        BOOST_TEST(rel_diff(run_one("Conv", nullptr, {array_of({1, 1, 5, 5}, x25), ones}, dt)[0],
                            array_of({1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162})) == 0.0);
        BOOST_TEST(rel_diff(run_one("Conv", {{"pads", {1, 1, 1, 1}}, {"strides", {2, 2}}},
                                    {array_of({1, 1, 7, 5}, x35), ones}, dt)[0],
                            array_of({1, 1, 4, 3}, {12, 27, 24, 63, 108, 81, 123, 198, 141, 112, 177, 124})) == 0.0);
        // strides 2, pads only on the height: (7 + 2 - 3) / 2 + 1 = 4 rows, (5 - 3) / 2 + 1 = 2 columns
        BOOST_TEST(rel_diff(run_one("Conv", {{"pads", {1, 0, 1, 0}}, {"strides", {2, 2}}},
                                    {array_of({1, 1, 7, 5}, x35), ones}, dt)[0],
                            array_of({1, 1, 4, 2}, {21, 33, 99, 117, 189, 207, 171, 183})) == 0.0);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_a_direct_convolution) {
    struct Case {
        Shape x, w;
        std::vector<int> stride, pads, dil;
        int group;
        bool bias;
    };
    const std::vector<Case> cases = {
        {{2, 3, 11}, {4, 3, 3}, {2}, {1, 2}, {1}, 1, true},                                      // 1-D, uneven pads
        {{1, 4, 9, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2, true},                     // groups, dilation
        {{2, 3, 8, 8}, {5, 3, 4, 4}, {4, 4}, {0, 0, 0, 0}, {1, 1}, 1, false},                    // patch embedding
        {{1, 4, 6, 5}, {4, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4, true},                     // depthwise
        {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {0, 1, 1, 0, 1, 0}, {1, 1, 2}, 1, true}};  // 3-D
    unsigned seed = 10;
    for (const Case& c : cases) {
        const Array<double> x = uniform_array(c.x, seed++), w = uniform_array(c.w, seed++),
                            b = uniform_array({c.w[0]}, seed++);
        const Array<double> want = direct_conv(x, w, c.bias ? &b : nullptr, c.stride, c.pads, c.dil, c.group);
        Doubles in = {x, w};
        if (c.bias) in.push_back(b);
        BOOST_TEST_CONTEXT("x (" << shape_str(c.x) << "), W (" << shape_str(c.w) << ")") {
            check_against_reference("Conv", conv_attrs(c.stride, c.pads, c.dil, c.group), in, {want}, 1e-13, 1e-5);
        }
    }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Conv", conv_attrs({2}, {1, 2}, {1}, 1),
                         {uniform_array({2, 3, 9}, 1), uniform_array({4, 3, 3}, 2), uniform_array({4}, 3)},
                         {true, true, true}) < 1e-8);
    BOOST_TEST(gradcheck("Conv", conv_attrs({2, 1}, {1, 0, 2, 1}, {2, 1}, 2),
                         {uniform_array({2, 4, 7, 5}, 4), uniform_array({6, 2, 3, 2}, 5), uniform_array({6}, 6)},
                         {true, true, true}) < 1e-8);
    BOOST_TEST(gradcheck("Conv", conv_attrs({1, 2, 1}, {0, 1, 1, 0, 1, 0}, {1, 1, 2}, 1),
                         {uniform_array({1, 2, 3, 4, 3}, 7), uniform_array({2, 2, 2, 2, 2}, 8)}, {true, true}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(large_patches_go_in_column_chunks) {
    // 64 channels of 8x8 patches: 4096 rows of cols, so 1024 output positions a chunk (cols at
    // most 2^22 values); 33x33 = 1089 positions: a chunk of 1024 and one of 65. Forward and
    // backward against the direct loop (dx and dW its partial derivatives, dy uniform noise)
    const Array<double> x = uniform_array({1, 64, 40, 40}, 21), w = uniform_array({2, 64, 8, 8}, 22),
                        dy = uniform_array({1, 2, 33, 33}, 23);
    const Direct want = direct_with_gradients(x, w, dy, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1);
    check_against_reference("Conv", nullptr, {x, w}, {want.y}, 1e-12, 1e-4);  // f32: sums of 4096 products
    const auto d = backward_all<double>("Conv", nullptr, {x, w}, {dy}, {true, true});
    BOOST_TEST(rel_diff(d[0], want.dx) <= 1e-12);
    BOOST_TEST(rel_diff(d[1], want.dw) <= 1e-12);
}

BOOST_AUTO_TEST_CASE(backward_matches_the_direct_loop) {
    // strides, uneven pads, dilation and groups, with the direct loop's partial derivatives
    const Array<double> x = uniform_array({2, 4, 9, 7}, 31), w = uniform_array({6, 2, 3, 2}, 32),
                        dy = uniform_array({2, 6, 4, 7}, 33);
    const Direct want = direct_with_gradients(x, w, dy, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2);
    BOOST_TEST_REQUIRE((shape_of(want.y) == Shape{2, 6, 4, 7}));
    const auto d =
        backward_all<double>("Conv", conv_attrs({2, 1}, {1, 0, 2, 1}, {2, 1}, 2), {x, w}, {dy}, {true, true});
    BOOST_TEST(rel_diff(d[0], want.dx) <= 1e-12);
    BOOST_TEST(rel_diff(d[1], want.dw) <= 1e-12);
}

BOOST_AUTO_TEST_CASE(backward_by_hand) {
    // 1-D, one channel: x (1, 1, 4) = 1 2 3 4, W = (1, 1, 2) = 10 20, pads 1 1: y has 5 taps
    // y[o] = W0·x[o−1] + W1·x[o]. dy = 1 1 1 1 1: dx[i] = W0 + W1 (each x is read by both
    // offsets) = 30, dW0 = sum x = 10 = dW1, db = 5
    const Array<double> x = array_of({1, 1, 4}, {1, 2, 3, 4}), w = array_of({1, 1, 2}, {10, 20}),
                        b = array_of({1}, {0});
    const json a = {{"pads", {1, 1}}};
    BOOST_TEST(rel_diff(run_one("Conv", a, {x, w, b}, DType::f64)[0], array_of({1, 1, 5}, {20, 50, 80, 110, 40})) ==
               0.0);
    const auto d =
        backward_all<double>("Conv", a, {x, w, b}, {array_of({1, 1, 5}, {1, 1, 1, 1, 1})}, {true, true, true});
    BOOST_TEST(rel_diff(d[0], array_of({1, 1, 4}, {30, 30, 30, 30})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({1, 1, 2}, {10, 10})) == 0.0);
    BOOST_TEST(rel_diff(d[2], array_of({1}, {5})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
