// attngraph new: --list, every ready graph file in graphs/ and graphs/flex/ through check, run,
// grad, explain and report (and made again, identically, by the command in its "description"),
// weights as .npy files, refusal to overwrite, clear errors that leave nothing behind.
#include <boost/test/unit_test.hpp>

#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/sanitizers.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_cli_new)

using namespace attngraph;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kVariants = {"mha",     "mha-batched",    "causal", "cross",     "mqa",
                                            "gqa",     "sliding-window", "alibi",  "decode",    "llama",
                                            "softcap", "sinks",          "diff",   "prefix-lm", "document"};
const std::vector<std::string> kFlex = {"causal", "sliding-window", "prefix-lm",        "document",
                                        "alibi",  "softcap",        "relative-position"};

using attngraph::test::slurp;

// Every graph file of graphs/ and graphs/flex/, sorted.
std::vector<fs::path> graph_files() {
    std::vector<fs::path> files;
    for (const fs::path& dir : {test::source_dir() / "graphs", test::source_dir() / "graphs" / "flex"})
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

std::string q(const fs::path& p) {
    return "'" + p.string() + "'";
}

}  // namespace

BOOST_AUTO_TEST_CASE(list_names_every_variant) {
    const auto r = run_cli("new --list");
    BOOST_TEST(r.code == 0);
    for (const auto& v : kVariants) BOOST_TEST(r.out.find(v + " ") != std::string::npos, v);
    for (const auto& v : kFlex) BOOST_TEST(r.out.find("flex/" + v + " ") != std::string::npos, v);
}

BOOST_AUTO_TEST_CASE(every_variant_and_flex_example_has_its_file) {
    for (const auto& v : kVariants) BOOST_TEST(fs::exists(test::source_dir() / "graphs" / (v + ".json")), v);
    for (const auto& v : kFlex) BOOST_TEST(fs::exists(test::source_dir() / "graphs" / "flex" / (v + ".json")), v);
    BOOST_TEST(graph_files().size() == kVariants.size() + kFlex.size() + 1);  // and the seed
}

// issue 12: every file of graphs/ (graphs/flex/ too) runs through check, run, grad, explain
// and report.
BOOST_AUTO_TEST_CASE(every_graph_file_checks_runs_grads_explains_and_reports) {
    std::vector<fs::path> files = graph_files();
#ifdef ATTNGRAPH_TSAN
    // Under ThreadSanitizer the first file of graphs/ and of graphs/flex/ go through every
    // command: the other files take the same command paths, and their graphs (sequences of 1
    // to 10) run threaded in-process under it in test_variants (every variant, at 2 to 8
    // threads) and test_flex (every flex file), while each of this test's 161 CLI calls costs
    // 0.1-0.6 s there (about 90 s). The release and ASan builds run every file.
    std::vector<fs::path> firsts;
    for (const fs::path& file : files)
        if (std::none_of(firsts.begin(), firsts.end(),
                         [&](const fs::path& f) { return f.parent_path() == file.parent_path(); }))
            firsts.push_back(file);
    files = firsts;
#endif
    for (const auto& file : files) {
        BOOST_TEST_CONTEXT(fs::relative(file, test::source_dir()).string()) {
            const auto doc = nlohmann::json::parse(slurp(file));
            const auto check = run_cli("check " + q(file));
            BOOST_TEST(check.code == 0);
            BOOST_TEST(check.out.find(", ok") != std::string::npos);
            test::TempDir dir;
            const auto run = run_cli("run " + q(file) + " --trace " + q(dir.path / "t") + " --format text");
            BOOST_TEST(run.code == 0, run.err);
            for (const auto& out : doc["outputs"])
                BOOST_TEST(run.out.find(out.get<std::string>() + " (") != std::string::npos, out);
            BOOST_TEST(fs::exists(dir.path / "t" / "trace.txt"));
            const auto f64 = run_cli("run " + q(file) + " --dtype f64 --threads 1");
            BOOST_TEST(f64.code == 0, f64.err);
            const auto grad = run_cli("grad " + q(file) + " --trace " + q(dir.path / "g"));
            BOOST_TEST(grad.code == 0, grad.err);
            for (const auto& [name, t] : doc["tensors"].items())
                BOOST_TEST(fs::exists(dir.path / "g" / "grad" / (name + ".npy")), name);
            const auto explain = run_cli("explain " + q(file) + " -o " + q(dir.path / "walk.md"));
            BOOST_TEST(explain.code == 0, explain.err);
            const std::string walk = slurp(dir.path / "walk.md");
            for (const auto& n : doc["nodes"]) BOOST_TEST(walk.find(n["name"].get<std::string>()) != std::string::npos);
            const auto npy = run_cli("run " + q(file) + " --trace " + q(dir.path / "n"));
            BOOST_TEST(npy.code == 0, npy.err);
            const auto report = run_cli("report " + q(dir.path / "n") + " -o " + q(dir.path / "report.html"));
            BOOST_TEST(report.code == 0, report.err);
            BOOST_TEST(fs::file_size(dir.path / "report.html") > 1000u);
        }
    }
}

