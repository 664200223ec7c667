// attngraph grad: gradient traces of the seed graph, output gradients from files, the same
// bytes at any thread count, and one-line errors that leave no trace directory behind.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "engine/autodiff.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_grad_cli)

using namespace attngraph;
namespace fs = std::filesystem;
namespace bdata = boost::unit_test::data;

namespace {

// built with += : GCC 12 warns (-Wrestrict, a false positive) on "literal" + std::string
std::string q(const fs::path& p) {
    std::string quoted = "'";
    quoted += p.string();
    quoted += '\'';
    return quoted;
}

nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

bool one_line_error(const test::CliResult& r) {
    return r.code != 0 && r.err.rfind("error: ", 0) == 0 && r.err.find('\n') == r.err.size() - 1;
}

// nothing at `dir`, and no temporary sibling left in its folder
bool nothing_left(const fs::path& dir) {
    if (fs::exists(dir)) return false;
    for (const auto& e : fs::directory_iterator(dir.parent_path()))
        if (e.path().filename().string().rfind(std::string(".") += dir.filename().string(), 0) == 0) return false;
    return true;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

BOOST_AUTO_TEST_CASE(seed_trace_has_the_gradient_of_every_node_and_tensor) {
    test::TempDir tmp;
    const auto r = test::run_cli("grad " + q(test::seed_graph()) + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Graph g = load_graph(test::seed_graph());
    const nlohmann::json manifest = read_json(tmp.path / "t" / "manifest.json");
    BOOST_TEST(manifest["grads"].size() == g.values().size());
    BOOST_TEST(g.values().size() == 33u);  // 15 tensors, 18 nodes

    // the library's gradients for the same graph and G (all ones)
    RunOptions keep;
    keep.keep_all = true;
    const Gradients expected = backward(g, run(g, keep));
    for (const auto& v : g.values()) {
        BOOST_TEST_CONTEXT(v.name) {
            const fs::path file = tmp.path / "t" / "grad" / (v.name + ".npy");
            BOOST_TEST_REQUIRE(fs::exists(file));
            BOOST_TEST((load_npy(file) == expected.at(v.name)));
            BOOST_TEST(fs::exists(tmp.path / "t" / (v.name + ".npy")));  // and the forward value
            bool listed = false;
            for (const auto& e : manifest["entries"])
                if (e["name"] == v.name) listed = e.value("grad", "") == "grad/" + v.name + ".npy";
            BOOST_TEST(listed);
        }
    }
    const Tensor dy = load_npy(tmp.path / "t" / "grad" / "Y.npy");
    for (std::size_t i = 0; i < dy.size(); ++i) BOOST_TEST(dy.at_flat(i) == 1.0);
    // the printout: every param's gradient by default
    BOOST_TEST(r.out.find("dL/dhead2.Wk (4x2)") != std::string::npos);
    BOOST_TEST(r.out.find("dL/dX") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(output_grad_from_file_and_wrt) {
    test::TempDir tmp;
    Array<float> two({3, 4}, 2.0f);
    save_npy(tmp.path / "g.npy", Tensor(two));
    const auto named =
        test::run_cli("grad " + q(test::seed_graph()) + " --output-grad Y=g.npy --wrt X --trace a", tmp.path);
    const auto plain = test::run_cli("grad " + q(test::seed_graph()) + " --output-grad g.npy --wrt X", tmp.path);
    const auto ones = test::run_cli("grad " + q(test::seed_graph()) + " --trace b", tmp.path);
    BOOST_TEST_REQUIRE(named.code == 0, named.err);
    BOOST_TEST_REQUIRE(plain.code == 0, plain.err);
    BOOST_TEST_REQUIRE(ones.code == 0, ones.err);
    BOOST_TEST(named.out == plain.out + "trace written to a\n");
    BOOST_TEST(named.out.find("dL/dX (3x4)") != std::string::npos);
    BOOST_TEST(named.out.find("Y: g.npy") != std::string::npos);
    // L is linear in G: G = 2 doubles every gradient, exactly (a power of two)
    const Tensor dx2 = load_npy(tmp.path / "a" / "grad" / "X.npy"), dx1 = load_npy(tmp.path / "b" / "grad" / "X.npy");
    for (std::size_t i = 0; i < dx1.size(); ++i) BOOST_TEST(dx2.at_flat(i) == 2 * dx1.at_flat(i));
}

BOOST_DATA_TEST_CASE(gradient_files_identical_at_any_thread_count, bdata::make({"f32", "f64"}), dtype) {
    // a graph large enough for the parallel executor (n 96, d_model 64, 4 heads)
    test::TempDir tmp;
    graphs::MhaConfig c;
    c.seq = 96;
    c.d_model = 64;
    c.heads = 4;
    const Graph g = graphs::build_mha(c);
    fs::create_directories(tmp.path / "w");
    std::ofstream(tmp.path / "mha.json") << graph_to_json(g, tmp.path / "w", tmp.path).dump();
    std::map<int, std::string> bytes;
    for (int threads : {1, 2, 4, 8}) {
        const std::string dir = std::string("t") += std::to_string(threads);
        const auto r = test::run_cli(
            "grad mha.json --dtype " + std::string(dtype) + " --threads " + std::to_string(threads) + " --trace " + dir,
            tmp.path);
        BOOST_TEST_REQUIRE(r.code == 0, r.err);
        for (const auto& v : g.values()) bytes[threads] += slurp(tmp.path / dir / "grad" / (v.name + ".npy"));
    }
    BOOST_TEST(bytes[1].size() > 100000u);
    BOOST_TEST((bytes[2] == bytes[1]));
    BOOST_TEST((bytes[4] == bytes[1]));
    BOOST_TEST((bytes[8] == bytes[1]));
}

BOOST_AUTO_TEST_CASE(bad_input_gives_one_line_and_leaves_no_trace) {
    test::TempDir tmp;
    save_npy(tmp.path / "bad.npy", Tensor(Array<float>({3, 3}, 1.0f)));
    const std::string seed = q(test::seed_graph());

    auto r = test::run_cli("grad " + seed + " --output-grad bad.npy --trace t", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(r.err.find("3x3") != std::string::npos);
    BOOST_TEST(r.err.find("3x4") != std::string::npos);
    BOOST_TEST(r.err.find("bad.npy") != std::string::npos);
    BOOST_TEST(nothing_left(tmp.path / "t"));

    r = test::run_cli("grad " + seed + " --wrt X,head9.Wq --trace t", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(r.err.find("'head9.Wq'") != std::string::npos);
    BOOST_TEST(nothing_left(tmp.path / "t"));

    r = test::run_cli("grad " + seed + " --output-grad Z=bad.npy --trace t", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(r.err.find("not an output") != std::string::npos);
    BOOST_TEST(nothing_left(tmp.path / "t"));

    r = test::run_cli("grad " + seed + " --output-grad missing.npy --trace t", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(r.err.find("missing.npy") != std::string::npos);
    BOOST_TEST(nothing_left(tmp.path / "t"));

    // an existing non-empty directory is refused, and replaced with --force
    fs::create_directories(tmp.path / "full");
    std::ofstream(tmp.path / "full" / "keep.txt") << "x";
    r = test::run_cli("grad " + seed + " --trace full", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(fs::exists(tmp.path / "full" / "keep.txt"));
    r = test::run_cli("grad " + seed + " --trace full --force", tmp.path);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(!fs::exists(tmp.path / "full" / "keep.txt"));
    BOOST_TEST(fs::exists(tmp.path / "full" / "grad" / "X.npy"));
}

BOOST_AUTO_TEST_CASE(several_outputs_need_named_output_grads) {
    test::TempDir tmp;
    std::ofstream(tmp.path / "two.json") << R"({
      "name": "two", "dtype": "f64",
      "tensors": {"x": {"kind": "input", "data": [[1, 2], [3, 4]]}},
      "nodes": [{"name": "a", "op": "Scale", "inputs": ["x"], "attrs": {"factor": 2}},
                {"name": "b", "op": "Softmax", "inputs": ["x"]}],
      "outputs": ["a", "b"]})";
    save_npy(tmp.path / "g.npy", Tensor(Array<double>({2, 2}, 0.5)));
    auto r = test::run_cli("grad two.json --output-grad g.npy", tmp.path);
    BOOST_TEST(one_line_error(r), r.err);
    BOOST_TEST(r.err.find("NAME=FILE.npy") != std::string::npos);
    r = test::run_cli("grad two.json", tmp.path);  // no params: the inputs' gradients are printed
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(r.out.find("dL/dx (2x2)") != std::string::npos);
    // G_a = 0.5, G_b = ones: dL/dx = 0.5 · 2 + softmax's gradient of sum (zero)
    r = test::run_cli("grad two.json --output-grad a=g.npy --wrt x --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor dx = load_npy(tmp.path / "t" / "grad" / "x.npy");
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(dx.at_flat(i) - 1.0) <= 1e-15);
}

BOOST_AUTO_TEST_SUITE_END()  // test_grad_cli
