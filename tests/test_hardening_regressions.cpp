// Every input that once crashed a loader or a run, or reached undefined behaviour (found by
// the fuzz targets or by review), lives in tests/data/regressions/ with a sidecar NAME.expect
// holding a piece of the typed error it must give now — or "runs" for a valid graph that
// must now run. .npy files go through load_npy, the rest through load_graph — and through
// the CLI, which must answer with one line.
#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "onnx/import.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_hardening_regressions)

using namespace attngraph;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(every_regression_input_gives_its_typed_error) {
    const fs::path dir = test::source_dir() / "tests" / "data" / "regressions";
    std::size_t replayed = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const fs::path input = entry.path();
        if (input.extension() == ".expect") continue;
        BOOST_TEST_CONTEXT("input " << input.filename()) {
            std::ifstream expect_file(input.string() + ".expect");
            std::string expected;
            std::getline(expect_file, expected);
            BOOST_TEST_REQUIRE(!expected.empty(), "no " << input.filename() << ".expect");
            if (expected == "runs") {
                const Graph g = load_graph(input);
                RunOptions o;
                o.threads = 2;
                BOOST_TEST(run(g, o).complete);
                const auto r = test::run_cli("run '" + input.string() + "'");
                BOOST_TEST(r.code == 0, r.err);
                ++replayed;
                continue;
            }
            std::string message;
            try {
                if (input.extension() == ".npy")
                    load_npy(input);
                else if (input.extension() == ".onnx")
                    to_graph(import_onnx(input), input);
                else
                    load_graph(input);
            } catch (const Error& e) {
                message = e.what();
            }
            BOOST_TEST(message.find(expected) != std::string::npos, "'" << expected << "' in: " << message);

            const auto r = test::run_cli(input.extension() == ".npy"
                                             ? "run '" + test::seed_graph().string() + "' --input 'X=" + input.string() + "'"
                                             : "check '" + input.string() + "'");
            BOOST_TEST(r.code == 1);
            BOOST_TEST(r.err.rfind("error: ", 0) == 0, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
            BOOST_TEST(r.err.find(expected) != std::string::npos, r.err);
            ++replayed;
        }
    }
    BOOST_TEST(replayed >= 9u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_hardening_regressions
