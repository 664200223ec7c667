// The inspection commands end to end through the CLI: dot (rendered by Graphviz), heatmap,
// diff, explain (against the seed document's matrices), per-value statistics in the
// manifest, and --check-finite naming the first node fed a NaN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <regex>

#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_inspect)

using namespace attngraph;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using attngraph::test::slurp;

// A seed trace in dir/name.
fs::path seed_trace(const fs::path& dir, const std::string& name = "trace") {
    const auto r = test::run_cli("run '" + test::seed_graph().string() + "' --trace '" + (dir / name).string() + "'");
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    return dir / name;
}

json manifest_of(const fs::path& dir) {
    return json::parse(slurp(dir / "manifest.json"));
}

const json* manifest_entry(const json& m, const std::string& name) {
    for (const auto& e : m["entries"])
        if (e["name"] == name) return &e;
    return nullptr;
}

// Adds `delta` to element 0 of a trace file.
void perturb(const fs::path& file, double delta) {
    Tensor t = load_npy(file);
    t.visit([&](auto& a) { a.data()[0] += static_cast<typename std::decay_t<decltype(a)>::value_type>(delta); });
    save_npy(file, t);
}

// Every "LABEL\ (shape=R\times C)= \begin{bmatrix} ... \end{bmatrix}" of a walkthrough.
std::map<std::string, std::vector<std::vector<double>>> parse_matrices(const std::string& md) {
    std::map<std::string, std::vector<std::vector<double>>> out;
    const std::regex block(R"(([^\s$]+)\\ \(shape=([0-9\\times ]+)\)= \\begin\{bmatrix\} (.*?) \\end\{bmatrix\})");
    for (auto it = std::sregex_iterator(md.begin(), md.end(), block); it != std::sregex_iterator(); ++it) {
        std::vector<std::vector<double>> rows;
        const std::string body = (*it)[3];
        std::size_t start = 0;
        while (true) {
            const auto end = body.find("\\\\", start);
            const std::string row = body.substr(start, end == std::string::npos ? std::string::npos : end - start);
            std::vector<double> values;
            std::stringstream ss(row);
            std::string cell;
            while (std::getline(ss, cell, '&')) values.push_back(std::stod(cell));
            rows.push_back(values);
            if (end == std::string::npos) break;
            start = end + 2;
        }
        out[(*it)[1]] = rows;
    }
    return out;
}

double max_diff(const std::vector<std::vector<double>>& a, const json& b) {
    if (a.size() != b.size()) return INFINITY;
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return INFINITY;
        for (std::size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::abs(a[i][j] - b[i][j].get<double>()));
    }
    return m;
}

// "\mathrm{head1.S\_raw}", written out here independently of the code under test.
std::string tex(const std::string& name) {
    std::string s;
    for (char c : name) s += c == '_' ? std::string("\\_") : std::string(1, c);
    return "\\mathrm{" + s + "}";
}

}  // namespace

