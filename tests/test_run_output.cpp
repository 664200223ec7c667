// What `run` prints: an output of more than 1000 values summarised as numpy prints it (edge
// items, shape, min/max/mean), every value with --full, the trace files whole either way;
// and --quiet on every command: nothing on stdout, errors still on stderr.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "engine/npy.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_run_output)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;

namespace {

std::string q(const fs::path& p) {
    std::string quoted = "'";
    quoted += p.string();
    quoted += '\'';
    return quoted;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

std::vector<std::string> words_of(const std::string& line) {
    std::vector<std::string> words;
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

std::string fixed6(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    return std::string(buf) == "-0.000000" ? "0.000000" : buf;
}

// A (40 x 32) MHA graph: its output holds 1280 values, above numpy's threshold of 1000.
fs::path big_graph(const TempDir& dir) {
    const fs::path g = dir.path / "g.json";
    const CliResult r = run_cli("new mha --seq 40 --d-model 32 --heads 2 -o " + q(g));
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    return g;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_output)

BOOST_AUTO_TEST_CASE(a_large_output_is_summarised_and_full_prints_it_all) {
    TempDir dir;
    const fs::path g = big_graph(dir);
    const CliResult full = run_cli("run " + q(g) + " --full --trace " + q(dir.path / "t"));
    BOOST_TEST_REQUIRE(full.code == 0, full.err);
    const CliResult summary = run_cli("run " + q(g));
    BOOST_TEST_REQUIRE(summary.code == 0, summary.err);

    // --full: a header line, then 40 rows of 32 numbers
    const auto full_lines = lines_of(full.out);
    std::vector<std::vector<std::string>> rows;
    for (const auto& line : full_lines)
        if (words_of(line).size() == 32) rows.push_back(words_of(line));
    BOOST_TEST_REQUIRE(rows.size() == 40u);

    // min/max/mean of the traced output, computed here from its .npy file
    const std::string out_name = full_lines.front().substr(0, full_lines.front().find(' '));
    const Tensor y = load_npy(dir.path / "t" / (out_name + ".npy"));
    BOOST_TEST_REQUIRE(y.size() == 1280u);
    double lo = 1e300, hi = -1e300, sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
        lo = std::min(lo, y.at_flat(i));
        hi = std::max(hi, y.at_flat(i));
        sum += y.at_flat(i);
    }
    const std::string stats =
        "shape (40x32), 1280 values: min " + fixed6(lo) + ", max " + fixed6(hi) + ", mean " + fixed6(sum / 1280.0);
    BOOST_TEST(summary.out.find(stats) != std::string::npos, summary.out);
    BOOST_TEST(full.out.find("1280 values") == std::string::npos);

    // the summary: header, stats, 3 rows, "...", 3 rows; each row the 3 first, "...", 3 last
    const auto s_lines = lines_of(summary.out);
    BOOST_TEST_REQUIRE(s_lines.size() == 9u, summary.out);
    BOOST_TEST(s_lines[0] == full_lines[0]);
    BOOST_TEST(words_of(s_lines[5]) == std::vector<std::string>{"..."}, boost::test_tools::per_element());
    const std::size_t shown[] = {0, 1, 2, 37, 38, 39};
    const std::size_t at[] = {2, 3, 4, 6, 7, 8};
    for (int i = 0; i < 6; ++i) {
        const auto w = words_of(s_lines[at[i]]);
        const auto& row = rows[shown[i]];
        const std::vector<std::string> want = {row[0], row[1], row[2], "...", row[29], row[30], row[31]};
        BOOST_TEST(w == want, boost::test_tools::per_element());
    }

    // the trace file keeps every value
    const CliResult text = run_cli("run " + q(g) + " --trace " + q(dir.path / "tt") + " --format text");
    BOOST_TEST_REQUIRE(text.code == 0, text.err);
    const std::string trace = slurp(dir.path / "tt" / "trace.txt");
    BOOST_TEST(trace.find("...") == std::string::npos);
    BOOST_TEST(trace.find(rows[20][16]) != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_small_output_prints_whole) {
    const CliResult r = run_cli("run " + q(seed_graph()));
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST(r.out.find("values: min") == std::string::npos);
    BOOST_TEST(r.out.find("...") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(quiet_prints_nothing_but_errors_on_every_command) {
    TempDir dir;
    const fs::path g = big_graph(dir);
    BOOST_TEST_REQUIRE(run_cli("run " + q(g) + " --trace " + q(dir.path / "a")).code == 0);
    BOOST_TEST_REQUIRE(run_cli("run " + q(g) + " --trace " + q(dir.path / "b")).code == 0);
    const std::string seed = q(seed_graph());
    const std::vector<std::string> commands = {
        "run " + seed + " --quiet",
        "--quiet run " + seed,
        "run -q " + seed + " --trace " + q(dir.path / "c"),
        "check " + seed + " --quiet",
        "new mha --seq 4 --d-model 4 --heads 2 -o " + q(dir.path / "n.json") + " --quiet",
        "new --list --quiet",
        "grad " + seed + " --quiet",
        "dot " + seed + " --quiet",
        "explain " + seed + " --quiet",
        "diff " + q(dir.path / "a") + " " + q(dir.path / "b") + " --quiet",
        "report " + q(dir.path / "a") + " -o " + q(dir.path / "r.html") + " --quiet",
        "bench --gemm 8 --reps 1 --quiet",
        "bench --variant seed --reps 1 --quiet",
    };
    for (const auto& c : commands) {
        const CliResult r = run_cli(c);
        BOOST_TEST(r.code == 0, c << ": " << r.err);
        BOOST_TEST(r.out.empty(), c << " printed: " << r.out.substr(0, 200));
        BOOST_TEST(r.err.empty(), c << " printed on stderr: " << r.err.substr(0, 200));
    }
    BOOST_TEST(fs::exists(dir.path / "c" / "manifest.json"));  // quiet still writes its files
    BOOST_TEST(fs::exists(dir.path / "r.html"));
    // an error still says so, on stderr only
    const CliResult bad = run_cli("run " + q(dir.path / "missing.json") + " --quiet");
    BOOST_TEST(bad.code != 0);
    BOOST_TEST(bad.out.empty());
    BOOST_TEST(bad.err.rfind("error: ", 0) == 0, bad.err);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_run_output
