// The seed document end to end: every one of its 33 matrices, from the graph file and
// from the C++ builder, in f32 and f64, at 1, 2, 4 and 8 threads.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_seed)

using namespace attngraph;
namespace bdata = boost::unit_test::data;

namespace {

void check_against_seed(const Graph& g, const RunResult& r, double tol) {
    std::size_t checked = 0;
    for (const auto& [name, rows] : test::seed_values().items()) {
        BOOST_TEST_CONTEXT("value " << name) {
            const double diff = test::max_abs_diff(r.at(g, name), rows);
            BOOST_TEST(diff <= tol);
            ++checked;
        }
    }
    BOOST_TEST(checked == 33u);
}

}  // namespace

BOOST_DATA_TEST_CASE(seed_file_matches_document, bdata::make({1, 2, 4, 8}) * bdata::make({0, 1}), threads, f64) {
    LoadOptions lo;
    lo.dtype = f64 ? DType::f64 : DType::f32;
    const Graph g = load_graph(test::seed_graph(), lo);
    RunOptions o;
    o.threads = threads;
    o.keep_all = true;
    check_against_seed(g, run(g, o), f64 ? 1e-6 : 2e-6);
}

BOOST_AUTO_TEST_CASE(seed_builder_matches_file_bit_for_bit) {
    const Graph from_file = load_graph(test::seed_graph());
    const Graph from_code = graphs::build_mha(graphs::seed_mha_config(), graphs::seed_mha_weights());
    RunOptions o;
    o.keep_all = true;
    const RunResult a = run(from_file, o), b = run(from_code, o);
    BOOST_TEST(from_file.nodes().size() == from_code.nodes().size());
    for (const auto& [name, rows] : test::seed_values().items()) {
        BOOST_TEST_CONTEXT("value " << name) { BOOST_TEST((a.at(from_file, name) == b.at(from_code, name))); }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_seed
