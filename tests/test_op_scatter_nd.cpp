// ScatterND: shape rule, forward against ONNX's examples and a plain loop (f64, f32;
// bit-identical at 1, 2, 4 and 8 threads), bad indices as ValueErrors, backward against the
// engine's gradcheck and by hand where two tuples name one slice (the later one is kept).
// The reductions (add, mul, max, min): ONNX's examples, a plain loop over repeated tuples,
// gradcheck, and by hand (the rules are ScatterElements', ops/scatter_reduction.hpp).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_scatter_nd)  // one suite a file: the op tests share one program

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json reducing(const std::string& r) {
    return {{"reduction", r}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_is_datas) {
    BOOST_TEST((infer("ScatterND", nullptr, {{8}, {4, 1}, {4}})[0] == Shape{8}));
    BOOST_TEST((infer("ScatterND", nullptr, {{4, 4, 4}, {2, 1}, {2, 4, 4}})[0] == Shape{4, 4, 4}));
    BOOST_TEST((infer("ScatterND", nullptr, {{2, 3, 5}, {4, 3}, {4}})[0] == Shape{2, 3, 5}));
    BOOST_CHECK_THROW(infer("ScatterND", nullptr, {{8}, {4, 2}, {4}}), ShapeError);           // tuple > rank
    BOOST_CHECK_THROW(infer("ScatterND", nullptr, {{4, 4, 4}, {2, 1}, {2, 4}}), ShapeError);  // updates
    BOOST_CHECK_THROW(infer("ScatterND", nullptr, {{8}, {}, {}}), ShapeError);
    GraphBuilder g("t");
    Value d = g.input("d", zeros(DType::f32, {8}));
    Value i = g.input("i", zeros(DType::f32, {4, 1}));
    Value u = g.input("u", zeros(DType::f32, {4}));
    BOOST_TEST((attngraph::scatter_nd(d, i, u).shape() == Shape{8}));
    BOOST_TEST(!op_def("ScatterND").has_grad(1));
}

BOOST_AUTO_TEST_CASE(forward_onnx_examples) {
    // ONNX's ScatterND examples (its operator documentation)
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles a = run_one(
            "ScatterND", nullptr,
            {array_of({8}, {1, 2, 3, 4, 5, 6, 7, 8}), array_of({4, 1}, {4, 3, 1, 7}), array_of({4}, {9, 10, 11, 12})},
            dt);
        BOOST_TEST(rel_diff(a[0], array_of({8}, {1, 11, 3, 10, 9, 6, 7, 12})) == 0.0);
        // data (4, 4, 4): slices 0 and 2 replaced by (4, 4) blocks of 5s..8s and 1s..4s
        const std::vector<double> fwd = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1},
                                  bwd = {8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8},
                                  fives = {5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8},
                                  ones = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4};
        auto join = [](std::initializer_list<const std::vector<double>*> parts) {
            std::vector<double> v;
            for (const auto* p : parts) v.insert(v.end(), p->begin(), p->end());
            return v;
        };
        const std::vector<double> data = join({&fwd, &fwd, &bwd, &bwd}), upd = join({&fives, &ones}),
                                  want = join({&fives, &fwd, &ones, &bwd});
        const Doubles b = run_one("ScatterND", nullptr,
                                  {array_of({4, 4, 4}, data), array_of({2, 1}, {0, 2}), array_of({2, 4, 4}, upd)}, dt);
        BOOST_TEST(rel_diff(b[0], array_of({4, 4, 4}, want)) == 0.0);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // (2, 3, 64, 16): 6 tuples of two entries (batch, head), negative ones among them, each
    // writing a (64, 16) slice; and 7 full tuples writing single elements
    const Array<double> data = uniform_array({2, 3, 64, 16}, 1);
    const std::vector<double> pairs = {0, 1, 1, -1, -2, 0, 1, 0, 0, 2, 1, 1};
    const Array<double> upd = uniform_array({6, 64, 16}, 2);
    Array<double> ref = data;
    for (std::size_t t = 0; t < 6; ++t) {
        const std::size_t b = static_cast<std::size_t>((pairs[2 * t] + 2)) % 2,
                          h = static_cast<std::size_t>((pairs[2 * t + 1] + 3)) % 3;
        for (std::size_t i = 0; i < 64 * 16; ++i) ref.data()[(b * 3 + h) * 64 * 16 + i] = upd.data()[t * 64 * 16 + i];
    }
    check_against_reference("ScatterND", nullptr, {data, array_of({6, 2}, pairs), upd}, {ref}, 0, 1e-7);
    const std::vector<double> full = {0, 0, 0, 0, 1, 2, 63, 15, 1, -1, -64, -16, 0, 1,
                                      5, 5, 1, 0, 7, 3, 0,  2,  9, 0,  1,   1,   1, 1};
    const Array<double> vals = uniform_array({7}, 3);
    Array<double> ref2 = data;
    for (std::size_t t = 0; t < 7; ++t) {
        const double* q = &full[4 * t];
        const std::size_t b = static_cast<std::size_t>(q[0] + 2) % 2, h = static_cast<std::size_t>(q[1] + 3) % 3,
                          p = static_cast<std::size_t>(q[2] + 64) % 64, k = static_cast<std::size_t>(q[3] + 16) % 16;
        ref2.data()[((b * 3 + h) * 64 + p) * 16 + k] = vals.data()[t];
    }
    check_against_reference("ScatterND", nullptr, {data, array_of({7, 4}, full), vals}, {ref2}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(bad_indices_are_value_errors) {
    const Array<double> data = array_of({2, 3}, {1, 2, 3, 4, 5, 6}), upd = array_of({1}, {9});
    for (const std::vector<double>& bad : std::vector<std::vector<double>>{
             {2, 0}, {0, 3}, {-3, 0}, {0, 0.5}, {std::numeric_limits<double>::quiet_NaN(), 0}})
        BOOST_CHECK_THROW(run_one("ScatterND", nullptr, {data, array_of({1, 2}, bad), upd}, DType::f64), ValueError);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("ScatterND", nullptr,
                         {uniform_array({3, 4, 2}, 1), array_of({2, 2}, {0, 1, 2, 3}), uniform_array({2, 2}, 2)},
                         {true, false, true}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_gives_a_slice_written_twice_to_the_later_tuple) {
    // rows [1], [0], [1] of a (3, 2) matrix: row 1 keeps the third update, row 0 the second
    const Array<double> data = array_of({3, 2}, {1, 2, 3, 4, 5, 6}), idx = array_of({3, 1}, {1, 0, 1}),
                        upd = array_of({3, 2}, {10, 11, 20, 21, 30, 31});
    BOOST_TEST(rel_diff(run_one("ScatterND", nullptr, {data, idx, upd}, DType::f64)[0],
                        array_of({3, 2}, {20, 21, 30, 31, 5, 6})) == 0.0);
    const auto d = backward_all<double>("ScatterND", nullptr, {data, idx, upd}, {array_of({3, 2}, {1, 2, 3, 4, 5, 6})},
                                        {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({3, 2}, {0, 0, 0, 0, 5, 6})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({3, 2}, {0, 0, 1, 2, 3, 4})) == 0.0);
}

BOOST_AUTO_TEST_CASE(reductions_onnx_examples) {
    // ONNX's ScatterND examples with a reduction (opsets 16 and 18): data (4, 4, 4), two (4, 4)
    // updates of 5s..8s and 1s..4s both at slice 0; the other slices stay
    const std::vector<double> fwd = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1},
                              bwd = {8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8},
                              fives = {5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8},
                              ones = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4};
    // slice 0 of each output, from ONNX's documentation
    const std::map<std::string, std::vector<double>> slice0 = {
        {"add", {7, 8, 9, 10, 13, 14, 15, 16, 18, 17, 16, 15, 16, 15, 14, 13}},
        {"mul", {5, 10, 15, 20, 60, 72, 84, 96, 168, 147, 126, 105, 128, 96, 64, 32}},
        {"max", {5, 5, 5, 5, 6, 6, 7, 8, 8, 7, 7, 7, 8, 8, 8, 8}},
        {"min", {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 3, 2, 1}}};
    std::vector<double> data = fwd, upd = fives;
    for (const auto* p : {&fwd, &bwd, &bwd}) data.insert(data.end(), p->begin(), p->end());
    upd.insert(upd.end(), ones.begin(), ones.end());
    for (DType dt : {DType::f64, DType::f32})
        for (const auto& [r, s0] : slice0) {
            std::vector<double> want = s0;
            for (const auto* p : {&fwd, &bwd, &bwd}) want.insert(want.end(), p->begin(), p->end());
            const Doubles y =
                run_one("ScatterND", reducing(r),
                        {array_of({4, 4, 4}, data), array_of({2, 1}, {0, 0}), array_of({2, 4, 4}, upd)}, dt);
            BOOST_TEST(rel_diff(y[0], array_of({4, 4, 4}, want)) == 0.0, r);
        }
    BOOST_CHECK_THROW(infer("ScatterND", reducing("prod"), {{8}, {4, 1}, {4}}), GraphError);
}

