// Mask: shape rule and attribute checks, forward for every pattern and a mask tensor
// against hand-written keep tables, backward against finite differences, and the fully
// masked row: zeros from Softmax, marked in the trace.
#include <boost/test/unit_test.hpp>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/trace.hpp"
#include "ops/ops.hpp"
#include "support/op_check.hpp"

using namespace attngraph;
using namespace attngraph::test;

namespace {
std::any attrs(const nlohmann::json& j) {
    return OpRegistry::instance().get("Mask").parse_attrs(j, "test");
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
    const auto y = forward("Mask", attrs({{"pattern", "causal"}}), {counting({2, 3})})[0];
    BOOST_TEST(max_diff(y, expected({2, 3}, {1, 0, 0, 1, 1, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_window) {
    const auto sym = forward("Mask", attrs({{"pattern", "window"}, {"window", 2}}), {counting({4, 4})})[0];
    BOOST_TEST(max_diff(sym, expected({4, 4}, {1, 1, 0, 0,  //
                                               1, 1, 1, 0,  //
                                               0, 1, 1, 1,  //
                                               0, 0, 1, 1})) == 0.0);
    const auto causal =
        forward("Mask", attrs({{"pattern", "window"}, {"window", 2}, {"causal", true}}), {counting({4, 4})})[0];
    BOOST_TEST(max_diff(causal, expected({4, 4}, {1, 0, 0, 0,  //
                                                  1, 1, 0, 0,  //
                                                  0, 1, 1, 0,  //
                                                  0, 0, 1, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_padding_per_sequence) {
    // x (2, 1, 2, 3): sequence 0 keeps 2 keys, sequence 1 none
    const auto y = forward("Mask", attrs({{"pattern", "padding"}, {"lengths", {2, 0}}}), {counting({2, 1, 2, 3})})[0];
    BOOST_TEST(max_diff(y, expected({2, 1, 2, 3}, {1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_mask_tensor_broadcast_over_leading_axes) {
    const Array<double> keep = array_of({2, 2}, {1, 0, 0.5, 1});  // nonzero keeps
    const auto y = forward("Mask", attrs(nullptr), {counting({2, 2, 2}), keep})[0];
    BOOST_TEST(max_diff(y, expected({2, 2, 2}, {1, 0, 1, 1, 1, 0, 1, 1})) == 0.0);
    // tensor and pattern together: both must keep
    const auto both = forward("Mask", attrs({{"pattern", "causal"}}), {counting({2, 2}), array_of({2}, {0, 1})})[0];
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
    const OpDef& def = OpRegistry::instance().get("Mask");
    const std::any a = attrs({{"pattern", "causal"}});
    Array<double> x = random_array({2, 2}, 5), y = forward("Mask", a, {x})[0], dy = array_of({2, 2}, {1, 2, 3, 4});
    Array<double> dx = array_of({2, 2}, {0, 0, 0, 0});
    std::vector<const Array<double>*> in{&x}, out{&y}, dout{&dy};
    std::vector<Array<double>*> din{&dx};
    def.backward_f64(a, In<double>(in), In<double>(out), In<double>(dout), Out<double>(din));
    BOOST_TEST(max_diff(dx, array_of({2, 2}, {1, 0, 3, 4})) == 0.0);
}

BOOST_AUTO_TEST_CASE(fully_masked_row_gives_zeros_and_is_marked_in_the_trace) {
    GraphBuilder g("masked", DType::f64);
    Tensor s = zeros(DType::f64, {2, 2, 3});
    for (std::size_t i = 0; i < s.size(); ++i) s.as<double>().data()[i] = 0.1 * static_cast<double>(i);
    Value a = softmax(mask_padding(g.input("S", s), {3, 0}).as("S_padded")).as("A");
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
