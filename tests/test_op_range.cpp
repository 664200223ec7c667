// Range: shape rule (ONNX / numpy arange length), forward against hand-computed values and a
// plain loop (f64, f32; bit-identical at 1, 2 and 4 threads), and position indices built
// from it (q_idx >= kv_idx, a causal keep) through the executor.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_range)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Range", {{"limit", 5}}, {})[0] == Shape{5}));
    BOOST_TEST((infer("Range", {{"start", 1}, {"limit", 2}, {"delta", 0.3}}, {})[0] == Shape{4}));  // ceil(1/0.3)
    BOOST_TEST((infer("Range", {{"start", 10}, {"limit", 4}, {"delta", -3}}, {})[0] == Shape{2}));
    BOOST_TEST((infer("Range", {{"start", 3}, {"limit", 1}}, {})[0] == Shape{0}));
    BOOST_CHECK_THROW(infer("Range", {{"limit", 5}, {"delta", 0}}, {}), ShapeError);
    BOOST_CHECK_THROW(infer("Range", {{"limit", 1e12}}, {}), ShapeError);
    BOOST_CHECK_THROW(op_attrs("Range", nullptr), GraphError);  // limit is required
    GraphBuilder g("t");
    BOOST_TEST((attngraph::range(g, 7).shape() == Shape{7}));
    BOOST_TEST((attngraph::range(g, 2, 8, 2).shape() == Shape{3}));
    Value x = g.input("x", zeros(DType::f32, {2}));
    BOOST_CHECK_THROW(g.node("Range", {x}, op_attrs("Range", {{"limit", 2}})), GraphError);  // no inputs
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    BOOST_TEST(rel_diff(run_one("Range", {{"limit", 4}}, {}, DType::f64)[0], array_of({4}, {0, 1, 2, 3})) == 0.0);
    BOOST_TEST(rel_diff(run_one("Range", {{"start", 10}, {"limit", 4}, {"delta", -3}}, {}, DType::f64)[0],
                        array_of({2}, {10, 7})) == 0.0);
    BOOST_TEST(rel_diff(run_one("Range", {{"start", 1}, {"limit", 2}, {"delta", 0.25}}, {}, DType::f32)[0],
                        array_of({4}, {1, 1.25, 1.5, 1.75})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    Array<double> ref = Array<double>::from_shape({20000});
    for (std::size_t i = 0; i < 20000; ++i) ref(i) = -3 + 0.5 * static_cast<double>(i);
    check_against_reference("Range", {{"start", -3}, {"limit", 9997}, {"delta", 0.5}}, {}, {ref}, 0, 0);
}

BOOST_AUTO_TEST_CASE(position_indices_make_a_causal_keep) {
    // keep[i, j] = q_idx[i] >= kv_idx[j]: not Less(q, kv)
    GraphBuilder g("positions", DType::f64);
    Value q = reshape(range(g, 3).named("q_idx"), {3, 1});
    Value kv = range(g, 4).named("kv_idx");
    g.output(sub(g.input("one", Tensor(array_of({}, {1}))), less(q, kv)).named("keep"));
    const Graph graph = g.build();
    const RunResult r = run(graph);
    BOOST_TEST(rel_diff(r.at(graph, "keep").as<double>(), array_of({3, 4}, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0})) ==
               0.0);
}

BOOST_AUTO_TEST_SUITE_END()
