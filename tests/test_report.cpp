// The HTML report driven in headless Chromium: the page selects and clicks nodes from its
// URL hash, and the DOM it ends with must show the node's name, shape, token labels,
// values, stats, gradient and the heads' attention rows — checked against the seed
// document's numbers. Fails when no chromium is installed (scripts/install-deps.sh installs it).
#include <boost/test/unit_test.hpp>

#include <regex>

#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_report)

using namespace attngraph;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using attngraph::test::slurp;

std::string chromium() {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
        if (std::system(("command -v " + std::string(name) + " >/dev/null 2>&1").c_str()) == 0) return name;
    return {};
}

// The DOM after the page has loaded with `hash`.
std::string dump_dom(const fs::path& html, const std::string& hash) {
    BOOST_TEST_REQUIRE(!chromium().empty(), "no chromium installed (scripts/install-deps.sh installs it)");
    test::TempDir profile;
    const fs::path out = profile.path / "dom.html", err = profile.path / "err.txt";
    const std::string cmd = "timeout 120 " + chromium() +
                            " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                            " --disable-background-networking --disable-component-update --disable-sync"
                            " --user-data-dir='" +
                            (profile.path / "profile").string() + "' --dump-dom 'file://" +
                            fs::absolute(html).string() + "#" + hash + "' >'" + out.string() + "' 2>'" + err.string() +
                            "'";
    const int status = std::system(cmd.c_str());
    BOOST_TEST_REQUIRE(status == 0, "chromium failed: " << slurp(err));
    return slurp(out);
}

// The inner HTML of the element with this id (up to the end of the next element of the same tag).
std::string element(const std::string& dom, const std::string& id) {
    const std::regex open("<(\\w+)[^>]* id=\"" + id + "\"[^>]*>");
    std::smatch m;
    if (!std::regex_search(dom, m, open)) return {};
    const std::string tag = m[1];
    const std::size_t start = static_cast<std::size_t>(m.position(0) + m.length(0));
    // nesting of the same tag
    std::size_t depth = 1, pos = start;
    while (depth > 0) {
        const auto next_open = dom.find("<" + tag, pos), next_close = dom.find("</" + tag + ">", pos);
        if (next_close == std::string::npos) return dom.substr(start);
        if (next_open != std::string::npos && next_open < next_close) {
            ++depth;
            pos = next_open + 1;
        } else {
            --depth;
            pos = next_close + 1;
        }
    }
    return dom.substr(start, pos - 1 - start);
}

std::vector<std::string> texts_of_class(const std::string& html, const std::string& cls) {
    std::vector<std::string> out;
    const std::regex r("class=\"" + cls + "\"[^>]*>([^<]*)<");
    for (auto it = std::sregex_iterator(html.begin(), html.end(), r); it != std::sregex_iterator(); ++it)
        out.push_back((*it)[1]);
    return out;
}

// The attention card of one head: its key labels and values, and which key is on top.
struct HeadRow {
    std::vector<std::string> keys;
    std::vector<double> values;
    std::string top;
};
HeadRow head_row(const std::string& dom, const std::string& name) {
    HeadRow h;
    const auto at = dom.find("<div class=\"head\" data-name=\"" + name + "\">");
    if (at == std::string::npos) return h;
    const std::string card = dom.substr(at, dom.find("<canvas", at) - at);
    const std::regex bar(
        "<div class=\"(bar[^\"]*)\" data-key=\"\\d+\"><span class=\"tok\">([^<]*)</span>.*?"
        "<span class=\"val\">([^<]*)</span>");
    for (auto it = std::sregex_iterator(card.begin(), card.end(), bar); it != std::sregex_iterator(); ++it) {
        h.keys.push_back((*it)[2]);
        h.values.push_back(std::stod((*it)[3]));
        if ((*it)[1] == "bar top") h.top = (*it)[2];
    }
    return h;
}

fs::path seed_report(const fs::path& dir) {
    const auto run = test::run_cli("run '" + test::seed_graph().string() + "' --trace trace", dir);
    BOOST_REQUIRE_MESSAGE(run.code == 0, run.err);
    const auto r = test::run_cli("report trace -o report.html", dir);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    return dir / "report.html";
}

const std::vector<std::string> seed_tokens = {"外送", "晚到", "補償"};

}  // namespace

