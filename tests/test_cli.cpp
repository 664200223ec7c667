// The attngraph program: `run --trace` writes the seed's 33 matrices (as .npy, text, JSON),
// thread counts give byte-identical files, --only, --input, --force, `check`, `--help`, and
// every bad input of issue 2 points 3 and 8: one line "error: ..." on stderr, a non-zero
// exit, and no trace directory (nor a hidden temporary one) left behind.
#include <fstream>
#include <regex>
#include <set>

#include <boost/test/unit_test.hpp>

#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_cli)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// built with += : GCC 12 warns (-Wrestrict, a false positive) on "literal" + std::string
std::string q(const fs::path& p) {
    std::string quoted = "'";
    quoted += p.string();
    quoted += '\'';
    return quoted;
}

using attngraph::test::slurp;

std::set<std::string> listing(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
}

std::set<std::string> seed_names() {
    std::set<std::string> names;
    for (const auto& [name, rows] : seed_values().items()) names.insert(name);
    return names;
}

json seed_doc() {
    return json::parse(slurp(seed_graph()));
}

void write_text(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

// A .npy file written by hand: header dict as given, then `data` bytes.
void write_raw_npy(const fs::path& p, const std::string& dict, const std::string& data) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += '\x01';
    bytes += '\x00';
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    write_text(p, bytes + header + data);
}

std::string f8_bytes(const std::vector<double>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

// Expects a failure: non-zero exit, exactly one stderr line "error: ..." holding `parts`,
// nothing new in `dir` (no trace directory, no hidden temporary ones).
void expect_failure(const std::string& args, const std::vector<std::string>& parts, const fs::path& dir) {
    BOOST_TEST_CONTEXT("attngraph " << args) {
        const auto before = listing(dir);
        const CliResult r = run_cli(args, dir);
        BOOST_TEST_MESSAGE("  " << r.err.substr(0, r.err.size() ? r.err.size() - 1 : 0));
        BOOST_TEST(r.code != 0);
        BOOST_TEST(r.err.rfind("error: ", 0) == 0u, "stderr: " << r.err);
        BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, "stderr is not one line: " << r.err);
        BOOST_TEST((r.err.empty() || r.err.back() == '\n'));
        for (const auto& p : parts)
            BOOST_TEST(r.err.find(p) != std::string::npos, "'" << p << "' missing in: " << r.err);
        BOOST_TEST((listing(dir) == before), "the failed run left files in " << dir);
        BOOST_TEST(r.out.find("trace written") == std::string::npos);
    }
}

// A graph file in `dir` holding `doc`.
fs::path graph_file(const fs::path& dir, const std::string& name, const json& doc) {
    const fs::path p = dir / name;
    write_text(p, doc.dump(1));
    return p;
}