BOOST_AUTO_TEST_CASE(variant_files_are_made_by_their_description) {
    std::size_t checked = 0;
    for (const auto& file : graph_files()) {
        const auto doc = nlohmann::json::parse(slurp(file));
        if (!doc.contains("description")) continue;  // the seed document's graph
        BOOST_TEST_CONTEXT(fs::relative(file, test::source_dir()).string()) {
            const std::string stem = file.stem().string();
            const std::string variant = file.parent_path().filename() == "flex" ? "flex/" + stem : stem;
            std::string command = doc["description"].get<std::string>();
            BOOST_REQUIRE(command.rfind("attngraph new " + variant + " ", 0) == 0);
            test::TempDir dir;
            const auto r = run_cli(command.substr(std::string("attngraph ").size()) + " -o " + q(dir.path / "g.json"));
            BOOST_TEST(r.code == 0, r.err);
            BOOST_TEST(slurp(dir.path / "g.json") == slurp(file));
            ++checked;
        }
    }
    BOOST_TEST(checked == kVariants.size() + kFlex.size());
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

// llama's positions and prefix-lm's / document's index tensors are Ranges of the n the graph
// was made for: X of another batch size runs, X of another length is one error line naming
// the node that cannot take it.
BOOST_AUTO_TEST_CASE(index_tensors_hold_the_sequence_length) {
    test::TempDir dir;
    save_npy(dir.path / "x3.npy", graphs::random_tensor({3, 4, 8}, DType::f32, 5));
    save_npy(dir.path / "x6.npy", graphs::random_tensor({2, 6, 8}, DType::f32, 5));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"llama --batch 2 --seq 4 --d-model 8 --heads 2", "'Q_rope' (RotaryEmbedding)"},
        {"prefix-lm --batch 2 --seq 4 --d-model 8 --heads 2 --prefix-length 2", "'S_masked' (Mask)"},
        {"document --batch 2 --seq 4 --d-model 8 --heads 2 --documents 1,3", "'S_masked' (Mask)"},
    };
    for (const auto& [args, node] : cases) {
        BOOST_TEST_CONTEXT(args) {
            BOOST_TEST(run_cli("new " + args + " -o g.json --force", dir.path).code == 0);
            const auto ok = run_cli("run g.json --input X=x3.npy", dir.path);
            BOOST_TEST(ok.code == 0, ok.err);
            BOOST_TEST(ok.out.find("Y (3x4x8)") != std::string::npos, ok.out);
            const auto longer = run_cli("run g.json --input X=x6.npy", dir.path);
            BOOST_TEST(longer.code == 1);
            BOOST_TEST(longer.err.rfind("error: ", 0) == 0u, longer.err);
            BOOST_TEST(longer.err.find(node) != std::string::npos, longer.err);
            BOOST_TEST(std::count(longer.err.begin(), longer.err.end(), '\n') == 1, longer.err);
        }
    }
}