// ---- dot ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dot_of_a_16_head_graph_renders_with_graphviz) {
    BOOST_REQUIRE_MESSAGE(std::system("command -v dot >/dev/null 2>&1") == 0,
                          "Graphviz 'dot' is not installed (scripts/install-deps.sh installs graphviz)");
    test::TempDir tmp;
    graphs::MhaConfig c;
    c.seq = 8;
    c.d_model = 64;
    c.heads = 16;
    c.name = "mha16";
    const Graph g = graphs::build_mha(c);
    {
        std::ofstream out(tmp.path / "mha16.json");
        out << graph_to_json(g).dump();
    }
    const auto trace = test::run_cli("run mha16.json --trace t", tmp.path);
    BOOST_REQUIRE_MESSAGE(trace.code == 0, trace.err);
    const auto r = test::run_cli("dot mha16.json --trace t -o mha16.dot", tmp.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    // another graph's trace would label these nodes with its times: refused, nothing written
    const auto other = test::run_cli("dot " + test::seed_graph().string() + " --trace t -o other.dot", tmp.path);
    BOOST_TEST(other.code == 1);
    BOOST_TEST(other.err.find("t: a trace of graph 'mha16', not of") != std::string::npos, other.err);
    BOOST_TEST(!fs::exists(tmp.path / "other.dot"));
    const std::string dot = slurp(tmp.path / "mha16.dot");
    // one cluster per head, every node labelled with name, op and shape, wall times
    for (int h = 1; h <= 16; ++h)
        BOOST_TEST(dot.find("label=\"head" + std::to_string(h) + "\"") != std::string::npos, "cluster head" << h);
    BOOST_TEST(dot.find("head16.A\\nSoftmax 8x8") == std::string::npos);  // labels are real newlines, not escapes
    BOOST_TEST(dot.find("head16.A\nSoftmax 8x8\n") != std::string::npos);
    BOOST_TEST(dot.find("head3.Q\nLinear 8x4\n") != std::string::npos);
    BOOST_TEST(std::regex_search(dot, std::regex("Y\nLinear 8x64\n[0-9.]+ (ms|µs)")));
    // rendered by Graphviz without a complaint, the head clusters left to right in order
    auto render = [&](const std::string& dot_file) {
        const fs::path svg = tmp.path / (dot_file + ".svg"), err = tmp.path / "dot.err";
        const int rendered = std::system(
            ("dot -Tsvg '" + (tmp.path / dot_file).string() + "' -o '" + svg.string() + "' 2>'" + err.string() + "'")
                .c_str());
        BOOST_TEST(rendered == 0);
        BOOST_TEST(slurp(err).empty(), slurp(err));
        return slurp(svg);
    };
    auto check_cluster_order = [](const std::string& svg) {
        std::vector<std::pair<double, int>> clusters;
        const std::regex label(R"re(<text text-anchor="middle" x="([-0-9.]+)"[^>]*>head(\d+)</text>)re");
        for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it)
            clusters.emplace_back(std::stod((*it)[1]), std::stoi((*it)[2]));
        std::sort(clusters.begin(), clusters.end());
        BOOST_REQUIRE(clusters.size() == 16u);
        for (int h = 0; h < 16; ++h) BOOST_TEST(clusters[static_cast<std::size_t>(h)].second == h + 1);
    };
    const std::string svg = render("mha16.dot");
    BOOST_TEST(svg.find("<svg") != std::string::npos);
    BOOST_TEST(svg.find("head16.O") != std::string::npos);
    check_cluster_order(svg);

    // --hide-params leaves the weights out; without a trace there are no times
    const auto bare = test::run_cli("dot mha16.json --hide-params", tmp.path);
    BOOST_TEST(bare.code == 0);
    BOOST_TEST(bare.out.find("head1.Wq") == std::string::npos);
    BOOST_TEST(bare.out.find(" ms\"") == std::string::npos);
    BOOST_TEST(bare.out.find("head1.S_raw\nMatMul 8x8\"") != std::string::npos);
    std::ofstream(tmp.path / "bare.dot") << bare.out;
    check_cluster_order(render("bare.dot"));
}

