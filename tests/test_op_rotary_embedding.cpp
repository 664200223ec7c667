// RotaryEmbedding: shape rule (ONNX opset 23: 4-D (B, H, S, D) or 3-D (B, S, H·D) with
// num_heads; caches (P, R/2) with position_ids or (B, S, R/2) without), forward against
// hand-computed rotations and a plain loop written from the ONNX definition (f64, f32;
// bit-identical at 1, 2 and 4 threads), backward against the engine's gradcheck (position ids
// not perturbed), and the errors: odd head size or rotary dim, position ids past the cache.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_rotary_embedding)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST(
        (infer("RotaryEmbedding", nullptr, {{2, 3, 5, 8}, {10, 4}, {10, 4}, {2, 5}})[0] == Shape{2, 3, 5, 8}));
    BOOST_TEST(
        (infer("RotaryEmbedding", nullptr, {{2, 3, 5, 8}, {10, 4}, {10, 4}, {1, 5}})[0] == Shape{2, 3, 5, 8}));
    BOOST_TEST((infer("RotaryEmbedding", nullptr, {{2, 3, 5, 8}, {2, 5, 4}, {2, 5, 4}})[0] == Shape{2, 3, 5, 8}));
    BOOST_TEST((infer("RotaryEmbedding", {{"num_heads", 3}}, {{2, 5, 24}, {10, 4}, {10, 4}, {2, 5}})[0] ==
                Shape{2, 5, 24}));
    BOOST_TEST((infer("RotaryEmbedding", {{"rotary_embedding_dim", 4}},
                          {{2, 3, 5, 8}, {10, 2}, {10, 2}, {2, 5}})[0] == Shape{2, 3, 5, 8}));
    auto fails = [](const json& attrs, const std::vector<Shape>& in, const std::string& part) {
        try {
            infer("RotaryEmbedding", attrs, in);
            BOOST_FAIL("no error for " << part);
        } catch (const ShapeError& e) {
            BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
        }
    };
    fails(nullptr, {{2, 3, 5, 7}, {10, 3}, {10, 3}, {2, 5}}, "head size 7 of x (2x3x5x7) is odd");
    fails({{"rotary_embedding_dim", 3}}, {{2, 3, 5, 8}, {10, 1}, {10, 1}, {2, 5}}, "rotary_embedding_dim 3");
    fails({{"rotary_embedding_dim", 10}}, {{2, 3, 5, 8}, {10, 5}, {10, 5}, {2, 5}}, "exceeds the head size 8");
    fails(nullptr, {{2, 5, 24}, {10, 4}, {10, 4}, {2, 5}}, "give num_heads");
    fails({{"num_heads", 5}}, {{2, 5, 24}, {10, 4}, {10, 4}, {2, 5}}, "not a multiple of num_heads 5");
    fails({{"num_heads", 2}}, {{2, 3, 5, 8}, {10, 4}, {10, 4}, {2, 5}}, "num_heads 2 disagrees");
    fails(nullptr, {{2, 3, 5, 8}, {10, 3}, {10, 3}, {2, 5}}, "cos_cache (10x3) must be (max positions, 4)");
    fails(nullptr, {{2, 3, 5, 8}, {10, 4}, {10, 4}, {3, 5}}, "position_ids (3x5)");
    fails(nullptr, {{2, 3, 5, 8}, {10, 4}, {9, 4}, {2, 5}}, "differ");
    fails(nullptr, {{2, 3, 5, 8}, {10, 4}, {10, 4}}, "without position_ids");
    fails(nullptr, {{3, 5, 8}, {10, 4}, {10, 4}}, "3-D");
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // one head of size 4, position 1 of a cache with angles 90° (pair 0) and 180° (pair 1):
    // pairs (x0, x2), (x1, x3) rotate: (1, 0) -> (0, 1), (2, 3) -> (-2, -3)
    const Array<double> cos = array_of({2, 2}, {1, 1, 0, -1}), sin = array_of({2, 2}, {0, 0, 1, 0});
    const Array<double> x = array_of({1, 1, 1, 4}, {1, 2, 0, 3}), pos = array_of({1, 1}, {1});
    BOOST_TEST(rel_diff(run_one("RotaryEmbedding", nullptr, {x, cos, sin, pos}, DType::f64)[0],
                        array_of({1, 1, 1, 4}, {0, -2, 1, -3})) == 0.0);
    // interleaved: pairs (x0, x1), (x2, x3): (1, 2) -> (-2, 1), (0, 3) -> (0, -3)
    BOOST_TEST(rel_diff(run_one("RotaryEmbedding", {{"interleaved", 1}}, {x, cos, sin, pos}, DType::f64)[0],
                        array_of({1, 1, 1, 4}, {-2, 1, 0, -3})) == 0.0);
    // position 0: the identity
    BOOST_TEST(rel_diff(run_one("RotaryEmbedding", nullptr, {x, cos, sin, array_of({1, 1}, {0})}, DType::f64)[0], x) ==
               0.0);
}