// issue 12 spells prefix-lm's option `--prefix P` (issue 15's --weights-from takes --prefix as
// its key prefix): without --weights-from it is the prefix length. A of the graph it writes keeps
// key j for query i exactly when j < P or j <= i (FlexAttention's prefix-LM mask_mod).
BOOST_AUTO_TEST_CASE(prefix_is_the_prefix_length_without_weights_from) {
    for (const std::string variant : {"prefix-lm", "flex/prefix-lm"}) {
        BOOST_TEST_CONTEXT(variant) {
            test::TempDir dir;
            const std::string sizes = "new " + variant + " --batch 2 --seq 6 --d-model 8 --heads 2 ";
            const auto r = run_cli(sizes + "--prefix 2 -o p.json", dir.path);
            BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
            BOOST_TEST(run_cli(sizes + "--prefix-length 2 -o pl.json", dir.path).code == 0);
            BOOST_TEST(slurp(dir.path / "p.json") == slurp(dir.path / "pl.json"));
            const auto run = run_cli("run p.json --trace t --only A", dir.path);
            BOOST_REQUIRE_MESSAGE(run.code == 0, run.err);
            const auto a = load_npy(dir.path / "t" / "A.npy").cast(DType::f64).as<double>();
            BOOST_REQUIRE((a.shape() == Shape{2, 2, 6, 6}));
            for (std::size_t b = 0; b < 2; ++b)
                for (std::size_t h = 0; h < 2; ++h)
                    for (std::size_t i = 0; i < 6; ++i)
                        for (std::size_t j = 0; j < 6; ++j)
                            BOOST_TEST((a(b, h, i, j) > 0) == (j < 2 || j <= i), b << h << i << j);
        }
    }
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
        // the options of the new variants (issue 12 §4)
        {"new document --seq 8 --d-model 8 --heads 2 --documents 3,5,2 -o x.json", "sum to 10, not to seq 8"},
        {"new document --seq 8 --d-model 8 --heads 2 --documents 3,0,5 -o x.json", "at least 1, got 3,0,5"},
        {"new document --seq 8 --d-model 8 --heads 2 -o x.json", "needs documents"},
        {"new flex/document --seq 8 --d-model 8 --heads 2 --documents 4,5 -o x.json", "sum to 9, not to seq 8"},
        {"new prefix-lm --seq 8 --d-model 8 --heads 2 --prefix-length 9 -o x.json",
         "prefix length 9 is longer than the sequence"},
        {"new prefix-lm --seq 8 --d-model 8 --heads 2 -o x.json", "needs a prefix length"},
        {"new flex/prefix-lm --seq 4 --d-model 8 --heads 2 --prefix-length 5 -o x.json", "longer than the sequence"},
        {"new causal --seq 8 --d-model 8 --heads 2 --prefix-length 2 -o x.json", "takes no prefix length"},
        {"new llama --seq 4 --d-model 6 --heads 2 -o x.json", "d_k = d_model / heads = 3 is odd"},
        {"new diff --seq 4 --d-model 6 --heads 2 -o x.json", "d_k = d_model / heads = 3 is odd"},
        {"new llama --seq 4 --d-model 8 --heads 2 --groups 3 -o x.json", "not a multiple of groups"},
        {"new softcap --seq 4 --d-model 8 --heads 2 --softcap 0 -o x.json", "softcap must be a positive finite"},
        {"new softcap --seq 4 --d-model 8 --heads 2 --softcap -3 -o x.json", "softcap must be a positive finite"},
        {"new flex/softcap --seq 4 --d-model 8 --heads 2 --softcap inf -o x.json", "softcap must be a positive"},
        {"new causal --seq 4 --d-model 8 --heads 2 --softcap 30 -o x.json", "takes no softcap"},
        {"new mha-batched --seq 4 --d-model 8 --heads 2 --documents 4 -o x.json", "takes no documents"},
        {"new sinks --seq 4 --d-model 8 --heads 2 --causal -o x.json", "takes no causal flag"},
        {"new flex/sliding-window --seq 4 --d-model 8 --heads 2 -o x.json", "needs window >= 1"},
        {"new flex/causal --seq 4 --d-model 8 --heads 2 --groups 2 -o x.json", "takes no groups"},
        {"new flex/flash --seq 4 --d-model 8 --heads 2 -o x.json", "unknown FlexAttention example 'flex/flash'"},
        {"new prefix-lm --seq 8 --d-model 8 --heads 2 --prefix-length -1 -o x.json", "--prefix-length"},
        {"new causal --seq 8 --d-model 8 --heads 2 --prefix 2 -o x.json", "takes no prefix length"},
        {"new prefix-lm --seq 8 --d-model 8 --heads 2 --prefix two -o x.json", "prefix length P, a whole number"},
        {"new prefix-lm --seq 8 --d-model 8 --heads 2 --prefix 2 --prefix-length 3 -o x.json", "disagree"},
        // sizes the machine cannot hold: refused before the tensors are allocated (a quarter
        // of --max-memory 1G is 268435456 bytes), not std::bad_alloc or the system's OOM killer
        {"new mha --seq 4 --d-model 1000000 --heads 2 --max-memory 1G -o x.json",
         "variant 'mha' (seq 4, d_model 1000000, heads 2): a tensor of shape (1000000x500000) f32 needs "
         "2000000000000 bytes after 16000000 bytes of the others, over 268435456 bytes (a quarter of the memory "
         "limit, 1073741824 bytes"},
        {"new mha-batched --seq 1000000000 --d-model 8 --heads 2 --max-memory 1G -o x.json",
         "a tensor of shape (1000000000x8) f32 needs 32000000000 bytes, over 268435456 bytes"},
        {"new flex/causal --seq 100000 --d-model 4096 --heads 32 --max-memory 1G -o x.json",
         "a tensor of shape (1x32x100000x128) f32 needs 1638400000 bytes"},
        {"new mha --seq 4 --d-model 1000000 --heads 2 -o x.json", "f32 needs 2000000000000 bytes"},
        // mha at n 4, d_model 8, 2 heads: X 4x8, per head Wq/Wk/Wv 8x4 and their 1x4 biases,
        // Wo 8x8, bo 1x8 = 320 floats, 1280 bytes; --max-memory 5116 leaves 1279 for them
        {"new mha --seq 4 --d-model 8 --heads 2 --max-memory 5116 -o x.json",
         "a tensor of shape (1x8) f32 needs 32 bytes after 1248 bytes of the others, over 1279 bytes"},
        {"new mha --seq 4 --d-model 8 --heads 2 --max-memory 0 -o x.json", "--max-memory: '0' is not a size"},
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
    // 1280 bytes of tensors fit a quarter of 5120 exactly
    const auto fits = run_cli("new mha --seq 4 --d-model 8 --heads 2 --max-memory 5120 -o x.json", dir.path);
    BOOST_TEST(fits.code == 0, fits.err);
    BOOST_TEST(fs::exists(dir.path / "x.json"));
}

BOOST_AUTO_TEST_SUITE_END()  // test_cli_new