// ---- heatmap ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(heatmap_svg_shows_tokens_values_and_a_scale) {
    test::TempDir tmp;
    const fs::path trace = seed_trace(tmp.path);
    const auto r =
        test::run_cli("heatmap '" + trace.string() + "' --node head1.A -o '" + (tmp.path / "a.svg").string() + "'");
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const std::string svg = slurp(tmp.path / "a.svg");
    const std::vector<std::string> tokens = {"外送", "晚到", "補償"};
    const json& a = test::seed_values()["head1.A"];
    // one cell per element with its value on hover, checked against the seed document
    std::size_t cells = 0;
    const std::regex title("<title>row (\\S+) \\((\\d)\\), col (\\S+) \\((\\d)\\): ([-0-9.]+)</title>");
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), title); it != std::sregex_iterator(); ++it) {
        const std::size_t i = std::stoul((*it)[2]), j = std::stoul((*it)[4]);
        BOOST_TEST((*it)[1] == tokens.at(i));
        BOOST_TEST((*it)[3] == tokens.at(j));
        BOOST_TEST(std::abs(std::stod((*it)[5]) - a[i][j].get<double>()) <= 1.5e-6);
        ++cells;
    }
    BOOST_TEST(cells == 9u);
    BOOST_TEST(svg.find("<linearGradient id=\"scale\"") != std::string::npos);
    BOOST_TEST(svg.find("<g class=\"legend\">") != std::string::npos);
    for (const auto& t : tokens) BOOST_TEST(svg.find(">" + t + "</text>") != std::string::npos);

    // a value that is not in the trace, a slice that does not exist: one-line errors
    const auto missing =
        test::run_cli("heatmap '" + trace.string() + "' --node nope -o '" + (tmp.path / "b.svg").string() + "'");
    BOOST_TEST(missing.code != 0);
    BOOST_TEST(missing.err.find("no traced value 'nope'") != std::string::npos);
    BOOST_TEST(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
    BOOST_TEST(!fs::exists(tmp.path / "b.svg"));
    const auto slice = test::run_cli("heatmap '" + trace.string() + "' --node head1.A --slice 1 -o '" +
                                     (tmp.path / "c.svg").string() + "'");
    BOOST_TEST(slice.code != 0);
    BOOST_TEST(slice.err.find("slice 1 is out of range") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(heatmap_pools_large_matrices) {
    test::TempDir tmp;
    // a 600x300 matrix of row index: pooled to 3x3 blocks of 200x100 with --max-side 3
    Array<float> m = Array<float>::from_shape({600, 300});
    for (std::size_t i = 0; i < 600; ++i)
        for (std::size_t j = 0; j < 300; ++j) m(i, j) = static_cast<float>(i) - (j == 7 && i == 10 ? 1000.0f : 0.0f);
    fs::create_directories(tmp.path / "plain");
    save_npy(tmp.path / "plain" / "M.npy", Tensor(m));
    const auto r = test::run_cli("heatmap '" + (tmp.path / "plain").string() + "' --node M --max-side 3 -o -");
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const std::regex title("<title>row (\\d+) … (\\d+), col (\\d+) … (\\d+): max \\|x\\| ([-0-9.]+)</title>");
    std::vector<std::string> found;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), title); it != std::sregex_iterator(); ++it)
        found.push_back(std::string((*it)[1]) + "-" + std::string((*it)[2]) + "," + std::string((*it)[3]) + "-" +
                        std::string((*it)[4]) + ":" + std::string((*it)[5]));
    // largest magnitude per block: the block's last row, except -990 (row 10, col 7) in the first
    const std::vector<std::string> expected = {
        "0-199,0-99:-990.000000",  "0-199,100-199:199.000000",   "0-199,200-299:199.000000",
        "200-399,0-99:399.000000", "200-399,100-199:399.000000", "200-399,200-299:399.000000",
        "400-599,0-99:599.000000", "400-599,100-199:599.000000", "400-599,200-299:599.000000"};
    BOOST_TEST(found == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(heatmap_of_a_rank_3_tensor_draws_the_chosen_slice) {
    test::TempDir tmp;
    Array<double> t = Array<double>::from_shape({2, 2, 3});
    for (std::size_t s = 0; s < 2; ++s)
        for (std::size_t r = 0; r < 2; ++r)
            for (std::size_t c = 0; c < 3; ++c) t(s, r, c) = 100.0 * s + 10.0 * r + c;
    save_npy(tmp.path / "T.npy", Tensor(t));
    for (int slice : {0, 1}) {
        const auto r = test::run_cli("heatmap . --node T --slice " + std::to_string(slice) + " -o -", tmp.path);
        BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
        BOOST_TEST(r.out.find("slice " + std::to_string(slice) + " of 2") != std::string::npos);
        std::size_t cells = 0;
        const std::regex title("<title>row (\\d), col (\\d): ([-0-9.]+)</title>");
        for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), title); it != std::sregex_iterator(); ++it) {
            const double expected = 100.0 * slice + 10.0 * std::stod((*it)[1]) + std::stod((*it)[2]);
            BOOST_TEST(std::stod((*it)[3]) == expected);
            ++cells;
        }
        BOOST_TEST(cells == 6u);
    }
}

BOOST_AUTO_TEST_CASE(inspecting_a_text_trace_is_a_clear_error) {
    test::TempDir tmp;
    const auto run = test::run_cli("run '" + test::seed_graph().string() + "' --format text --trace t", tmp.path);
    BOOST_REQUIRE(run.code == 0);
    const auto r = test::run_cli("report t -o r.html", tmp.path);
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.find("the trace was written with --format text") != std::string::npos, r.err);
    BOOST_TEST(!fs::exists(tmp.path / "r.html"));
    std::ofstream(tmp.path / "t" / "manifest.json") << "{\"entries\": 3}";
    const auto bad = test::run_cli("heatmap t --node X -o x.svg", tmp.path);
    BOOST_TEST(bad.code != 0);
    BOOST_TEST(bad.err.find("manifest.json: expected an object with an \"entries\" array") != std::string::npos,
               bad.err);
}