BOOST_AUTO_TEST_CASE(reductions_match_a_plain_loop) {
    // (2, 3, 8, 4): 10 tuples (batch, head) into 6 slices, so slices repeat
    const Array<double> data = uniform_array({2, 3, 8, 4}, 4, 0.5, 1.5), upd = uniform_array({10, 8, 4}, 5, 0.5, 1.5);
    std::vector<double> pairs;
    for (int t = 0; t < 10; ++t) pairs.insert(pairs.end(), {double(t % 2), double((t * 2) % 3) - (t > 5 ? 3 : 0)});
    for (const std::string r : {"add", "mul", "max", "min"}) {
        Array<double> ref = data;
        for (std::size_t t = 0; t < 10; ++t) {
            const auto b = static_cast<std::size_t>(pairs[2 * t]),
                       h = static_cast<std::size_t>(pairs[2 * t + 1] + 3) % 3;
            for (std::size_t i = 0; i < 32; ++i) {
                double& y = ref.data()[(b * 3 + h) * 32 + i];
                const double u = upd.data()[t * 32 + i];
                y = r == "add" ? y + u : r == "mul" ? y * u : r == "max" ? std::max(y, u) : std::min(y, u);
            }
        }
        BOOST_TEST_CONTEXT(r) {
            check_against_reference("ScatterND", reducing(r), {data, array_of({10, 2}, pairs), upd}, {ref}, 0, 1e-6);
        }
    }
}