// The ONNX definition as loops: x viewed as [b][s][h][d] (4-D input is (B, H, S, D)); angle
// row = position_ids[b or 0][s] (or b·S + s without ids); pairs by halves or interleaved.
Array<double> reference(const Array<double>& x, const Array<double>& cos, const Array<double>& sin,
                        const Array<double>* pos, bool interleaved, std::size_t rot, std::size_t heads) {
    const bool four = x.dimension() == 4;
    const std::size_t B = x.shape()[0], S = four ? x.shape()[2] : x.shape()[1];
    const std::size_t H = four ? x.shape()[1] : heads, D = four ? x.shape()[3] : x.shape()[2] / heads;
    if (rot == 0) rot = D;
    Array<double> y = x;
    auto at = [&](std::size_t b, std::size_t s, std::size_t h, std::size_t d) -> std::size_t {
        return four ? ((b * H + h) * S + s) * D + d : (b * S + s) * H * D + h * D + d;
    };
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t s = 0; s < S; ++s) {
            std::size_t row = b * S + s;
            if (pos) row = static_cast<std::size_t>(pos->shape()[0] == 1 ? (*pos)(0, s) : (*pos)(b, s));
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t i = 0; i < rot / 2; ++i) {
                    const std::size_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + rot / 2;
                    const double c = cos.data()[row * (rot / 2) + i], sn = sin.data()[row * (rot / 2) + i];
                    const double x1 = x.data()[at(b, s, h, i1)], x2 = x.data()[at(b, s, h, i2)];
                    y.data()[at(b, s, h, i1)] = c * x1 - sn * x2;
                    y.data()[at(b, s, h, i2)] = sn * x1 + c * x2;
                }
        }
    return y;
}