// ---- manifest statistics -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(manifest_records_statistics_per_value) {
    test::TempDir tmp;
    const json m = manifest_of(seed_trace(tmp.path));
    std::size_t checked = 0;
    for (const auto& [name, rows] : test::seed_values().items()) {
        const json* e = manifest_entry(m, name);
        BOOST_REQUIRE_MESSAGE(e && e->contains("stats"), name);
        double lo = INFINITY, hi = -INFINITY, sum = 0;
        std::size_t count = 0;
        for (const auto& row : rows)
            for (const auto& v : row) {
                lo = std::min(lo, v.get<double>());
                hi = std::max(hi, v.get<double>());
                sum += v.get<double>();
                ++count;
            }
        const json& s = (*e)["stats"];
        BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(std::abs(s["min"].get<double>() - lo) <= 2e-6);
            BOOST_TEST(std::abs(s["max"].get<double>() - hi) <= 2e-6);
            BOOST_TEST(std::abs(s["sum"].get<double>() - sum) <= 2e-6 * static_cast<double>(count));
            BOOST_TEST(std::abs(s["mean"].get<double>() - sum / static_cast<double>(count)) <= 2e-6);
            BOOST_TEST(s["count"].get<std::size_t>() == count);
            BOOST_TEST(s["nonfinite"].get<std::size_t>() == 0u);
        }
        ++checked;
    }
    BOOST_TEST(checked == 33u);
}

// ---- diff ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(diff_names_the_first_changed_node_in_topological_order) {
    test::TempDir tmp;
    const fs::path a = seed_trace(tmp.path, "a");
    const fs::path b = tmp.path / "b";
    fs::copy(a, b, fs::copy_options::recursive);

    const auto same = test::run_cli("diff '" + a.string() + "' '" + b.string() + "'");
    BOOST_TEST(same.code == 0, same.err);
    BOOST_TEST(same.out.find("all 33 common values agree") != std::string::npos);

    // head1.A and everything downstream of it; alphabetically O_concat and Y come first
    for (const char* name : {"head1.A", "head1.O", "O_concat", "Y"}) perturb(b / (std::string(name) + ".npy"), 1e-3);
    const auto r = test::run_cli("diff '" + a.string() + "' '" + b.string() + "'");
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.find("4 of 33 values differ") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("first divergence at 'head1.A'") != std::string::npos, r.err);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    BOOST_TEST(std::regex_search(r.out, std::regex("head1\\.A +DIFFERS 1/9 +0\\.001 ")), r.out);
    BOOST_TEST(std::regex_search(r.out, std::regex("head1\\.S +ok +0 +0 +3x3")), r.out);
    BOOST_TEST(r.out.find("head1.S ") < r.out.find("head1.A "));
    BOOST_TEST(r.out.find("head1.A ") < r.out.find("O_concat "));

    // a looser tolerance accepts the change
    const auto loose = test::run_cli("diff '" + a.string() + "' '" + b.string() + "' --atol 2e-3");
    BOOST_TEST(loose.code == 0, loose.err);
}

