// Export checked by a real runtime: every graphs/*.json, graphs/flex/*.json and tests/data/onnx_export/*.json is
// exported to ONNX (opset 23) and run by ONNX Runtime (npm onnxruntime-node, tests/node/, installed by
// scripts/install-deps.sh); each output must match attngraph's own trace within 1e-5. Without node or the package the
// test fails. The graphs are also imported again from their export, to the same bits.
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

// Each file is exported once and checked twice:
// - ONNX Runtime runs the export to attngraph's own outputs within 1e-5 (every file);
// - the export imported again runs to the same outputs bit for bit (graphs/ and graphs/flex/:
//   the exported primitive ops map back onto attngraph ops doing the same arithmetic, and
//   constants fold with the ops' own kernels).
BOOST_AUTO_TEST_CASE(every_graph_exported_runs_in_onnx_runtime_and_imported_again_with_the_same_outputs) {
    const fs::path script = source_dir() / "tests" / "node" / "ort_check.js";
    BOOST_TEST_REQUIRE(fs::is_directory(source_dir() / "tests" / "node" / "node_modules" / "onnxruntime-node"),
                       "onnxruntime-node is missing: run scripts/install-deps.sh");
    std::size_t checked = 0, reimported = 0;
    // graphs/ and tests/data/onnx_export/ (every op of the attention vocabulary in one graph)
    std::vector<std::pair<fs::path, bool>> files;  // (file, imported again)
    const std::pair<fs::path, bool> dirs[] = {{source_dir() / "graphs", true},
                                              {source_dir() / "graphs" / "flex", true},
                                              {source_dir() / "tests" / "data" / "onnx_export", false}};
    for (const auto& [dir, again] : dirs)
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().extension() == ".json") files.emplace_back(e.path(), again);
    std::sort(files.begin(), files.end());
    for (const auto& [file, import_again] : files) {
        BOOST_TEST_CONTEXT(file.filename()) {
            TempDir tmp;
            const CliResult ex = run_cli("export " + q(file) + " -o model.onnx", tmp.path);
            BOOST_TEST_REQUIRE(ex.code == 0, ex.err);
            const CliResult run = run_cli("run " + q(file) + " --trace t", tmp.path);
            BOOST_TEST_REQUIRE(run.code == 0, run.err);
            const std::string out = (tmp.path / "ort.out").string();
            const std::string cmd = "node " + q(script) + " " + q(tmp.path / "model.onnx") + " " + q(tmp.path / "t") +
                                    " 1e-5 >" + q(out) + " 2>&1";
            const int status = std::system(cmd.c_str());
            const std::string report = slurp(out);
            BOOST_TEST_MESSAGE(file.filename().string() << ": " << report);
            BOOST_TEST(status == 0, report);
            BOOST_TEST(report.find("max |ONNX Runtime - attngraph|") != std::string::npos, report);
            ++checked;
            if (!import_again) continue;
            const auto doc = nlohmann::json::parse(slurp(file));
            std::string inputs;
            for (const auto& [name, t] : doc["tensors"].items())
                if (t["kind"] == "input") inputs += " --input " + name + "=t/" + name + ".npy";
            const CliResult again = run_cli("run model.onnx" + inputs + " --trace r", tmp.path);
            BOOST_TEST_REQUIRE(again.code == 0, again.err);
            for (const auto& o : doc["outputs"]) {
                const std::string name = o.get<std::string>() + ".npy";
                BOOST_TEST_REQUIRE(fs::exists(tmp.path / "r" / name), name);
                BOOST_TEST((slurp(tmp.path / "t" / name) == slurp(tmp.path / "r" / name)), name);
            }
            ++reimported;
        }
    }
    BOOST_TEST(checked >= 24u);
    BOOST_TEST(reimported >= 23u);  // the seed, the fifteen variants, the seven FlexAttention examples
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

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_export
