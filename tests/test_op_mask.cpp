// Mask: shape rule and attribute checks, forward for every pattern and a mask tensor
// against hand-written keep tables, backward against finite differences, and the fully
// masked row: zeros from Softmax, marked in the trace.
#include <boost/test/unit_test.hpp>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/trace.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_mask)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(const nlohmann::json& j) {
    op_attrs("Mask", j);  // throws GraphError for attributes that do not parse
    return j;
}
const double NEG = -std::numeric_limits<double>::infinity();

// x = 1, 2, 3, ... masked by a keep table (1 = keep), the expected forward.
Array<double> expected(const Shape& shape, const std::vector<int>& keep) {
    Array<double> a = Array<double>::from_shape(shape);
    for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = keep[i] ? static_cast<double>(i + 1) : NEG;
    return a;
}
Array<double> counting(const Shape& shape) {
    Array<double> a = Array<double>::from_shape(shape);
    for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<double>(i + 1);
    return a;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_and_attribute_checks) {
    BOOST_TEST((infer("Mask", attrs({{"pattern", "causal"}}), {{2, 3, 3}})[0] == Shape{2, 3, 3}));
    BOOST_TEST((infer("Mask", attrs(nullptr), {{2, 3, 4}, {3, 4}})[0] == Shape{2, 3, 4}));
    BOOST_TEST(
        (infer("Mask", attrs({{"pattern", "padding"}, {"lengths", {1, 4}}}), {{2, 2, 3, 4}})[0] == Shape{2, 2, 3, 4}));
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "causal"}}), {{3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "diagonal"}}), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "window"}}), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "window"}, {"window", 0}}), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "causal"}, {"causal", true}}), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "causal"}, {"lengths", {1}}}), {{1, 3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "padding"}}), {{2, 3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "padding"}, {"lengths", {1}}}), {{2, 3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "padding"}, {"lengths", {1, 4}}}), {{2, 3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "padding"}, {"lengths", {1, 2}}}), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs(nullptr), {{3, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs(nullptr), {{3, 3}, {2, 3}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs(nullptr), {{3, 3}, {2, 3, 3}}), ShapeError);
    BOOST_CHECK_THROW(attrs({{"pattern", 3}}), GraphError);
    BOOST_CHECK_THROW(attrs({{"windw", 3}}), GraphError);
}