BOOST_AUTO_TEST_CASE(diff_against_a_folder_of_npy_files) {
    test::TempDir tmp;
    const fs::path a = seed_trace(tmp.path, "a");
    const fs::path ref = tmp.path / "torch";  // as if dumped from PyTorch: some names, no manifest
    fs::create_directories(ref);
    for (const char* name : {"head2.S", "head2.A", "head1.A", "Y"})
        fs::copy_file(a / (std::string(name) + ".npy"), ref / (std::string(name) + ".npy"));
    perturb(ref / "head2.S.npy", -0.5);
    perturb(ref / "Y.npy", 0.5);
    const auto r = test::run_cli("diff '" + a.string() + "' '" + ref.string() + "' -q");
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.find("2 of 4 values differ") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("first divergence at 'head2.S'") != std::string::npos, r.err);
    BOOST_TEST(r.out.empty(), r.out);  // -q, as on every command: nothing but the error line
    // and diff --help says so (it promised a listing of the divergent values, which -q never printed)
    const auto help = test::run_cli("diff --help");
    const auto quiet_at = help.out.find("-q,--quiet");
    BOOST_TEST_REQUIRE(quiet_at != std::string::npos, help.out);
    const std::string q_line = help.out.substr(quiet_at, help.out.find('\n', quiet_at) - quiet_at);
    BOOST_TEST(q_line.find("nothing but errors") != std::string::npos, q_line);

    // a shape mismatch diverges too
    save_npy(ref / "head1.A.npy", zeros(DType::f32, {2, 3}));
    const auto s = test::run_cli("diff '" + a.string() + "' '" + ref.string() + "'");
    BOOST_TEST(s.err.find("first divergence at 'head1.A'") != std::string::npos, s.err);
    BOOST_TEST(s.out.find("3x3 vs 2x3") != std::string::npos, s.out);

    const auto bad = test::run_cli("diff '" + a.string() + "' '" + (tmp.path / "nowhere").string() + "'");
    BOOST_TEST(bad.code != 0);
    BOOST_TEST(bad.err.find("nowhere: not a directory") != std::string::npos, bad.err);
}

