// Split: shape rule, forward against hand-picked entries, backward against finite
// differences, and a multi-output node end to end ("name:k" in a graph file).
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_split)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json attrs(const nlohmann::json& j) {
    op_attrs("Split", j);  // throws GraphError for attributes that do not parse
    return j;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule) {
    const auto three = infer("Split", attrs({{"parts", 3}}), {{2, 6}});
    BOOST_TEST(three.size() == 3u);
    for (const auto& s : three) BOOST_TEST((s == Shape{2, 2}));
    const auto listed = infer("Split", attrs({{"axis", 0}, {"sizes", {1, 2}}}), {{3, 2}});
    BOOST_TEST((listed == std::vector<Shape>{{1, 2}, {2, 2}}));
    BOOST_CHECK_THROW(infer("Split", attrs({{"parts", 4}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Split", attrs({{"sizes", {2, 3}}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Split", attrs({{"sizes", {6, 0}}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Split", attrs({{"parts", 2}, {"sizes", {3, 3}}}), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Split", attrs(nlohmann::json::object()), {{2, 6}}), ShapeError);
    BOOST_CHECK_THROW(infer("Split", attrs({{"axis", 3}, {"parts", 1}}), {{2, 6}}), ShapeError);
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({2, 5}, {0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
    const auto y = forward_all<double>("Split", attrs({{"sizes", {2, 3}}}), {x});
    BOOST_TEST(max_diff(y[0], array_of({2, 2}, {0, 1, 10, 11})) == 0.0);
    BOOST_TEST(max_diff(y[1], array_of({2, 3}, {2, 3, 4, 12, 13, 14})) == 0.0);
    const auto z = forward_all<double>("Split", attrs({{"axis", 0}, {"parts", 2}}), {x});
    BOOST_TEST(max_diff(z[1], array_of({1, 5}, {10, 11, 12, 13, 14})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Split", attrs({{"parts", 3}}), {random_array({2, 2, 6}, 1)}) < 1e-8);
    BOOST_TEST(gradcheck("Split", attrs({{"axis", 1}, {"sizes", {1, 3}}}), {random_array({2, 4, 3}, 2)}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(backward_skips_outputs_without_gradient) {
    const Array<double> x = random_array({1, 4}, 3), dy1 = array_of({1, 2}, {5, 7});
    const auto dx = backward_direct<double>("Split", attrs({{"parts", 2}}), {x}, {nullptr, &dy1}, {true})[0];
    BOOST_TEST(max_diff(dx, array_of({1, 4}, {0, 0, 5, 7})) == 0.0);
}

BOOST_AUTO_TEST_CASE(outputs_are_addressed_by_index_in_a_graph_file) {
    const std::string text = R"({
      "tensors": {"X": {"kind": "input", "data": [[1, 2, 3, 4, 5, 6]]}},
      "nodes": [
        {"name": "parts", "op": "Split", "inputs": ["X"], "attrs": {"sizes": [1, 2, 3]}},
        {"name": "last", "op": "Scale", "inputs": ["parts:2"], "attrs": {"factor": 2}},
        {"name": "first", "op": "Scale", "inputs": ["parts:0"], "attrs": {"factor": -1}}
      ],
      "outputs": ["last", "first", "parts:1"]
    })";
    const Graph g = parse_graph(text, ".", "split.json");
    const RunResult r = run(g);
    BOOST_TEST(r.at(g, "last").at_flat(0) == 8.0);
    BOOST_TEST(r.at(g, "last").at_flat(2) == 12.0);
    BOOST_TEST(r.at(g, "first").at_flat(0) == -1.0);
    BOOST_TEST(r.at(g, "parts:1").at_flat(1) == 3.0);
    // a multi-output node named without ":k" is an error naming the node
    const std::string bad = R"({
      "tensors": {"X": {"kind": "input", "data": [[1, 2]]}},
      "nodes": [{"name": "parts", "op": "Split", "inputs": ["X"], "attrs": {"parts": 2}},
                {"name": "y", "op": "Scale", "inputs": ["parts"], "attrs": {"factor": 2}}]
    })";
    try {
        parse_graph(bad, ".", "bad.json");
        BOOST_FAIL("no error");
    } catch (const GraphError& e) {
        BOOST_TEST(std::string(e.what()).find("parts:k") != std::string::npos);
    }
}

BOOST_AUTO_TEST_SUITE_END()