BOOST_AUTO_TEST_CASE(report_is_one_self_contained_file) {
    test::TempDir tmp;
    const std::string page = slurp(seed_report(tmp.path));
    BOOST_TEST(page.find("<script src") == std::string::npos);
    BOOST_TEST(page.find("<link") == std::string::npos);
    BOOST_TEST(page.find("@import") == std::string::npos);
    std::string rest = page;
    for (auto at = rest.find("http://www.w3.org/2000/svg"); at != std::string::npos;
         at = rest.find("http://www.w3.org/2000/svg"))
        rest.erase(at, 26);
    BOOST_TEST(rest.find("http://") == std::string::npos);
    BOOST_TEST(rest.find("https://") == std::string::npos);
    BOOST_TEST(rest.find("//cdn") == std::string::npos);
    // the trace's data is embedded
    BOOST_TEST(page.find("\"name\":\"head2.A\"") != std::string::npos);

    const auto bad = test::run_cli("report nowhere -o r.html", tmp.path);
    BOOST_TEST(bad.code != 0);
    BOOST_TEST(bad.err.find("nowhere: not a directory") != std::string::npos);
    BOOST_TEST(!fs::exists(tmp.path / "r.html"));
}

BOOST_AUTO_TEST_CASE(selecting_an_attention_map_shows_name_shape_tokens_values_and_heads) {
    test::TempDir tmp;
    const fs::path page = seed_report(tmp.path);
    const std::string dom = dump_dom(page, "select=head1.A&query=2&hover=2,1");
    BOOST_TEST(element(dom, "sel-name") == "head1.A");
    BOOST_TEST(element(dom, "sel-op") == "Softmax");
    BOOST_TEST(element(dom, "sel-shape") == "3x3");
    BOOST_TEST(element(dom, "sel-formula") == "head1.A = softmax(head1.S (3x3))");
    const std::string map = element(dom, "sel-heatmap");
    BOOST_TEST(map.find("<canvas") != std::string::npos);
    BOOST_TEST(texts_of_class(map, "rl") == seed_tokens, boost::test_tools::per_element());
    BOOST_TEST(texts_of_class(map, "cl") == seed_tokens, boost::test_tools::per_element());
    // the value under the pointer, against the seed document's A(1) row 3 (補償 -> 晚到)
    std::smatch m;
    const std::string hover = element(dom, "sel-hover");
    BOOST_REQUIRE(std::regex_match(hover, m, std::regex("row 補償 \\(2\\), col 晚到 \\(1\\): ([0-9.]+)")));
    BOOST_TEST(std::abs(std::stod(m[1]) - test::seed_values()["head1.A"][2][1].get<double>()) <= 1e-6);
    // stats
    const std::string stats = element(dom, "sel-stats");
    BOOST_TEST(stats.find("<td>0.090031</td><td>0.665241</td>") != std::string::npos, stats);
    // the node is highlighted in the graph
    BOOST_TEST(std::regex_search(dom, std::regex("<g class=\"node op attn selected\" data-name=\"head1.A\"")));
    BOOST_TEST(element(dom, "sel-grad").find("no gradient of head1.A") != std::string::npos);

    // both heads for the query token 補償: the seed document's section 1-8 reading
    for (const char* name : {"head1.A", "head2.A"}) {
        BOOST_TEST_CONTEXT(name) {
            const HeadRow h = head_row(dom, name);
            BOOST_TEST(h.keys == seed_tokens, boost::test_tools::per_element());
            BOOST_REQUIRE(h.values.size() == 3u);
            for (std::size_t j = 0; j < 3; ++j)
                BOOST_TEST(std::abs(h.values[j] - test::seed_values()[name][2][j].get<double>()) <= 1e-6);
        }
    }
    BOOST_TEST(head_row(dom, "head1.A").top == "晚到");
    BOOST_TEST(head_row(dom, "head2.A").top == "外送");

    // another query token
    const std::string q0 = dump_dom(page, "select=head2.A&query=0");
    const HeadRow h = head_row(q0, "head2.A");
    BOOST_REQUIRE(h.values.size() == 3u);
    for (std::size_t j = 0; j < 3; ++j)
        BOOST_TEST(std::abs(h.values[j] - test::seed_values()["head2.A"][0][j].get<double>()) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(clicking_a_node_shows_it) {
    test::TempDir tmp;
    const fs::path page = seed_report(tmp.path);
    // the page starts on head1.A, then clicks head1.Q in the graph
    const std::string dom = dump_dom(page, "click=head1.Q&hover=1,0");
    BOOST_TEST(element(dom, "sel-name") == "head1.Q");
    BOOST_TEST(element(dom, "sel-op") == "Linear");
    BOOST_TEST(element(dom, "sel-shape") == "3x2");
    BOOST_TEST(element(dom, "sel-formula") == "head1.Q = X (3x4) · head1.Wq (4x2) + head1.bq (1x2)");
    const std::string map = element(dom, "sel-heatmap");
    BOOST_TEST(texts_of_class(map, "rl") == seed_tokens, boost::test_tools::per_element());
    BOOST_TEST(texts_of_class(map, "cl") == std::vector<std::string>({"0", "1"}), boost::test_tools::per_element());
    BOOST_TEST(element(dom, "sel-hover") == "row 晚到 (1), col 0: 0");  // Q(1) = [[1,0],[0,1],[1,1]]
    BOOST_TEST(std::regex_search(dom, std::regex("<g class=\"node op selected\" data-name=\"head1.Q\"")));
}

BOOST_AUTO_TEST_CASE(gradients_listed_in_the_manifest_are_shown) {
    test::TempDir tmp;
    const auto run = test::run_cli("run '" + test::seed_graph().string() + "' --trace trace", tmp.path);
    BOOST_REQUIRE(run.code == 0);
    // a gradient file as `attngraph grad` writes it: grad/<name>.npy, listed per entry
    fs::create_directories(tmp.path / "trace" / "grad");
    Array<float> g = {{0.5f, -0.25f, 0}, {0, 1.5f, 0}, {-2, 0, 0.125f}};
    save_npy(tmp.path / "trace" / "grad" / "head1.S.npy", Tensor(g));
    json m = json::parse(slurp(tmp.path / "trace" / "manifest.json"));
    for (auto& e : m["entries"])
        if (e["name"] == "head1.S") e["grad"] = "grad/head1.S.npy";
    std::ofstream(tmp.path / "trace" / "manifest.json") << m.dump();
    const auto r = test::run_cli("report trace -o report.html", tmp.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const std::string dom = dump_dom(tmp.path / "report.html", "select=head1.S");
    const std::string grad = element(dom, "sel-grad");
    BOOST_TEST(grad.find("no gradient") == std::string::npos);
    BOOST_TEST(grad.find("<canvas") != std::string::npos);
    BOOST_TEST(
        grad.find("<td>-2.000000</td><td>1.500000</td><td>-0.013889</td><td>-0.125000</td><td>0</td><td>9</td>") !=
            std::string::npos,
        grad);
    BOOST_TEST(texts_of_class(grad, "rl") == seed_tokens, boost::test_tools::per_element());

    // a manifest with a top-level "grads" map works as well; a listed file that is missing is skipped
    for (auto& e : m["entries"]) e.erase("grad");
    m["grads"] = {{"head1.S", "grad/head1.S.npy"}, {"head1.A", "grad/head1.A.npy"}};
    std::ofstream(tmp.path / "trace" / "manifest.json") << m.dump();
    BOOST_TEST(test::run_cli("report trace -o report2.html", tmp.path).code == 0);
    const std::string dom2 = dump_dom(tmp.path / "report2.html", "select=head1.S");
    BOOST_TEST(element(dom2, "sel-grad").find("<td>-2.000000</td><td>1.500000</td>") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(long_sequences_are_embedded_downsampled) {
    test::TempDir tmp;
    graphs::MhaConfig c;
    c.seq = 600;
    c.d_model = 16;
    c.heads = 4;
    c.name = "long";
    std::ofstream(tmp.path / "long.json") << graph_to_json(graphs::build_mha(c)).dump();
    BOOST_REQUIRE(test::run_cli("run long.json --trace trace --only '*.A,*.O,Y,X'", tmp.path).code == 0);
    const auto r = test::run_cli("report trace -o report.html --max-side 128", tmp.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    // 4 maps of 600x600 floats would be 5.8 MB as float32 alone; pooled to 120x120 blocks of 5x5
    BOOST_TEST(fs::file_size(tmp.path / "report.html") < 2'000'000u);
    const std::string dom = dump_dom(tmp.path / "report.html", "select=head3.A&query=599&hover=599,0");
    BOOST_TEST(element(dom, "sel-name") == "head3.A");
    BOOST_TEST(element(dom, "sel-shape") == "600x600");
    BOOST_TEST(element(dom, "sel-note").find("600x600 embedded downsampled: each cell is the max |x| of a 5x5 block") !=
               std::string::npos);
    BOOST_TEST(element(dom, "sel-hover").find("row 595–599, col 0–4: max |x| ") == 0u, element(dom, "sel-hover"));
    // every head's row for the last query token, drawn as a bar chart
    for (int h = 1; h <= 4; ++h)
        BOOST_TEST(dom.find("data-name=\"head" + std::to_string(h) + ".A\"") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()  // test_report