// ---- explain ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(explain_reproduces_every_matrix_of_the_seed_document) {
    const auto r = test::run_cli("explain '" + test::seed_graph().string() + "'");
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const auto matrices = parse_matrices(r.out);
    std::size_t checked = 0;
    for (const auto& [name, rows] : test::seed_values().items()) {
        BOOST_TEST_CONTEXT(name) {
            const auto it = matrices.find(tex(name));
            BOOST_REQUIRE(it != matrices.end());
            BOOST_TEST(max_diff(it->second, rows) <= 2e-6);
            ++checked;
        }
    }
    BOOST_TEST(checked == 33u);
    // the Linear steps the seed document prints (section 1-5-4 and 1-7-3): raw product and broadcast bias
    const json k_raw = json::parse("[[-0.707107,-0.707107],[-1.414214,-1.414214],[-2.121321,-2.121321]]");
    const json b_k = json::parse("[[2.121321,2.121321],[2.121321,2.121321],[2.121321,2.121321]]");
    BOOST_TEST(max_diff(matrices.at(tex("head2.K") + "_{\\mathrm{raw}}"), k_raw) <= 2e-6);
    BOOST_TEST(max_diff(matrices.at("B_{" + tex("head2.bk") + "}"), b_k) <= 2e-6);
    BOOST_TEST(max_diff(matrices.at(tex("Y") + "_{\\mathrm{raw}}"), test::seed_values()["O_concat"]) <= 2e-6);
    BOOST_TEST(max_diff(matrices.at("B_{" + tex("bo") + "}"), json::parse("[[0,0,0,0],[0,0,0,0],[0,0,0,0]]")) == 0);
    // formulas with shapes, in the document's notation
    BOOST_TEST(r.out.find("\\[ \\mathrm{X}\\ (shape=3\\times 4)\\cdot \\mathrm{head1.Wq}\\ (shape=4\\times 2)="
                          "\\mathrm{head1.Q}_{\\mathrm{raw}}\\ (shape=3\\times 2) \\]") != std::string::npos);
    BOOST_TEST(r.out.find("=\\frac{1}{1.414214}\\,\\mathrm{head1.S\\_raw}\\ (shape=3\\times 3)") != std::string::npos);
    BOOST_TEST(r.out.find("\\mathrm{softmax}\\left(\\mathrm{head2.S}\\ (shape=3\\times 3)\\right)") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(explain_uses_replaced_inputs) {
    test::TempDir tmp;
    Array<float> x = {{2, 0, 0, 1}, {0, 3, 1, 0}, {1, 1, 0, 5}};
    save_npy(tmp.path / "x.npy", Tensor(x));
    const auto r = test::run_cli("explain '" + test::seed_graph().string() + "' --input X=x.npy -o walk.md", tmp.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const auto m = parse_matrices(slurp(tmp.path / "walk.md"));
    // head1.Wq picks the first two columns of X; head2.Wv the last two
    BOOST_TEST(max_diff(m.at(tex("head1.Q")), json::parse("[[2,0],[0,3],[1,1]]")) == 0);
    BOOST_TEST(max_diff(m.at(tex("head2.V")), json::parse("[[0,1],[1,0],[0,5]]")) == 0);
    BOOST_TEST(max_diff(m.at(tex("X")), json::parse("[[2,0,0,1],[0,3,1,0],[1,1,0,5]]")) == 0);
}

// ---- --check-finite ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_finite_names_the_first_node_fed_a_nan_and_keeps_a_partial_trace) {
    test::TempDir tmp;
    json g = json::parse(slurp(test::seed_graph()));
    g["tensors"]["head2.Wk"]["data"][0][0] = "NaN";
    {
        std::ofstream out(tmp.path / "nan.json");
        out << g.dump();
    }
    for (int threads : {1, 2}) {
        BOOST_TEST_CONTEXT("threads " << threads) {
            const std::string dir = "t" + std::to_string(threads);
            const auto r = test::run_cli(
                "run nan.json --check-finite --threads " + std::to_string(threads) + " --trace " + dir, tmp.path);
            BOOST_TEST(r.code != 0);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
            BOOST_TEST(r.err.find("node 'head2.K' (Linear) output has") != std::string::npos, r.err);
            BOOST_TEST(r.err.find("input head2.Wk (4x2) min -1.41421 max 0 mean -0.505076") != std::string::npos,
                       r.err);
            BOOST_TEST(r.err.find("(1 non-finite: 1 NaN, 0 Inf)") != std::string::npos, r.err);
            BOOST_TEST(r.err.find("input X (3x4) min 0 max 1") != std::string::npos, r.err);
            const json m = manifest_of(tmp.path / dir);
            BOOST_TEST(m["complete"] == false);
            BOOST_TEST(m["note"].get<std::string>().find("head2.K") != std::string::npos);
            BOOST_TEST(fs::exists(tmp.path / dir / "head1.O.npy"));
            BOOST_TEST(fs::exists(tmp.path / dir / "head2.K.npy"));
            BOOST_TEST(!fs::exists(tmp.path / dir / "head2.KT.npy"));
            const json* k = manifest_entry(m, "head2.K");
            BOOST_REQUIRE(k);
            BOOST_TEST((*k)["stats"]["nonfinite"].get<int>() >= 2);
            BOOST_TEST((*k)["stats"]["nan"].get<int>() == (*k)["stats"]["nonfinite"].get<int>());
        }
    }
    // grad stops its forward pass the same way
    const auto grad = test::run_cli("grad nan.json --check-finite --trace g", tmp.path);
    BOOST_TEST(grad.code != 0);
    BOOST_TEST(std::count(grad.err.begin(), grad.err.end(), '\n') == 1, grad.err);
    BOOST_TEST(grad.err.find("node 'head2.K' (Linear) output has") != std::string::npos, grad.err);
    BOOST_TEST(manifest_of(tmp.path / "g")["complete"] == false);
    BOOST_TEST(!fs::exists(tmp.path / "g" / "head2.KT.npy"));
    // a finite forward pass whose gradient goes bad: G for Y holds a NaN, so Y's gradient is
    // the first (in backward order) to hold one
    save_npy(tmp.path / "g.npy", Tensor(Array<float>{{1, 1, 1, 1}, {1, NAN, 1, 1}, {1, 1, 1, 1}}));
    const auto bad_grad = test::run_cli(
        "grad '" + test::seed_graph().string() + "' --check-finite --output-grad g.npy --trace gt", tmp.path);
    BOOST_TEST(bad_grad.code != 0);
    BOOST_TEST(bad_grad.err.find("the gradient of node 'Y' (Linear) holds 1 non-finite values") != std::string::npos,
               bad_grad.err);
    const auto no_trace =
        test::run_cli("grad '" + test::seed_graph().string() + "' --check-finite --output-grad g.npy", tmp.path);
    BOOST_TEST(no_trace.code != 0);
    BOOST_TEST(no_trace.err.find("the gradient of tensor '") != std::string::npos,
               no_trace.err);  // only params requested
    const auto good_grad = test::run_cli("grad '" + test::seed_graph().string() + "' --check-finite", tmp.path);
    BOOST_TEST(good_grad.code == 0, good_grad.err);
    // without --check-finite the run completes (NaN flows to Y)
    const auto through = test::run_cli("run nan.json", tmp.path);
    BOOST_TEST(through.code == 0, through.err);
}

BOOST_AUTO_TEST_SUITE_END()  // test_inspect
