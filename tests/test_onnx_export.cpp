// Export checked by a real runtime: every graphs/*.json, graphs/flex/*.json and tests/data/onnx_export/*.json is
// exported to ONNX (opset 23) and run by ONNX Runtime (npm onnxruntime-node, tests/node/, installed by
// scripts/install-deps.sh); each output must match attngraph's own trace within 1e-5. Without node or the package the
// test fails.
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_onnx_export)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;

namespace {
std::string q(const fs::path& p) {
    return "'" + p.string() + "'";
}
}  // namespace

BOOST_AUTO_TEST_CASE(every_graph_exported_runs_in_onnx_runtime_with_the_same_outputs) {
    const fs::path script = source_dir() / "tests" / "node" / "ort_check.js";
    BOOST_TEST_REQUIRE(fs::is_directory(source_dir() / "tests" / "node" / "node_modules" / "onnxruntime-node"),
                       "onnxruntime-node is missing: run scripts/install-deps.sh");
    std::size_t checked = 0;
    // graphs/ and tests/data/onnx_export/ (every op of the attention vocabulary in one graph)
    std::vector<fs::path> files;
    for (const auto& dir :
         {source_dir() / "graphs", source_dir() / "graphs" / "flex", source_dir() / "tests" / "data" / "onnx_export"})
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& e : files) {
        BOOST_TEST_CONTEXT(e.filename()) {
            TempDir tmp;
            const CliResult ex = run_cli("export " + q(e) + " -o model.onnx", tmp.path);
            BOOST_TEST_REQUIRE(ex.code == 0, ex.err);
            const CliResult run = run_cli("run " + q(e) + " --trace t", tmp.path);
            BOOST_TEST_REQUIRE(run.code == 0, run.err);
            const std::string out = (tmp.path / "ort.out").string();
            const std::string cmd = "node " + q(script) + " " + q(tmp.path / "model.onnx") + " " + q(tmp.path / "t") +
                                    " 1e-5 >" + q(out) + " 2>&1";
            const int status = std::system(cmd.c_str());
            const std::string report = slurp(out);
            BOOST_TEST_MESSAGE(e.filename().string() << ": " << report);
            BOOST_TEST(status == 0, report);
            BOOST_TEST(report.find("max |ONNX Runtime - attngraph|") != std::string::npos, report);
            ++checked;
        }
    }
    BOOST_TEST(checked >= 24u);
}

BOOST_AUTO_TEST_CASE(export_refuses_to_overwrite_and_writes_nothing_on_error) {
    TempDir tmp;
    std::ofstream(tmp.path / "model.onnx") << "old";
    const CliResult r = run_cli("export " + q(seed_graph()) + " -o model.onnx", tmp.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err.find("model.onnx: exists (use --force") != std::string::npos, r.err);
    BOOST_TEST(slurp(tmp.path / "model.onnx") == "old");
    const CliResult bad = run_cli("export missing.json -o out.onnx", tmp.path);
    BOOST_TEST(bad.code == 1);
    BOOST_TEST(!fs::exists(tmp.path / "out.onnx"));
}

// The export imported again runs to the same outputs bit for bit (every graphs/*.json and
// graphs/flex/*.json: the exported primitive ops map back onto attngraph ops doing the same
// arithmetic, and constants fold with the ops' own kernels).
BOOST_AUTO_TEST_CASE(every_graph_exported_and_imported_again_gives_the_same_bits) {
    std::size_t checked = 0;
    std::vector<fs::directory_entry> entries;
    for (const auto& dir : {source_dir() / "graphs", source_dir() / "graphs" / "flex"})
        for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e);
    for (const auto& e : entries) {
        if (e.path().extension() != ".json") continue;
        BOOST_TEST_CONTEXT(e.path().filename()) {
            TempDir tmp;
            BOOST_TEST_REQUIRE(run_cli("export " + q(e.path()) + " -o model.onnx", tmp.path).code == 0);
            const CliResult run = run_cli("run " + q(e.path()) + " --trace t", tmp.path);
            BOOST_TEST_REQUIRE(run.code == 0, run.err);
            const auto doc = nlohmann::json::parse(slurp(e.path()));
            std::string inputs;
            for (const auto& [name, t] : doc["tensors"].items())
                if (t["kind"] == "input") inputs += " --input " + name + "=t/" + name + ".npy";
            const CliResult again = run_cli("run model.onnx" + inputs + " --trace r", tmp.path);
            BOOST_TEST_REQUIRE(again.code == 0, again.err);
            for (const auto& out : doc["outputs"]) {
                const std::string file = out.get<std::string>() + ".npy";
                BOOST_TEST_REQUIRE(fs::exists(tmp.path / "r" / file), file);
                BOOST_TEST((slurp(tmp.path / "t" / file) == slurp(tmp.path / "r" / file)), file);
            }
            ++checked;
        }
    }
    BOOST_TEST(checked >= 23u);  // the seed, the fifteen variants, the seven FlexAttention examples
}

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_export
