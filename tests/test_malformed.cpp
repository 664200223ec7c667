// The corpus of malformed graph files (tests/data/malformed/), each through the CLI: one line
// on stderr starting with "error: " naming the file and saying what is wrong, a non-zero exit
// that is not a signal, and no trace directory left behind. Plus the edge cases that are
// accepted on purpose (tests/data/edge/): NaN/Inf data and 0-length axes.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_malformed)

using namespace attngraph;
namespace fs = std::filesystem;

namespace {

struct Case {
    const char* file;
    std::vector<const char*> expected;  // substrings of the error line (after the file name)
    const char* extra_args = "";
};

// Every file of tests/data/malformed/*.json with what its error must say.
const std::vector<Case> cases = {
    {"truncated.json", {"malformed JSON", "parse error"}},
    {"empty_file.json", {"malformed JSON"}},
    {"not_object.json", {"must be a JSON object"}},
    {"trailing_garbage.json", {"malformed JSON"}},
    {"tensors_wrong_type.json", {"\"tensors\" must be an object"}},
    {"nodes_wrong_type.json", {"\"nodes\" must be a list"}},
    {"shape_wrong_type.json", {"tensor 'X'", "\"shape\" must be a list of sizes"}},
    {"inputs_wrong_type.json", {"node 'Y' (MatMul)", "\"inputs\" must be a list of names"}},
    {"attr_wrong_type.json", {"node 'Y' (Scale)", "attribute 'factor' has the wrong type", "\"two\""}},
    {"axis_out_of_int_range.json", {"node 'Y' (Softmax)", "attribute 'axis' has the wrong type", "4294967295"}},
    {"axis_out_of_range.json", {"node 'Y' (Softmax)", "axis 2 is out of range for rank 2", "X (3x4)"}},
    {"perm_repeats.json", {"node 'Y' (Transpose)", "perm repeats axis 0"}},
    {"perm_float.json", {"node 'Y' (Transpose)", "attribute 'perm' has the wrong type"}},
    {"kind_wrong.json", {"tensor 'X'", "\"kind\" must be \"input\" or \"param\"", "\"weight\""}},
    {"dtype_wrong.json", {"unknown dtype 'f16'"}},
    {"negative_shape.json", {"tensor 'X'", "non-negative integers, got -3"}},
    {"fractional_shape.json", {"tensor 'X'", "non-negative integers, got 2.5"}},
    {"huge_shape.json", {"tensor 'X'", "shape (1000000x1000000) has 1000000000000 elements, over the limit"}},
    {"overflow_shape.json", {"tensor 'X'", "too many elements"}},
    {"too_many_axes.json", {"tensor 'X'", "more than 32 axes"}},
    {"data_disagrees_with_shape.json", {"tensor 'X'", "does not agree with shape (2x2) on axis 1"}},
    {"ragged_data.json", {"tensor 'X'", "does not agree with shape (2x4) on axis 1"}},
    {"data_not_number.json", {"tensor 'X'", "\"data\" holds \"x\" where a number belongs"}},
    {"data_and_npy.json", {"tensor 'X'", "exactly one of \"data\", \"npy\" and \"safetensors\""}},
    {"neither_data_nor_npy.json", {"tensor 'X'", "exactly one of \"data\", \"npy\" and \"safetensors\""}},
    {"cycle.json", {"has a cycle", "A", "B"}},
    {"self_loop.json", {"has a cycle: A (Scale) -> A (Scale)"}},
    {"unknown_op.json", {"node 'Y'", "unknown op 'Softmaxx'"}},
    {"unknown_attr.json", {"node 'Y' (Scale)", "unknown attribute 'bias'", "known: factor"}},
    {"missing_attr.json", {"node 'Y' (Scale)", "missing required attribute 'factor'"}},
    {"unknown_key.json", {"nodes[0]", "unknown key 'input'"}},
    {"unknown_top_key.json", {"unknown key 'weights'"}},
    {"duplicate_node.json", {"duplicate node name 'Y'"}},
    {"duplicate_key.json", {"duplicate key 'X' in \"tensors\""}},
    {"node_named_like_tensor.json", {"duplicate name 'W'", "both a tensor and a node"}},
    {"dangling_input.json", {"node 'Y' (MatMul)", "input 'Q' is not a tensor or node"}},
    {"dangling_output.json", {"output 'Z' is not a tensor or node"}},
    {"bad_output_index.json", {"node 'Z' (Scale)", "input 'Y:3' names no output of node 'Y'"}},
    {"wrong_arity.json", {"node 'Y' (MatMul)", "takes 2 inputs, got 1"}},
    {"shape_mismatch.json", {"node 'Y' (MatMul)", "inner dimensions differ", "(3x4) · (3x4)"}},
    {"zero_axis_mismatch.json", {"node 'Y' (MatMul)", "inner dimensions differ", "(3x0) · (4x2)"}},
    {"empty_graph.json", {"has no nodes"}},
    {"no_nodes.json", {"has no nodes"}},
    {"name_with_slash.json", {"invalid node name '../evil'"}},
    {"name_dotdot.json", {"invalid node name '..'"}},
    {"name_with_newline.json", {"invalid tensor name 'a\\nb'"}},
    {"node_output_over_limit.json",
     {"node 'outer' (MatMul) output 'outer' of shape (1000x1000) f32 needs 4000000 bytes", "memory limit of 1048576"},
     "--max-memory 1M"},
    {"npy_outside.json", {"tensor 'X'", "'../seed_values.npy' leaves the graph file's folder", "--allow-outside-paths"}},
    {"npy_absolute.json", {"tensor 'X'", "'/etc/passwd' leaves the graph file's folder"}},
    {"npy_missing.json", {"tensor 'X'", "missing.npy: cannot open"}},
    {"npy_header_lies.json", {"tensor 'X'", "lies.npy: header says shape (3x4) <f4 = 48 bytes, file holds 20"}},
    {"npy_shape_disagrees.json", {"tensor 'X'", "\"shape\" (4x3) disagrees with", "(3x4)"}},
    {"npy_not_npy.json", {"tensor 'X'", "not a .npy file"}},
};

fs::path malformed_dir() { return test::source_dir() / "tests" / "data" / "malformed"; }

std::size_t count_lines(const std::string& s) {
    std::size_t n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

// What every failure must look like; `trace_dir` must not exist afterwards.
void check_one_line_error(const test::CliResult& r, const std::string& file, const Case& c, const fs::path& cwd) {
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.code < 128, "exit " << r.code << " looks like a signal");
    BOOST_TEST(r.err.rfind("error: ", 0) == 0, "stderr: " << r.err);
    BOOST_TEST(count_lines(r.err) == 1u, "stderr: " << r.err);
    BOOST_TEST(r.err.find(file) != std::string::npos, "the error names the file: " << r.err);
    for (const char* e : c.expected) BOOST_TEST(r.err.find(e) != std::string::npos, "'" << e << "' in: " << r.err);
    BOOST_TEST(!fs::exists(cwd / "trace"));
    for (const auto& entry : fs::directory_iterator(cwd))
        BOOST_TEST(entry.path().filename().string().find("trace") == std::string::npos, "left " << entry.path());
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_malformed_file_has_an_expected_error) {
    std::set<std::string> listed;
    for (const auto& c : cases) listed.insert(c.file);
    std::size_t files = 0;
    for (const auto& entry : fs::directory_iterator(malformed_dir())) {
        if (entry.path().extension() != ".json") continue;
        ++files;
        BOOST_TEST(listed.count(entry.path().filename().string()) == 1u, entry.path() << " has no expected error");
    }
    BOOST_TEST(files == cases.size());
}

BOOST_AUTO_TEST_CASE(malformed_files_give_one_line_errors_through_run_and_check) {
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT("file " << c.file) {
            test::TempDir cwd;
            const std::string file = (malformed_dir() / c.file).string();
            const test::CliResult run = test::run_cli("run '" + file + "' --trace trace " + c.extra_args, cwd.path);
            check_one_line_error(run, file, c, cwd.path);
            const test::CliResult check = test::run_cli("check '" + file + "' " + c.extra_args, cwd.path);
            check_one_line_error(check, file, c, cwd.path);
            BOOST_TEST(check.err == run.err);
        }
    }
}