BOOST_AUTO_TEST_CASE(reductions_backward) {
    // row 1 written three times, row 0 once, row 2 never; values apart (no ties)
    const Array<double> idx = array_of({4, 1}, {1, 0, 1, 1});
    for (const std::string r : {"add", "mul", "max", "min"})
        BOOST_TEST(gradcheck("ScatterND", reducing(r),
                             {uniform_array({3, 2}, 6, 0.5, 1.5), idx, uniform_array({4, 2}, 7, 0.5, 1.5)},
                             {true, false, true}) < 1e-8,
                   r);
    // by hand: data row 1 = (2, 3); updates (1, 3), (2, 0) at row 1; dy row 1 = (1, 1)
    const Array<double> data = array_of({2, 2}, {9, 9, 2, 3}), i2 = array_of({2, 1}, {1, 1}),
                        upd = array_of({2, 2}, {1, 3, 2, 0}), dy = array_of({2, 2}, {1, 1, 1, 1});
    // max: column 0: y = 2, data and update 1 tie; column 1: y = 3, data and update 0 tie
    auto d = backward_all<double>("ScatterND", reducing("max"), {data, i2, upd}, {dy}, {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({2, 2}, {1, 1, 0.5, 0.5})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({2, 2}, {0, 0.5, 0.5, 0})) == 0.0);
    // mul: column 1's product is 3·3·0 = 0: d data = 3·0, d u0 = 3·0, d u1 = 3·3
    d = backward_all<double>("ScatterND", reducing("mul"), {data, i2, upd}, {dy}, {true, false, true});
    BOOST_TEST(rel_diff(d[0], array_of({2, 2}, {1, 1, 2, 0})) == 0.0);
    BOOST_TEST(rel_diff(d[1], array_of({2, 2}, {4, 0, 2, 9})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
