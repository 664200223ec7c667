// Export checked by a real runtime: every graphs/*.json, graphs/flex/*.json and tests/data/onnx_export/*.json is
// exported to ONNX (opset 23) and run by ONNX Runtime (npm onnxruntime-node, tests/node/, installed by
// scripts/install-deps.sh); each output must match attngraph's own trace within 1e-5. Without node or the package the
// test fails. The graphs are also imported again from their export, to the same bits.
#include <boost/test/unit_test.hpp>

#include <set>

#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "engine/graph_file.hpp"
#include "onnx/export.hpp"
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

// Opset 23's RotaryEmbedding takes float, float16 and bfloat16: an f64 graph holding one was
// written as a model ONNX Runtime rejects ('tensor(double)' invalid). It is refused, naming the
// file, node, op, dtype and shapes, and nothing is written; the f32 export still works.
BOOST_AUTO_TEST_CASE(an_f64_rotary_embedding_is_refused_naming_the_node_and_dtype) {
    TempDir tmp;
    const CliResult made = run_cli("new llama --seq 4 --d-model 8 --heads 2 --groups 1 -o l32.json -q", tmp.path);
    BOOST_TEST_REQUIRE(made.code == 0, made.err);
    const CliResult r = run_cli("export l32.json --dtype f64 -o l64.onnx", tmp.path);
    BOOST_TEST(r.code == 1, r.err);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
    BOOST_TEST(r.err.rfind("error: l32.json: node '", 0) == 0, r.err);
    BOOST_TEST(r.err.find("' (RotaryEmbedding): ONNX's RotaryEmbedding (opset 23) takes float, float16 or bfloat16, "
                          "not this graph's f64; shapes (") != std::string::npos,
               r.err);
    BOOST_TEST(r.err.find("(export the graph as f32: --dtype f32)") != std::string::npos, r.err);
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path)) names.insert(e.path().filename().string());
    BOOST_TEST((names == std::set<std::string>{"l32.json"}));
    const CliResult f32 = run_cli("export l32.json -o l32.onnx", tmp.path);
    BOOST_TEST(f32.code == 0, f32.err);
}

// Every other op of the vocabulary takes double in its opset, but LayerNormalization's Mean
// and InvStdDev (stats = 1) come in float or bfloat16 only: that is refused too. vocab.json
// without its RotaryEmbedding and stats nodes exports in f64 and ONNX Runtime runs it to
// attngraph's f64 outputs (ONNX Runtime's CPU provider has no double Erf, LeakyRelu, Softplus
// or Conv, valid ops there, so `xe`, `xl`, `xp` and `cv` are left out of the run).
BOOST_AUTO_TEST_CASE(an_f64_export_refuses_float_only_outputs_and_runs_every_other_op) {
    TempDir tmp;
    auto doc = nlohmann::json::parse(slurp(source_dir() / "tests" / "data" / "onnx_export" / "vocab.json"));
    const auto drop = [&](const std::set<std::string>& names) {
        auto& nodes = doc["nodes"];
        nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](const auto& n) { return names.count(n["name"]); }),
                    nodes.end());
        auto& outs = doc["outputs"];
        outs.erase(std::remove_if(outs.begin(), outs.end(), [&](const auto& o) { return names.count(o); }), outs.end());
    };
    const auto export_f64 = [&](const std::string& file) {
        std::ofstream(tmp.path / file) << doc.dump();
        return run_cli("export " + file + " --dtype f64 -o model.onnx --force", tmp.path);
    };
    CliResult r = export_f64("vocab.json");
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err ==
                   "error: vocab.json: node 'ln' (LayerNormalization): ONNX's LayerNormalization gives Mean and "
                   "InvStdDev (stats = 1) in float or bfloat16, not this graph's f64; shapes (2x3x4), (4), (4) "
                   "(export the graph as f32: --dtype f32)\n",
               r.err);
    drop({"ln", "ln_y", "ln_stats"});
    r = export_f64("nostats.json");
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err.rfind("error: nostats.json: node 'rope' (RotaryEmbedding): ONNX's RotaryEmbedding (opset 23) "
                           "takes float, float16 or bfloat16, not this graph's f64; shapes (2x1x3x4), ",
                           0) == 0,
               r.err);
    BOOST_TEST(!fs::exists(tmp.path / "model.onnx"));
    drop({"rope", "rope3", "xe", "xl", "xp", "cv"});
    r = export_f64("f64.json");
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const CliResult run = run_cli("run f64.json --dtype f64 --trace t", tmp.path);
    BOOST_TEST_REQUIRE(run.code == 0, run.err);
    const fs::path script = source_dir() / "tests" / "node" / "ort_check.js";
    const std::string out = (tmp.path / "ort.out").string();
    const int status = std::system(("node " + q(script) + " " + q(tmp.path / "model.onnx") + " " + q(tmp.path / "t") +
                                    " 1e-10 >" + q(out) + " 2>&1")
                                       .c_str());
    const std::string report = slurp(out);
    BOOST_TEST(status == 0, report);
    std::size_t compared = 0;  // one line per output
    for (auto at = report.find("max |ONNX Runtime - attngraph|"); at != std::string::npos;
         at = report.find("max |ONNX Runtime - attngraph|", at + 1))
        ++compared;
    BOOST_TEST(compared == 38u, report);
}