BOOST_AUTO_TEST_CASE(forward_causal) {
    const auto y = forward_all<double>("Mask", attrs({{"pattern", "causal"}}), {counting({2, 3})})[0];
    BOOST_TEST(max_diff(y, expected({2, 3}, {1, 0, 0, 1, 1, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_window) {
    const auto sym = forward_all<double>("Mask", attrs({{"pattern", "window"}, {"window", 2}}), {counting({4, 4})})[0];
    BOOST_TEST(max_diff(sym, expected({4, 4}, {1, 1, 0, 0,  //
                                               1, 1, 1, 0,  //
                                               0, 1, 1, 1,  //
                                               0, 0, 1, 1})) == 0.0);
    const auto causal = forward_all<double>("Mask", attrs({{"pattern", "window"}, {"window", 2}, {"causal", true}}),
                                            {counting({4, 4})})[0];
    BOOST_TEST(max_diff(causal, expected({4, 4}, {1, 0, 0, 0,  //
                                                  1, 1, 0, 0,  //
                                                  0, 1, 1, 0,  //
                                                  0, 0, 1, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_padding_per_sequence) {
    // x (2, 1, 2, 3): sequence 0 keeps 2 keys, sequence 1 none
    const auto y =
        forward_all<double>("Mask", attrs({{"pattern", "padding"}, {"lengths", {2, 0}}}), {counting({2, 1, 2, 3})})[0];
    BOOST_TEST(max_diff(y, expected({2, 1, 2, 3}, {1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_mask_tensor_broadcast_over_leading_axes) {
    const Array<double> keep = array_of({2, 2}, {1, 0, 0.5, 1});  // nonzero keeps
    const auto y = forward_all<double>("Mask", attrs(nullptr), {counting({2, 2, 2}), keep})[0];
    BOOST_TEST(max_diff(y, expected({2, 2, 2}, {1, 0, 1, 1, 1, 0, 1, 1})) == 0.0);
    // tensor and pattern together: both must keep
    const auto both =
        forward_all<double>("Mask", attrs({{"pattern", "causal"}}), {counting({2, 2}), array_of({2}, {0, 1})})[0];
    BOOST_TEST(max_diff(both, expected({2, 2}, {0, 0, 0, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Mask", attrs({{"pattern", "causal"}}), {random_array({2, 3, 3}, 1)}) < 1e-8);
    BOOST_TEST(gradcheck("Mask", attrs({{"pattern", "window"}, {"window", 2}}), {random_array({4, 5}, 2)}) < 1e-8);
    BOOST_TEST(gradcheck("Mask", attrs({{"pattern", "padding"}, {"lengths", {3, 1}}}), {random_array({2, 2, 3}, 3)}) <
               1e-8);
    BOOST_TEST(gradcheck("Mask", attrs(nullptr), {random_array({2, 3, 3}, 4), array_of({3}, {1, 0, 1})},
                         {true, false}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_is_zero_at_masked_positions) {
    const Array<double> x = random_array({2, 2}, 5), dy = array_of({2, 2}, {1, 2, 3, 4});
    const auto dx = backward_direct<double>("Mask", attrs({{"pattern", "causal"}}), {x}, {&dy}, {true})[0];
    BOOST_TEST(max_diff(dx, array_of({2, 2}, {1, 0, 3, 4})) == 0.0);
}

BOOST_AUTO_TEST_CASE(fully_masked_row_gives_zeros_and_is_marked_in_the_trace) {
    GraphBuilder g("masked", DType::f64);
    Tensor s = zeros(DType::f64, {2, 2, 3});
    for (std::size_t i = 0; i < s.size(); ++i) s.as<double>().data()[i] = 0.1 * static_cast<double>(i);
    Value a = softmax(mask_padding(g.input("S", s), {3, 0}).named("S_padded")).named("A");
    g.output(a);
    const Graph graph = g.build();
    RunOptions o;
    o.trace = true;
    const RunResult r = run(graph, o);
    const Tensor& out = r.at(graph, "A");
    for (std::size_t i = 6; i < 12; ++i) BOOST_TEST(out.at_flat(i) == 0.0);  // sequence 1: no key
    double row0 = 0;
    for (std::size_t j = 0; j < 3; ++j) row0 += out.at_flat(j);
    BOOST_TEST(std::abs(row0 - 1.0) < 1e-15);

    const Trace trace = make_trace(graph, r);
    const TraceEntry* e = trace.find("A");
    BOOST_REQUIRE(e);
    BOOST_TEST((e->fully_masked_rows == std::vector<Shape>{{1, 0}, {1, 1}}));
    BOOST_TEST(trace.find("S_padded")->fully_masked_rows.empty());
    const std::string text = entry_text(trace, *e);
    BOOST_TEST(text.find("note: row [1, 0] fully masked -> zeros") != std::string::npos);
    BOOST_TEST(text.find("note: row [1, 1] fully masked -> zeros") != std::string::npos);
    const auto manifest = trace_manifest(trace, TraceFormat::npy);
    bool found = false;
    for (const auto& rec : manifest["entries"])
        if (rec["name"] == "A") found = rec["fully_masked_rows"] == nlohmann::json::parse("[[1,0],[1,1]]");
    BOOST_TEST(found);
}

// issue 12: the causal pattern with an offset (query i sees keys j <= i + offset, as with a KV
// cache of `offset` keys) and an additive mask tensor (a bias; -inf drops).
BOOST_AUTO_TEST_CASE(causal_offset_and_additive_mask) {
    // 2 queries after 2 cached keys, 4 keys: row 0 sees keys 0..2, row 1 all 4
    const auto off = forward_all<double>("Mask", attrs({{"pattern", "causal"}, {"offset", 2}}), {counting({2, 4})})[0];
    BOOST_TEST(max_diff(off, expected({2, 4}, {1, 1, 1, 0, 1, 1, 1, 1})) == 0.0);
    // x = 1..4, bias (broadcast over rows) 10, -inf: y = x + bias where kept
    const double inf = std::numeric_limits<double>::infinity();
    const Array<double> bias = array_of({2}, {10, -inf});
    const auto add = forward_all<double>("Mask", attrs({{"mask_type", "additive"}}), {counting({2, 2}), bias})[0];
    BOOST_TEST(add(0, 0) == 11.0);
    BOOST_TEST(add(1, 0) == 13.0);
    BOOST_TEST(add(0, 1) == -inf);
    BOOST_TEST(add(1, 1) == -inf);
    // additive and causal: causal drops (0, 1) whatever the bias
    const auto both = forward_all<double>("Mask", attrs({{"pattern", "causal"}, {"mask_type", "additive"}}),
                                          {counting({2, 2}), array_of({2}, {1, 2})})[0];
    BOOST_TEST(both(0, 0) == 2.0);
    BOOST_TEST(both(0, 1) == -inf);
    BOOST_TEST(both(1, 1) == 6.0);
    // explicit boolean: nonzero keeps
    const auto boolean =
        forward_all<double>("Mask", attrs({{"mask_type", "boolean"}}), {counting({2, 2}), array_of({2}, {0, 1})})[0];
    BOOST_TEST(boolean(0, 0) == -inf);
    BOOST_TEST(boolean(1, 1) == 4.0);
    // the additive mask is differentiable (summed over the axes it was broadcast along)
    BOOST_TEST(gradcheck("Mask", attrs({{"pattern", "causal"}, {"offset", 1}, {"mask_type", "additive"}}),
                         {random_array({2, 3, 4}, 5), random_array({3, 4}, 6)}) < 1e-8);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "padding"}, {"lengths", {1}}, {"offset", 1}}), {{1, 2, 2}}),
                      ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"mask_type", "sum"}}), {{2, 2}, {2, 2}}), ShapeError);
    BOOST_CHECK_THROW(infer("Mask", attrs({{"pattern", "causal"}, {"mask_type", "additive"}}), {{2, 2}}), ShapeError);
}

BOOST_AUTO_TEST_SUITE_END()
