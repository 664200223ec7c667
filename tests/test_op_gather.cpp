// Gather: shape rule (ONNX: data[:axis] + indices + data[axis+1:]), forward against
// hand-computed values (negative indices too) and a plain loop (f64, f32; bit-identical at 1,
// 2 and 4 threads), backward against the engine's gradcheck (indices not perturbed: no
// gradient), and an out-of-range index as a run-time error naming node and index.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <fstream>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_gather)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule) {
    BOOST_TEST((infer("Gather", nullptr, {{5, 4}, {2, 3}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("Gather", {{"axis", 1}}, {{5, 4, 6}, {7}})[0] == Shape{5, 7, 6}));
    BOOST_TEST((infer("Gather", {{"axis", -1}}, {{5, 4}, {}})[0] == Shape{5}));  // a scalar index drops the axis
    BOOST_CHECK_THROW(infer("Gather", {{"axis", 2}}, {{5, 4}, {2}}), ShapeError);
    BOOST_CHECK_THROW(infer("Gather", nullptr, {{}, {2}}), ShapeError);
    GraphBuilder g("t");
    Value d = g.input("d", zeros(DType::f32, {5, 4})), i = g.input("i", zeros(DType::f32, {3}));
    BOOST_TEST((attngraph::gather(d, i, 0).shape() == Shape{3, 4}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> data = array_of({3, 2}, {1, 2, 3, 4, 5, 6});
    // ONNX's example: rows 0, 1 and 1, 2; then -1 is the last row
    const Doubles y = run_one("Gather", nullptr, {data, array_of({2, 2}, {0, 1, 1, 2})}, DType::f64);
    BOOST_TEST(rel_diff(y[0], array_of({2, 2, 2}, {1, 2, 3, 4, 3, 4, 5, 6})) == 0.0);
    const Doubles z = run_one("Gather", {{"axis", 1}}, {data, array_of({2}, {-1, 0})}, DType::f64);
    BOOST_TEST(rel_diff(z[0], array_of({3, 2}, {2, 1, 4, 3, 6, 5})) == 0.0);
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> data = uniform_array({6, 40, 50}, 1);
    Array<double> idx = Array<double>::from_shape({3, 10});
    for (std::size_t k = 0; k < idx.size(); ++k)
        idx.data()[k] = static_cast<double>(static_cast<long>(k * 7 % 80) - 40);
    Array<double> ref = Array<double>::from_shape({6, 3, 10, 50});
    for (std::size_t a = 0; a < 6; ++a)
        for (std::size_t p = 0; p < 3; ++p)
            for (std::size_t q = 0; q < 10; ++q) {
                const long i = static_cast<long>(idx(p, q));
                const std::size_t row = static_cast<std::size_t>(i < 0 ? i + 40 : i);
                for (std::size_t c = 0; c < 50; ++c) ref(a, p, q, c) = data(a, row, c);
            }
    check_against_reference("Gather", {{"axis", 1}}, {data, idx}, {ref}, 0, 1e-7);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // a repeated index (1 twice) adds up; indices are not perturbed
    std::vector<Tensor> in{Tensor(uniform_array({4, 3}, 1)), Tensor(array_of({2, 2}, {1, -1, 1, 0}))};
    const GradcheckResult r = gradcheck_op("Gather", nullptr, in);
    BOOST_TEST(r.entries.size() == 1u);
    BOOST_TEST(r.max_rel_error < 1e-8);
    BOOST_TEST(gradcheck("Gather", {{"axis", -1}}, {uniform_array({2, 3, 5}, 2), array_of({3}, {4, 0, 4})}) < 1e-8);
}

BOOST_AUTO_TEST_CASE(index_out_of_range_names_node_and_index) {
    GraphBuilder g("t", DType::f64);
    Value d = g.input("d", Tensor(uniform_array({4, 3}, 1))), i = g.input("i", Tensor(array_of({3}, {0, 4, 1})));
    g.output(attngraph::gather(d, i, 0).named("rows"));
    const Graph graph = g.build();
    for (int threads : {1, 2}) {
        RunOptions o;
        o.threads = threads;
        try {
            run(graph, o);
            BOOST_FAIL("no error");
        } catch (const ValueError& e) {
            const std::string msg = e.what();
            BOOST_TEST(msg.find("node 'rows' (Gather)") != std::string::npos, msg);
            BOOST_TEST(msg.find("index 4 at flat position 1") != std::string::npos, msg);
            BOOST_TEST(msg.find("axis 0 of size 4") != std::string::npos, msg);
        }
    }
    BOOST_CHECK_THROW(run_one("Gather", nullptr, {uniform_array({4, 3}, 1), array_of({1}, {-5})}, DType::f64),
                      ValueError);
    BOOST_CHECK_THROW(run_one("Gather", nullptr, {uniform_array({4, 3}, 1), array_of({1}, {1.5})}, DType::f64),
                      ValueError);
    BOOST_TEST(run_one("Gather", nullptr, {uniform_array({4, 3}, 1), array_of({1}, {-4})}, DType::f64)[0].size() ==
               3u);

    // through the command line: one error line naming the file, node and index; nothing written
    TempDir dir;
    const nlohmann::json doc = {{"name", "gather_oob"},
                                {"tensors",
                                 {{"table", {{"kind", "param"}, {"shape", {3, 2}}, {"data", {{1, 2}, {3, 4}, {5, 6}}}}},
                                  {"ids", {{"kind", "input"}, {"shape", {2}}, {"data", {2, 7}}}}}},
                                {"nodes", {{{"name", "lookup"}, {"op", "Gather"}, {"inputs", {"table", "ids"}}}}}};
    std::ofstream(dir.path / "g.json") << doc.dump(1);
    const CliResult r = run_cli("run g.json --trace t", dir.path);
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.rfind("error: ", 0) == 0u, r.err);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
    BOOST_TEST(r.err.find("g.json") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("node 'lookup' (Gather)") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("index 7") != std::string::npos, r.err);
    BOOST_TEST(!std::filesystem::exists(dir.path / "t"));
}

BOOST_AUTO_TEST_SUITE_END()