// The model is written through a hidden, unique temporary (.NAME.tmp-PID-N, created
// exclusively): a user's own NAME.tmp, or a symlink by that name, is left alone (it was
// truncated, or written through); a failed rename (OUT an existing directory) leaves nothing.
BOOST_AUTO_TEST_CASE(export_writes_through_a_hidden_unique_temporary_and_cleans_up) {
    TempDir tmp;
    const auto listing = [&] {
        std::set<std::string> names;
        for (const auto& e : fs::directory_iterator(tmp.path)) names.insert(e.path().filename().string());
        return names;
    };
    std::ofstream(tmp.path / "m.onnx.tmp") << "mine";
    std::ofstream(tmp.path / "target.txt") << "target";
    fs::create_symlink(tmp.path / "target.txt", tmp.path / "n.onnx.tmp");
    for (const char* out : {"m.onnx", "n.onnx"}) {
        const CliResult r = run_cli("export " + q(seed_graph()) + " -o " + out, tmp.path);
        BOOST_TEST(r.code == 0, r.err);
        BOOST_TEST(fs::file_size(tmp.path / out) > 100u);
    }
    BOOST_TEST(slurp(tmp.path / "m.onnx.tmp") == "mine");
    BOOST_TEST(slurp(tmp.path / "target.txt") == "target");
    BOOST_TEST(fs::is_symlink(tmp.path / "n.onnx.tmp"));
    // -o names a directory: refused, the directory untouched, no temporary left
    fs::create_directory(tmp.path / "dir.onnx");
    std::ofstream(tmp.path / "dir.onnx" / "keep") << "keep";
    const std::set<std::string> before = listing();
    const CliResult r = run_cli("export " + q(seed_graph()) + " -o dir.onnx --force", tmp.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err == "error: dir.onnx: is a directory\n", r.err);
    // the library itself: the rename fails, and the temporary is removed
    BOOST_CHECK_THROW(export_onnx(load_graph(seed_graph()), tmp.path / "dir.onnx"), IoError);
    BOOST_TEST((listing() == before));
    BOOST_TEST(slurp(tmp.path / "dir.onnx" / "keep") == "keep");
    // no file name at all: one line, exit 1 (not an internal filesystem error)
    const CliResult empty = run_cli("export " + q(seed_graph()) + " -o ''", tmp.path);
    BOOST_TEST(empty.code == 1);
    BOOST_TEST(empty.err == "error: '': names no file to write\n", empty.err);
    BOOST_TEST((listing() == before));
}

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_export