BOOST_AUTO_TEST_CASE(malformed_files_throw_typed_errors_from_the_library) {
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT("file " << c.file) {
            LoadOptions options;
            if (std::string(c.extra_args) == "--max-memory 1M") options.max_bytes = 1 << 20;
            try {
                load_graph(malformed_dir() / c.file, options);
                BOOST_ERROR("loaded without an error");
            } catch (const Error& e) {
                for (const char* s : c.expected)
                    if (std::string(s).find("\\n") == std::string::npos)
                        BOOST_TEST(std::string(e.what()).find(s) != std::string::npos, "'" << s << "' in: " << e.what());
            }
        }
    }
}

// ---- accepted on purpose ---------------------------------------------------------------

fs::path edge(const char* name) { return test::source_dir() / "tests" / "data" / "edge" / name; }

// "NaN", "Infinity", "-Infinity" in data are accepted (a graph may well be about them); a run
// computes with them, and --check-finite stops at the first node whose output is not finite:
// S = 2·X holds NaN, +inf and -inf, the -inf carried on from X's (a masked score: not counted).
BOOST_AUTO_TEST_CASE(nan_data_is_accepted_and_check_finite_flags_it) {
    const Graph g = load_graph(edge("nan_data.json"));
    const Tensor& x = *g.value(g.at("X")).data;
    BOOST_TEST(std::isnan(x.at_flat(1)));
    BOOST_TEST(x.at_flat(6) == INFINITY);
    BOOST_TEST(x.at_flat(7) == -INFINITY);

    test::TempDir cwd;
    const auto ok = test::run_cli("run '" + edge("nan_data.json").string() + "' --trace t", cwd.path);
    BOOST_TEST(ok.code == 0, ok.err);
    BOOST_TEST(fs::exists(cwd.path / "t" / "manifest.json"));

    const auto flagged = test::run_cli("run '" + edge("nan_data.json").string() + "' --check-finite --trace u", cwd.path);
    BOOST_TEST(flagged.code == 1);
    BOOST_TEST(flagged.err.rfind("error: " + edge("nan_data.json").string() + ": node 'S' (Scale) output has 2 non-finite", 0) == 0,
               flagged.err);
    BOOST_TEST(count_lines(flagged.err) == 1u);
    // the partial trace is kept and says so
    std::ifstream in(cwd.path / "u" / "manifest.json");
    const auto manifest = nlohmann::json::parse(in);
    BOOST_TEST(manifest["complete"] == false);
}