// The first python3 with numpy: the system one (Debian's python3-numpy), or the one on PATH.
std::string python_with_numpy() {
    for (const std::string py : {"/usr/bin/python3", "python3"}) {
        const std::string cmd = py + " -c 'import numpy' >/dev/null 2>&1";
        if (std::system(cmd.c_str()) == 0) return py;
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cli)

BOOST_AUTO_TEST_CASE(trace_npy_holds_the_seed) {
    for (const std::string dtype : {"", "f64"}) {
        BOOST_TEST_CONTEXT("dtype " << (dtype.empty() ? "of the file" : dtype)) {
            TempDir tmp;
            const fs::path dir = tmp.path / "t";
            const CliResult r =
                run_cli("run " + q(seed_graph()) + " --trace " + q(dir) + (dtype.empty() ? "" : " --dtype " + dtype));
            BOOST_TEST_REQUIRE(r.code == 0, r.err);
            BOOST_TEST(r.err.empty(), r.err);
            // stdout shows Y with token labels
            BOOST_TEST(r.out.find("Y (3x4)") != std::string::npos, r.out);
            BOOST_TEST(r.out.find("補償    0.334759  0.909969  0.244728  0.665241") != std::string::npos, r.out);
            // manifest.json + one .npy per name, nothing else
            std::set<std::string> want = {"manifest.json"};
            for (const auto& n : seed_names()) want.insert(n + ".npy");
            BOOST_TEST((listing(dir) == want));
            BOOST_TEST((listing(tmp.path) == std::set<std::string>{"t"}));  // no temporaries beside it
            const json manifest = json::parse(slurp(dir / "manifest.json"));
            BOOST_TEST(manifest["graph"] == "seed_mha");
            BOOST_TEST(manifest["format"] == "npy");
            BOOST_TEST(manifest["complete"] == true);
            BOOST_TEST(manifest["dtype"] == (dtype.empty() ? "f32" : "f64"));
            BOOST_TEST(manifest["tokens"] == json({"外送", "晚到", "補償"}));
            BOOST_TEST_REQUIRE(manifest["entries"].size() == 33u);
            std::set<std::string> names;
            for (const auto& e : manifest["entries"]) {
                const std::string name = e["name"];
                names.insert(name);
                BOOST_TEST(e["file"] == name + ".npy");
                const Tensor t = load_npy(dir / (name + ".npy"));
                BOOST_TEST_CONTEXT(name) {
                    BOOST_TEST(to_string(t.dtype()) == (dtype.empty() ? "f32" : "f64"));
                    BOOST_TEST(e["shape"] == json(t.shape()));
                    BOOST_TEST(max_abs_diff(t, seed_values()[name]) <= (dtype.empty() ? 2e-6 : 1e-6));
                }
            }
            BOOST_TEST((names == seed_names()));
            // node records carry op, inputs and formula; tensors their kind
            for (const auto& e : manifest["entries"]) {
                if (e["name"] == "head1.S_raw") {
                    BOOST_TEST(e["op"] == "MatMul");
                    BOOST_TEST(e["inputs"] == json({"head1.Q", "head1.KT"}));
                    BOOST_TEST(e["formula"] == "head1.Q (3x2) · head1.KT (2x3)");
                    BOOST_TEST(e["seconds"].is_number());  // 0 here: computed inside the fused attention step
                }
                if (e["name"] == "Y") BOOST_TEST(e["seconds"].get<double>() > 0);  // a step of its own: timed
                if (e["name"] == "head2.Wv") BOOST_TEST(e["kind"] == "param");
                if (e["name"] == "X") BOOST_TEST(e["kind"] == "input");
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(npy_files_are_readable_by_numpy) {
    const std::string py = python_with_numpy();
    BOOST_TEST_REQUIRE(!py.empty(), "no python3 with numpy: scripts/install-deps.sh installs python3-numpy");
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    for (const std::string dtype : {"f32", "f64"}) {
        BOOST_TEST_REQUIRE(
            run_cli("run " + q(seed_graph()) + " --force --dtype " + dtype + " --trace " + q(dir)).code == 0);
        for (const std::string name : {"X", "head1.A", "head2.KT", "O_concat", "Y", "head2.bk"}) {
            const fs::path out = tmp.path / "numpy.out";
            const std::string cmd =
                py +
                " -c 'import sys, numpy as np; a = np.load(sys.argv[1]); "
                "print(a.dtype, a.shape, a.flags.c_contiguous, \" \".join(\"%.9f\" % v for v in a.ravel()))' " +
                q(dir / (name + ".npy")) + " >" + q(out);
            BOOST_TEST_CONTEXT(dtype << " " << name) {
                BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0);
                std::istringstream in(slurp(out));
                std::string np_dtype, shape_text, contiguous;
                in >> np_dtype;
                std::getline(in, shape_text, ')');
                in >> contiguous;
                BOOST_TEST(np_dtype == (dtype == "f32" ? "float32" : "float64"));
                BOOST_TEST(contiguous == "True");
                const json& rows = seed_values()[name];
                const std::string want_shape =
                    " (" + std::to_string(rows.size()) + ", " + std::to_string(rows[0].size());
                BOOST_TEST(shape_text == want_shape);
                for (const auto& row : rows)
                    for (const auto& v : row) {
                        double got = 0;
                        in >> got;
                        BOOST_TEST(std::abs(got - v.get<double>()) <= 2e-6);
                    }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(thread_counts_give_byte_identical_files) {
    TempDir tmp;
    // the seed, and a graph large enough for the parallel path
    graphs::MhaConfig c;
    c.seq = 256;
    c.d_model = 64;
    c.heads = 4;
    c.seed = 9;
    const fs::path big = graph_file(tmp.path, "big.json", graph_to_json(graphs::build_mha(c)));
    for (const fs::path& graph : {seed_graph(), big}) {
        BOOST_TEST_CONTEXT(graph.filename()) {
            std::map<int, fs::path> dirs;
            for (int threads : {1, 4}) {
                dirs[threads] = tmp.path / ("t" + std::to_string(threads));
                const CliResult r = run_cli("run " + q(graph) + " --force --threads " + std::to_string(threads) +
                                            " --trace " + q(dirs[threads]));
                BOOST_TEST_REQUIRE(r.code == 0, r.err);
                BOOST_TEST(r.err.empty(), r.err);
            }
            BOOST_TEST((listing(dirs[1]) == listing(dirs[4])));
            std::size_t compared = 0;
            for (const auto& name : listing(dirs[1])) {
                if (name == "manifest.json") continue;  // holds wall times
                BOOST_TEST((slurp(dirs[1] / name) == slurp(dirs[4] / name)), name << " differs");
                ++compared;
            }
            BOOST_TEST(compared >= 33u);
            auto without_times = [](json m) {
                for (auto& e : m["entries"]) e.erase("seconds");
                return m;
            };
            BOOST_TEST(without_times(json::parse(slurp(dirs[1] / "manifest.json"))) ==
                       without_times(json::parse(slurp(dirs[4] / "manifest.json"))));
        }
    }
}

BOOST_AUTO_TEST_CASE(trace_as_text) {
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    const CliResult r = run_cli("run " + q(seed_graph()) + " --format text --trace " + q(dir));
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST((listing(dir) == std::set<std::string>{"manifest.json", "trace.txt"}));
    const std::string text = slurp(dir / "trace.txt");
    for (const std::string part : {
             "# trace of graph 'seed_mha' (f32), tokens: 外送 晚到 補償\n",
             "\nhead1.S_raw (3x3) = head1.Q (3x2) · head1.KT (2x3)    [MatMul, ",
             "\nhead1.S (3x3) = 0.707107 × head1.S_raw (3x3)    [Scale, ",
             "\nhead1.A (3x3) = softmax(head1.S (3x3))    [Softmax, ",
             "\nhead1.KT (2x3) = head1.K (3x2)ᵀ    [Transpose, ",
             "\nO_concat (3x4) = concat(head1.O (3x2), head2.O (3x2))    [Concat, ",
             "\nY (3x4) = O_concat (3x4) · Wo (4x4) + bo (1x4)    [Linear, ",
             "\nX (3x4) = input\n外送    1.000000  0.000000  0.000000  1.000000\n",
             "\nhead2.bk (1x2) = param\n  2.121321  2.121321\n",
             // head1.A: token labels on both axes, 6 decimals
             "\n            外送      晚到      補償\n"
             "外送    0.186324  0.506480  0.307196\n"
             "晚到    0.186324  0.506480  0.307196\n"
             "補償    0.090031  0.665241  0.244728\n",
         })
        BOOST_TEST(text.find(part) != std::string::npos, "missing in trace.txt: " << part);
    // every one of the 33 names has its block
    for (const auto& n : seed_names()) BOOST_TEST(text.find("\n" + n + " (") != std::string::npos, n);
    const json manifest = json::parse(slurp(dir / "manifest.json"));
    BOOST_TEST(manifest["format"] == "text");
    BOOST_TEST(manifest["entries"].size() == 33u);
    BOOST_TEST(!manifest["entries"][0].contains("file"));
}

BOOST_AUTO_TEST_CASE(tokens_that_label_no_axis_are_refused) {
    // the seed's sequence is 3 (X 3x4): 5 tokens label nothing, an error before the run
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    const CliResult r = run_cli("run " + q(seed_graph()) + " --tokens a,b,c,d,e --trace " + q(dir));
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.find("--tokens: 5 tokens, but no value of graph 'seed_mha' has a row or column axis of 5; "
                          "its inputs: X (3x4)") != std::string::npos,
               r.err);
    BOOST_TEST(!fs::exists(dir));
    const CliResult ok = run_cli("run " + q(seed_graph()) + " --tokens a,b,c --format text --trace " + q(dir));
    BOOST_TEST_REQUIRE(ok.code == 0, ok.err);
    BOOST_TEST(slurp(dir / "trace.txt").find("tokens: a b c\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(trace_as_json) {
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    const CliResult r = run_cli("run " + q(seed_graph()) + " --format json --trace " + q(dir) + " --dtype f64");
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST((listing(dir) == std::set<std::string>{"manifest.json", "trace.json"}));
    const json trace = json::parse(slurp(dir / "trace.json"));
    BOOST_TEST(trace["graph"] == "seed_mha");
    BOOST_TEST(trace["dtype"] == "f64");
    BOOST_TEST(trace["complete"] == true);
    BOOST_TEST_REQUIRE(trace["entries"].size() == 33u);
    std::set<std::string> names;
    for (const auto& e : trace["entries"]) {
        const std::string name = e["name"];
        names.insert(name);
        BOOST_TEST_CONTEXT(name) {
            const auto& want = seed_values()[name];
            BOOST_TEST_REQUIRE(e["data"].size() == want.size());
            BOOST_TEST(e["shape"] == json({want.size(), want[0].size()}));
            for (std::size_t i = 0; i < want.size(); ++i)
                for (std::size_t j = 0; j < want[0].size(); ++j)
                    BOOST_TEST(std::abs(e["data"][i][j].get<double>() - want[i][j].get<double>()) <= 1e-6);
        }
        if (name == "head2.O") {
            BOOST_TEST(e["op"] == "MatMul");
            BOOST_TEST(e["formula"] == "head2.A (3x3) · head2.V (3x2)");
        }
    }
    BOOST_TEST((names == seed_names()));
}

BOOST_AUTO_TEST_CASE(only_globs) {
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    BOOST_TEST_REQUIRE(run_cli("run " + q(seed_graph()) + " --only 'head1.*,Y' --trace " + q(dir)).code == 0);
    std::set<std::string> want = {"manifest.json"};
    for (const auto& n : seed_names())
        if (n.rfind("head1.", 0) == 0 || n == "Y") want.insert(n + ".npy");
    BOOST_TEST(want.size() == 1u + 14u + 1u);
    BOOST_TEST((listing(dir) == want));
    BOOST_TEST(json::parse(slurp(dir / "manifest.json"))["entries"].size() == 15u);
    // repeated --only, character classes, text format
    const fs::path dir2 = tmp.path / "t2";
    const CliResult r =
        run_cli("run " + q(seed_graph()) + " --only 'head[2].A' --only X --format text --trace " + q(dir2));
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const std::string text = slurp(dir2 / "trace.txt");
    BOOST_TEST(text.find("\nhead2.A (3x3)") != std::string::npos);
    BOOST_TEST(text.find("\nX (3x4)") != std::string::npos);
    BOOST_TEST(text.find("head1.A (3x3)") == std::string::npos);
    BOOST_TEST(text.find("\nY (3x4)") == std::string::npos);
    BOOST_TEST(r.out.find("Y (3x4)") != std::string::npos);  // the output is still printed
}

BOOST_AUTO_TEST_CASE(input_with_another_sequence_length) {
    TempDir tmp;
    Array<float> x = Array<float>::from_shape({5, 4});
    const std::vector<float> v = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0.5f, -1, 2, 0, 0, 0, 1, 1};
    std::copy(v.begin(), v.end(), x.begin());
    save_npy(tmp.path / "x5.npy", Tensor(x));
    const fs::path dir = tmp.path / "t";
    const CliResult r = run_cli("run " + q(seed_graph()) + " --input X=x5.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST(r.out.find("Y (5x4)") != std::string::npos, r.out);
    BOOST_TEST((load_npy(dir / "head1.A.npy").shape() == Shape{5, 5}));
    BOOST_TEST((load_npy(dir / "X.npy") == Tensor(x)));
    // row 5 is [0,0,1,1]: head1.Q's row is 0, so head1.A's last row is uniform
    const Tensor a = load_npy(dir / "head1.A.npy");
    for (std::size_t j = 0; j < 5; ++j) BOOST_TEST(std::abs(a.at_flat(20 + j) - 0.2) < 1e-7);
    // the same as the library's with_tensors
    const Graph g = load_graph(seed_graph()).with_tensors({{"X", Tensor(x)}});
    RunOptions o;
    o.keep_all = true;
    const RunResult lib = run(g, o);
    for (const auto& n : seed_names()) BOOST_TEST((load_npy(dir / (n + ".npy")) == lib.at(g, n)), n);
    // an f64 file for an f32 graph is converted
    save_npy(tmp.path / "x5d.npy", Tensor(x).cast(DType::f64));
    const CliResult r64 = run_cli("run " + q(seed_graph()) + " --input X=x5d.npy", tmp.path);
    BOOST_TEST(r64.code == 0, r64.err);
    BOOST_TEST(r64.out == r.out.substr(0, r.out.find("trace written")));
}

BOOST_AUTO_TEST_CASE(force_replaces_a_trace_and_an_empty_dir_is_fine) {
    TempDir tmp;
    const fs::path dir = tmp.path / "t";
    fs::create_directories(dir);
    BOOST_TEST_REQUIRE(run_cli("run " + q(seed_graph()) + " --trace t", tmp.path).code == 0);  // empty: allowed
    write_text(dir / "old.txt", "old");
    BOOST_TEST(run_cli("run " + q(seed_graph()) + " --trace t --format text", tmp.path).code != 0);
    BOOST_TEST(fs::exists(dir / "old.txt"));  // untouched
    BOOST_TEST(fs::exists(dir / "Y.npy"));
    const CliResult r = run_cli("run " + q(seed_graph()) + " --trace t --format text --force", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST((listing(dir) == std::set<std::string>{"manifest.json", "trace.txt"}));
    BOOST_TEST((listing(tmp.path) == std::set<std::string>{"t"}));  // no .old- or .tmp- left
    // "t/" names t too
    BOOST_TEST_REQUIRE(run_cli("run " + q(seed_graph()) + " --trace t/ --force", tmp.path).code == 0);
    BOOST_TEST(fs::exists(dir / "Y.npy"));
    const CliResult fresh = run_cli("run " + q(seed_graph()) + " --trace fresh/", tmp.path);
    BOOST_TEST_REQUIRE(fresh.code == 0, fresh.err);
    BOOST_TEST(fs::exists(tmp.path / "fresh" / "Y.npy"));
    BOOST_TEST((listing(tmp.path) == std::set<std::string>{"fresh", "t"}));
}

BOOST_AUTO_TEST_CASE(check_prints_the_node_table) {
    const CliResult r = run_cli("check " + q(seed_graph()));
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST(r.out.find("graph 'seed_mha': f32, 18 nodes, ok") != std::string::npos, r.out);
    std::istringstream lines(r.out);
    std::map<std::string, std::vector<std::string>> rows;  // name -> the other columns
    for (std::string line; std::getline(lines, line);) {
        std::istringstream cols(line);
        std::string name, col;
        cols >> name;
        while (cols >> col) rows[name].push_back(col);
    }
    for (const auto& n : seed_names()) {
        BOOST_TEST_CONTEXT(n) {
            BOOST_TEST_REQUIRE(rows.count(n) == 1u);
            const auto& want = seed_values()[n];
            BOOST_TEST(rows[n].at(1) == std::to_string(want.size()) + "x" + std::to_string(want[0].size()));
        }
    }
    BOOST_TEST(rows["head1.S_raw"].at(0) == "MatMul");
    BOOST_TEST(rows["head1.S_raw"].at(2) == "head1.Q,");
    BOOST_TEST(rows["head1.S_raw"].at(3) == "head1.KT");
    BOOST_TEST(rows["head1.Wq"].at(0) == "param");
    BOOST_TEST(rows["X"].at(0) == "input");
    BOOST_TEST(r.out.find("outputs: Y") != std::string::npos);
    // --input changes the shapes check shows
    TempDir tmp;
    save_npy(tmp.path / "x5.npy", Tensor(Array<float>::from_shape({5, 4})));
    const CliResult r5 = run_cli("check " + q(seed_graph()) + " --input X=x5.npy", tmp.path);
    BOOST_TEST_REQUIRE(r5.code == 0, r5.err);
    BOOST_TEST(r5.out.find("head1.S_raw          MatMul     5x5") != std::string::npos, r5.out);
}

BOOST_AUTO_TEST_CASE(help_lists_the_commands) {
    const CliResult r = run_cli("--help");
    BOOST_TEST(r.code == 0);
    const auto listed = r.out.find("Subcommands:");
    BOOST_TEST_REQUIRE(listed != std::string::npos, r.out);
    // every subcommand registered in cli/cmd_<name>.cpp is listed
    const std::regex registered(R"re(add_subcommand\(\s*"([A-Za-z0-9_-]+)")re");
    std::set<std::string> commands;
    for (const auto& f : fs::directory_iterator(source_dir() / "cli")) {
        if (f.path().filename().string().rfind("cmd_", 0) != 0) continue;
        const std::string code = slurp(f.path());
        for (std::sregex_iterator m(code.begin(), code.end(), registered), end; m != end; ++m) commands.insert((*m)[1]);
    }
    BOOST_TEST(commands.count("run") == 1u);
    BOOST_TEST(commands.count("check") == 1u);
    for (const auto& c : commands)
        BOOST_TEST(std::regex_search(r.out.substr(listed), std::regex("\n  " + c + " ")), c << " missing in --help");
    const CliResult run_help = run_cli("run --help");
    BOOST_TEST(run_help.code == 0);
    for (const std::string part : {"--input", "--trace", "--format", "--only", "--threads", "--dtype", "--force"})
        BOOST_TEST(run_help.out.find(part) != std::string::npos, part);
    const CliResult check_help = run_cli("check --help");
    BOOST_TEST(check_help.code == 0);
    BOOST_TEST(check_help.out.find("graph TEXT REQUIRED") != std::string::npos);
}

// Flag values that would do nothing or compare nothing are usage errors (exit 2): an empty
// --trace wrote no trace and said so nowhere; diff --atol NaN compared nothing and said DIFFERS;
// an --input that is not NAME=FILE.
BOOST_AUTO_TEST_CASE(empty_and_nan_flag_values_are_usage_errors) {
    TempDir tmp;
    const std::string seed = q(seed_graph());
    BOOST_TEST_REQUIRE(run_cli("run " + seed + " --trace t -q", tmp.path).code == 0);
    for (const std::string& args : {"run " + seed + " --trace ''", "grad " + seed + " --trace ''",
                                   "dot " + seed + " --trace ''", std::string("diff t t --atol NaN"),
                                   std::string("diff t t --rtol inf"), std::string("diff t t --atol -1"),
                                   "run " + seed + " --input X", "run " + seed + " --input =x.npy",
                                   "bench --graph " + seed + " --input X="})
        BOOST_TEST_CONTEXT(args) {
            const CliResult r = run_cli(args, tmp.path);
            BOOST_TEST(r.code == 2, r.err);
            BOOST_TEST(r.err.rfind("error: --", 0) == 0u, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
        }
    const CliResult same = run_cli("diff t t --atol 0 --rtol 0", tmp.path);
    BOOST_TEST(same.code == 0, same.err);
    BOOST_TEST(same.out.find("agree within rtol 0, atol 0") != std::string::npos, same.out);
}

BOOST_AUTO_TEST_CASE(bad_inputs) {
    TempDir tmp;
    const fs::path& d = tmp.path;
    const std::string seed = q(seed_graph());
    const std::string trace = " --trace t";

    // graph files: malformed JSON, unknown op, cycle, shape mismatch, duplicate tensor
    write_text(d / "trunc.json", slurp(seed_graph()).substr(0, 400));
    expect_failure("run trunc.json" + trace, {"trunc.json", "malformed JSON"}, d);
    json doc = seed_doc();
    doc["nodes"][5]["op"] = "Scal";
    graph_file(d, "unknown_op.json", doc);
    expect_failure("run unknown_op.json" + trace, {"unknown_op.json", "head1.S", "unknown op 'Scal'"}, d);
    doc = seed_doc();
    doc["nodes"][3]["inputs"] = {"head1.O"};
    graph_file(d, "cycle.json", doc);
    expect_failure("run cycle.json" + trace, {"cycle.json", "cycle", "head1.KT (Transpose)"}, d);
    doc = seed_doc();
    doc["nodes"][4]["inputs"] = {"head1.Q", "head1.K"};
    graph_file(d, "shape.json", doc);
    expect_failure("run shape.json" + trace, {"shape.json", "head1.S_raw", "MatMul", "head1.Q (3x2)", "head1.K (3x2)"},
                   d);
    expect_failure("check shape.json", {"shape.json", "head1.S_raw", "MatMul"}, d);
    doc = seed_doc();
    doc["nodes"][5]["attrs"]["factr"] = 1;
    graph_file(d, "attr.json", doc);
    expect_failure("run attr.json" + trace, {"attr.json", "node 'head1.S' (Scale)", "factr"}, d);
    expect_failure("run no_such.json" + trace, {"no_such.json"}, d);

    // npy files named by the graph: missing, truncated, complex, header lying
    write_raw_npy(d / "complex.npy", "{'descr': '<c16', 'fortran_order': False, 'shape': (4, 4), }",
                  std::string(256, '\0'));
    write_raw_npy(d / "lying.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 4), }",
                  f8_bytes(std::vector<double>(8, 1.0)));
    write_raw_npy(d / "good.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 4), }",
                  f8_bytes(std::vector<double>(16, 1.0)));
    write_text(d / "trunc.npy", slurp(d / "good.npy").substr(0, 100));
    write_text(d / "header_only.npy", slurp(d / "good.npy").substr(0, 30));
    write_text(d / "not.npy", "just text");
    for (const auto& [file, why] :
         std::vector<std::pair<std::string, std::string>>{{"missing.npy", "missing.npy"},
                                                          {"trunc.npy", "trunc.npy"},
                                                          {"header_only.npy", "header_only.npy"},
                                                          {"complex.npy", "<c16"},
                                                          {"lying.npy", "4x4"},
                                                          {"not.npy", "not.npy"}}) {
        doc = seed_doc();
        doc["tensors"]["Wo"] = {{"kind", "param"}, {"npy", file}};
        graph_file(d, "npy_" + file + ".json", doc);
        expect_failure("run npy_" + file + ".json" + trace, {"npy_" + file + ".json", "tensor 'Wo'", why}, d);
        // the same file given with --input
        expect_failure("run " + seed + " --input Wo=" + file + trace, {"--input Wo=" + file, why}, d);
    }
    doc = seed_doc();
    doc["tensors"]["Wo"] = {{"kind", "param"}, {"npy", "good.npy"}};
    graph_file(d, "npy_good.json", doc);
    BOOST_TEST(run_cli("run npy_good.json", d).code == 0);  // the control: a good file works

    // --input: bad spec, unknown name, a node, incompatible shape
    for (const std::string spec : {"X", "=good.npy", "X=", "X:good.npy"})
        expect_failure("run " + seed + " --input '" + spec + "'" + trace, {"--input", "NAME=FILE.npy"}, d);
    expect_failure("run " + seed + " --input Q=good.npy" + trace, {"--input", "'Q'", "seed_mha"}, d);
    expect_failure("run " + seed + " --input head1.A=good.npy" + trace, {"head1.A", "node"}, d);
    write_raw_npy(d / "x53.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (5, 3), }",
                  f8_bytes(std::vector<double>(15, 0.5)));
    expect_failure("run " + seed + " --input X=x53.npy" + trace,
                   {"node 'head1.Q' (Linear)", "X (5x3)", "head1.Wq (4x2)"}, d);
    expect_failure("check " + seed + " --input X=x53.npy", {"node 'head1.Q' (Linear)", "X (5x3)"}, d);

    // a non-empty trace directory without --force
    fs::create_directories(d / "full");
    write_text(d / "full" / "keep.txt", "mine");
    expect_failure("run " + seed + " --trace full", {"full", "not empty", "--force"}, d);
    BOOST_TEST((listing(d / "full") == std::set<std::string>{"keep.txt"}));
    // never the current directory, even with --force
    expect_failure("run " + seed + " --trace . --force", {"current directory"}, d);
    fs::create_directories(d / "sub");
    expect_failure("run " + seed + " --trace .. --force", {"current directory"}, d / "sub");
    write_text(d / "afile", "x");
    expect_failure("run " + seed + " --trace afile", {"afile", "not a directory"}, d);

    // options
    for (const std::string opt : {"--threads -1", "--threads abc", "--threads 1.5", "--format xml", "--dtype f16",
                                  "--format", "--bogus", "--max-memory 12Q"})
        expect_failure("run " + seed + " " + opt + trace, {}, d);
    expect_failure("", {}, d);                    // no subcommand
    expect_failure("frobnicate", {}, d);          // unknown subcommand
    expect_failure("run" + trace, {"graph"}, d);  // no graph
    expect_failure("check " + seed + " --trace t", {}, d);

    // a name with a newline still gives one line
    doc = seed_doc();
    doc["nodes"][17]["name"] = "Y\nZ";
    graph_file(d, "newline.json", doc);
    expect_failure("run newline.json" + trace, {"newline.json", "'Y\\nZ'"}, d);

    // a node that overflows, with --check-finite: an error naming the node
    doc = seed_doc();
    doc["nodes"][5]["attrs"]["factor"] = 1e300;
    graph_file(d, "overflow.json", doc);
    expect_failure("run overflow.json --dtype f32 --check-finite",
                   {"overflow.json", "node 'head1.S' (Scale)", "non-finite"}, d);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_cli