// Llama's caches for positions 0..P-1: angle p · theta^(-2i/R)
std::pair<Array<double>, Array<double>> caches(std::size_t P, std::size_t half, double theta = 10000) {
    Array<double> c = Array<double>::from_shape({P, half}), s = Array<double>::from_shape({P, half});
    for (std::size_t p = 0; p < P; ++p)
        for (std::size_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / (2.0 * half));
            c(p, i) = std::cos(angle);
            s(p, i) = std::sin(angle);
        }
    return {c, s};
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> x4 = uniform_array({2, 4, 30, 64}, 1);
    const auto [c, s] = caches(50, 32);
    Array<double> pos = Array<double>::from_shape({2, 30});
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t t = 0; t < 30; ++t) pos(b, t) = static_cast<double>(b * 7 + t);
    for (int inter : {0, 1})
        check_against_reference("RotaryEmbedding", {{"interleaved", inter}}, {x4, c, s, pos},
                                {reference(x4, c, s, &pos, inter, 0, 0)}, 1e-15, 1e-6);
    // partial rotation: the first 16 of 64 features
    const auto [c16, s16] = caches(50, 8);
    check_against_reference("RotaryEmbedding", {{"rotary_embedding_dim", 16}}, {x4, c16, s16, pos},
                            {reference(x4, c16, s16, &pos, false, 16, 0)}, 1e-15, 1e-6);
    // 3-D input with num_heads, ids shared over the batch
    const Array<double> x3 = uniform_array({2, 30, 4 * 64}, 2);
    Array<double> pos1 = Array<double>::from_shape({1, 30});
    for (std::size_t t = 0; t < 30; ++t) pos1(0, t) = static_cast<double>(49 - t);
    check_against_reference("RotaryEmbedding", {{"num_heads", 4}, {"interleaved", 1}}, {x3, c, s, pos1},
                            {reference(x3, c, s, &pos1, true, 0, 4)}, 1e-15, 1e-6);
    // no position ids: caches (B, S, R/2)
    Array<double> cb = Array<double>::from_shape({2, 30, 32}), sb = Array<double>::from_shape({2, 30, 32});
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t t = 0; t < 30; ++t)
            for (std::size_t i = 0; i < 32; ++i) {
                cb(b, t, i) = c(b * 7 + t, i);
                sb(b, t, i) = s(b * 7 + t, i);
            }
    check_against_reference("RotaryEmbedding", nullptr, {x4, cb, sb}, {reference(x4, cb, sb, nullptr, false, 0, 0)},
                            1e-15, 1e-6);
    // and the same rotation as with the ids
    BOOST_TEST(rel_diff(run_one("RotaryEmbedding", nullptr, {x4, cb, sb}, DType::f64)[0],
                        run_one("RotaryEmbedding", nullptr, {x4, c, s, pos}, DType::f64)[0]) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    const auto [c, s] = caches(6, 2);
    const Array<double> pos = array_of({2, 3}, {0, 2, 5, 1, 1, 3});  // a repeated id: cache gradients add up
    for (int inter : {0, 1}) {
        std::vector<Tensor> in{Tensor(uniform_array({2, 2, 3, 4}, 1)), Tensor(c), Tensor(s), Tensor(pos)};
        const GradcheckResult r = gradcheck_op("RotaryEmbedding", {{"interleaved", inter}}, in);
        BOOST_TEST(r.entries.size() == 3u);  // x and the caches; not the ids
        BOOST_TEST(r.max_rel_error < 1e-8);
    }
    BOOST_TEST(gradcheck("RotaryEmbedding", {{"num_heads", 2}, {"rotary_embedding_dim", 2}},
                          {uniform_array({2, 3, 8}, 2), uniform_array({2, 3, 1}, 3), uniform_array({2, 3, 1}, 4)}) <
               1e-8);
}

BOOST_AUTO_TEST_CASE(position_past_the_cache_names_node_and_id) {
    const auto [c, s] = caches(4, 2);
    GraphBuilder g("t", DType::f64);
    Value x = g.input("x", Tensor(uniform_array({1, 1, 3, 4}, 1)));
    Value pos = g.input("pos", Tensor(array_of({1, 3}, {0, 4, 1})));
    g.output(rotary_embedding(x, g.param("cos", Tensor(c)), g.param("sin", Tensor(s)), pos).named("q_rot"));
    const Graph graph = g.build();
    try {
        run(graph);
        BOOST_FAIL("no error");
    } catch (const ValueError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("node 'q_rot' (RotaryEmbedding)") != std::string::npos, msg);
        BOOST_TEST(msg.find("position id 4 at [0, 1]") != std::string::npos, msg);
        BOOST_TEST(msg.find("past the cache of 4 positions") != std::string::npos, msg);
    }
    BOOST_CHECK_THROW(run_one("RotaryEmbedding", nullptr,
                              {uniform_array({1, 1, 1, 4}, 1), c, s, array_of({1, 1}, {-1})}, DType::f64),
                      ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
