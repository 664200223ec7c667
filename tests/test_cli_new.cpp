// attngraph new: --list, every ready variant file in graphs/ through check and run (and
// made again, identically, by the command in its "description"), weights as .npy files,
// refusal to overwrite, clear errors that leave nothing behind.
#include <boost/test/unit_test.hpp>

#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

using namespace attngraph;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kVariants = {"mha", "mha-batched",    "causal", "cross", "mqa",
                                            "gqa", "sliding-window", "alibi",  "decode"};

using attngraph::test::slurp;

}  // namespace

BOOST_AUTO_TEST_CASE(list_names_every_variant) {
    const auto r = run_cli("new --list");
    BOOST_TEST(r.code == 0);
    for (const auto& v : kVariants) BOOST_TEST(r.out.find(v + " ") != std::string::npos, v);
}

BOOST_AUTO_TEST_CASE(every_variant_file_checks_runs_and_grads) {
    for (const auto& v : kVariants) {
        BOOST_TEST_CONTEXT("graphs/" << v << ".json") {
            const fs::path file = test::source_dir() / "graphs" / (v + ".json");
            BOOST_REQUIRE(fs::exists(file));
            const auto check = run_cli("check '" + file.string() + "'");
            BOOST_TEST(check.code == 0);
            BOOST_TEST(check.out.find(", ok") != std::string::npos);
            test::TempDir dir;
            const auto run =
                run_cli("run '" + file.string() + "' --trace '" + (dir.path / "t").string() + "' --format text");
            BOOST_TEST(run.code == 0, run.err);
            BOOST_TEST(run.out.find("Y (") != std::string::npos);
            BOOST_TEST(fs::exists(dir.path / "t" / "trace.txt"));
            const auto f64 = run_cli("run '" + file.string() + "' --dtype f64 --threads 1");
            BOOST_TEST(f64.code == 0, f64.err);
            const auto grad = run_cli("grad '" + file.string() + "' --trace '" + (dir.path / "g").string() + "'");
            BOOST_TEST(grad.code == 0, grad.err);
            BOOST_TEST(fs::exists(dir.path / "g" / "grad" / "Wo.npy"));
        }
    }
}

BOOST_AUTO_TEST_CASE(variant_files_are_made_by_their_description) {
    for (const auto& v : kVariants) {
        BOOST_TEST_CONTEXT("graphs/" << v << ".json") {
            const fs::path file = test::source_dir() / "graphs" / (v + ".json");
            const auto doc = nlohmann::json::parse(slurp(file));
            std::string command = doc["description"].get<std::string>();
            BOOST_REQUIRE(command.rfind("attngraph new " + v + " ", 0) == 0);
            test::TempDir dir;
            const auto r = run_cli(command.substr(std::string("attngraph ").size()) + " -o '" +
                                   (dir.path / "g.json").string() + "'");
            BOOST_TEST(r.code == 0, r.err);
            BOOST_TEST(slurp(dir.path / "g.json") == slurp(file));
        }
    }
}

BOOST_AUTO_TEST_CASE(refuses_to_overwrite_without_force) {
    test::TempDir dir;
    const std::string out = "'" + (dir.path / "c.json").string() + "'";
    BOOST_TEST(run_cli("new causal --seq 3 --d-model 4 --heads 2 -o " + out).code == 0);
    const std::string first = slurp(dir.path / "c.json");
    const auto again = run_cli("new causal --seq 3 --d-model 4 --heads 2 --seed 2 -o " + out);
    BOOST_TEST(again.code != 0);
    BOOST_TEST(again.err.find("exists (use --force") != std::string::npos);
    BOOST_TEST(slurp(dir.path / "c.json") == first);
    BOOST_TEST(run_cli("new causal --seq 3 --d-model 4 --heads 2 --seed 2 --force -o " + out).code == 0);
    BOOST_TEST(slurp(dir.path / "c.json") != first);
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
    BOOST_TEST(files == 1u);  // no temporary left behind
}