// A "data" number f32 cannot hold (1e39) would become infinite: refused naming the tensor and
// the index in an f32 graph, taken in f64; "Infinity" written as such stays allowed.
BOOST_AUTO_TEST_CASE(data_beyond_f32s_range_is_refused_in_f32) {
    const std::string text = R"({"tensors": {"X": {"kind": "input", "data": [[1, "Infinity", -1e39]]}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})";
    const auto error_of = [](const std::string& graph, const char* origin) {
        try {
            parse_graph(graph, ".", origin);
        } catch (const GraphError& err) {
            return std::string(err.what());
        }
        return std::string();
    };
    const std::string e = error_of(text, "big.json");
    BOOST_TEST(e.find("big.json: tensor 'X': \"data\" value -1e+39 at flat index 2 is beyond f32's range") !=
                   std::string::npos,
               e);
    LoadOptions f64;
    f64.dtype = DType::f64;
    const Graph g = parse_graph(text, ".", "big.json", f64);
    BOOST_TEST(g.value(g.at("X")).data->at_flat(2) == -1e39);
    // an integer f32 cannot hold exactly, as in an .npy file; 2^24 itself and 1e30 written as a
    // float (rounded, as floats are) pass
    const std::string ints = R"({"tensors": {"X": {"kind": "input", "data": [[16777216, 1e30, -16777217]]}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})";
    const std::string ie = error_of(ints, "ints.json");
    BOOST_TEST(ie.find("ints.json: tensor 'X': \"data\" integer -16777217 at flat index 2 is beyond 2^24 and cannot "
                       "be held exactly in f32") != std::string::npos,
               ie);
    const Graph gi = parse_graph(ints, ".", "ints.json", f64);
    BOOST_TEST(gi.value(gi.at("X")).data->at_flat(2) == -16777217.0);
    BOOST_TEST(gi.value(gi.at("X")).data->at_flat(0) == 16777216.0);
}

// 0-length axes follow numpy: (0x4)·(4x2) is (0x2), a k = 0 product is all zeros.
BOOST_AUTO_TEST_CASE(zero_length_axes_are_accepted) {
    test::TempDir cwd;
    const auto r = test::run_cli("run '" + edge("zero_rows.json").string() + "' --trace t --format json", cwd.path);
    BOOST_TEST(r.code == 0, r.err);
    std::ifstream in(cwd.path / "t" / "trace.json");
    const auto trace = nlohmann::json::parse(in);
    std::map<std::string, nlohmann::json> shapes;
    for (const auto& e : trace["entries"]) shapes[e["name"]] = e["shape"];
    BOOST_TEST(shapes["Q"].dump() == "[0,2]");
    BOOST_TEST(shapes["A"].dump() == "[0,2]");
    BOOST_TEST(shapes["S"].dump() == "[0,0]");
    BOOST_TEST(shapes["C"].dump() == "[0,2]");

    const Graph g = load_graph(edge("inner_zero.json"));
    for (int threads : {1, 2}) {
        RunOptions o;
        o.threads = threads;
        const RunResult res = run(g, o);
        const Tensor& y = res.at(g, "Y");
        const Tensor& l = res.at(g, "L");
        BOOST_TEST((y.shape() == Shape{3, 2}));
        for (std::size_t i = 0; i < 6; ++i) {
            BOOST_TEST(y.at_flat(i) == 0.0);
            BOOST_TEST(l.at_flat(i) == (i % 2 ? -0.5 : 0.5));  // x·W = 0, plus b
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_malformed