BOOST_AUTO_TEST_CASE(weights_as_npy_files) {
    test::TempDir dir;
    const auto r =
        run_cli("new gqa --batch 2 --seq 4 --d-model 8 --heads 4 --groups 2 -o g.json --weights-dir w", dir.path);
    BOOST_TEST(r.code == 0, r.err);
    const auto doc = nlohmann::json::parse(slurp(dir.path / "g.json"));
    BOOST_TEST(doc["tensors"]["X"]["npy"] == "w/X.npy");
    BOOST_TEST((load_npy(dir.path / "w" / "Wqkv.npy").shape() == Shape{8, 16}));  // d + 2·g·d_k = 8 + 2·2·2
    BOOST_TEST(run_cli("run g.json", dir.path).code == 0);
    // the same graph with inline weights gives the same Y
    BOOST_TEST(run_cli("new gqa --batch 2 --seq 4 --d-model 8 --heads 4 --groups 2 -o inline.json", dir.path).code ==
               0);
    BOOST_TEST(run_cli("run g.json", dir.path).out == run_cli("run inline.json", dir.path).out);
    // a non-empty weights directory is refused
    const auto again =
        run_cli("new gqa --batch 2 --seq 4 --d-model 8 --heads 4 --groups 2 -o g2.json --weights-dir w", dir.path);
    BOOST_TEST(again.code != 0);
    BOOST_TEST(!fs::exists(dir.path / "g2.json"));
}

BOOST_AUTO_TEST_CASE(another_sequence_length_through_input) {
    // Reshape keeps the sequence axis as -1, so X may be replaced by a longer sequence
    test::TempDir dir;
    BOOST_TEST(run_cli("new causal --batch 2 --seq 4 --d-model 8 --heads 2 -o c.json", dir.path).code == 0);
    save_npy(dir.path / "x.npy", graphs::random_tensor({2, 9, 8}, DType::f32, 5));
    const auto r = run_cli("run c.json --input X=x.npy", dir.path);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(r.out.find("Y (2x9x8)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(another_batch_size_through_input) {
    // issue 12 §3: the batch is not written into the graph's Reshapes, so X (3, 4, 8) gives
    // Y (3, 4, 8) (it gave (2, 6, 8) once, the third sequence folded into the first two)
    test::TempDir dir;
    BOOST_TEST(run_cli("new mha-batched --batch 2 --seq 4 --d-model 8 --heads 2 -o mb.json", dir.path).code == 0);
    save_npy(dir.path / "x3.npy", graphs::random_tensor({3, 4, 8}, DType::f32, 5));
    const auto r = run_cli("run mb.json --input X=x3.npy", dir.path);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(r.out.find("Y (3x4x8)") != std::string::npos, r.out);
    // padding lengths belong to the batch they were written for: another batch is refused
    BOOST_TEST(
        run_cli("new causal --batch 2 --seq 4 --d-model 8 --heads 2 --kv-lengths 4,2 -o p.json", dir.path).code == 0);
    const auto p = run_cli("run p.json --input X=x3.npy", dir.path);
    BOOST_TEST(p.code == 1);
    BOOST_TEST(p.err.rfind("error: ", 0) == 0u, p.err);
    BOOST_TEST(p.err.find("S_padded") != std::string::npos, p.err);
    BOOST_TEST(p.err.find("batch axis 3") != std::string::npos, p.err);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_one_line_errors_and_write_nothing) {
    test::TempDir dir;
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"new flash --seq 4 --d-model 8 --heads 2 -o x.json", "unknown variant 'flash'"},
        {"new gqa --seq 4 --d-model 8 --heads 4 --groups 3 -o x.json", "not a multiple of groups"},
        {"new causal --seq 4 --d-model 10 --heads 4 -o x.json", "multiple of heads"},
        {"new causal --d-model 8 --heads 2 -o x.json", "--seq"},
        {"new causal --seq 4 --d-model 8 --heads 2", "-o FILE.json"},
        {"new cross --seq 4 --d-model 8 --heads 2 -o x.json", "kv_seq"},
        {"new causal --seq 4 --d-model 8 --heads 2 --window 2 -o x.json", "takes no window"},
        {"new sliding-window --seq 4 --d-model 8 --heads 2 -o x.json", "needs window"},
        {"new mha-batched --batch 2 --seq 4 --d-model 8 --heads 2 --kv-lengths 4 -o x.json",
         "padding lengths for batch"},
        {"new", "name a VARIANT"},
    };
    for (const auto& [args, message] : cases) {
        BOOST_TEST_CONTEXT(args) {
            const auto r = run_cli(args, dir.path);
            BOOST_TEST(r.code != 0);
            BOOST_TEST(r.err.rfind("error: ", 0) == 0u, r.err);
            BOOST_TEST(r.err.find(message) != std::string::npos, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        }
    }
    BOOST_TEST(fs::is_empty(dir.path));
}
