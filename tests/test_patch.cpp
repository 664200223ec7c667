// Activation patching (issue 15, part 2): a node's output replaced by a given value or by a
// hook's result, everything downstream recomputed from it, the trace marking what was
// patched, `attngraph run --patch` and `diff`, gradients through a frozen value (and
// `attngraph grad --patch`), and one clear error for each bad patch. Reference values: the
// seed document's matrices and hand computation (the seed's Wo is the identity and bo zero,
// so Y = [head1.O | head2.O]).
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/patch.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_patch)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Tensor filled(const Shape& shape, float v) {
    Tensor t = zeros(DType::f32, shape);
    for (auto& x : t.as<float>()) x = v;
    return t;
}

std::string q(const fs::path& p) {
    std::string quoted = "'";
    quoted += p.string();
    quoted += '\'';
    return quoted;
}

// Each bad --patch of `command` (run or grad on the seed graph, uniform.npy 3x3 and wide.npy
// 3x4 in dir): its one error line, exit 1 (2 for one that is not NODE=FILE: a bad command
// line) and no trace left behind. `tensor` is a patch of a tensor rather than a node output,
// with its message.
void expect_bad_patches(const std::string& command, const fs::path& dir, const std::string& tensor,
                        const std::string& tensor_message) {
    const std::pair<std::string, std::string> bad[] = {
        {"head9.A=uniform.npy", "error: patch head9.A: graph 'seed_mha' has no node named 'head9.A'\n"},
        {"head2.A=wide.npy", "error: patch head2.A: wide.npy is 3x4, node 'head2.A' (Softmax) outputs 3x3\n"},
        {tensor, tensor_message},
        {"head2.A", "error: --patch: 'head2.A': expected NAME=FILE.npy (see attngraph --help)\n"},
        {"head2.A=", "error: --patch: 'head2.A=': expected NAME=FILE.npy (see attngraph --help)\n"},
    };
    for (const auto& [patch, message] : bad) {
        const CliResult e = run_cli(command + " --patch " + patch + " --trace out", dir);
        BOOST_TEST(e.code == (message.find("expected NAME=FILE") != std::string::npos ? 2 : 1));
        BOOST_TEST(e.err == message);
        BOOST_TEST(!fs::exists(dir / "out"));
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(patched_attention_recomputes_downstream_only) {
    const Graph g = load_graph(seed_graph());
    for (int threads : {1, 2}) {
        RunOptions options;
        options.threads = threads;
        options.keep_all = true;
        // head2 attends uniformly: head2.O = the column means of head2.V = [1/3, 1/3] on every row
        add_patch(g, options, "head2.A", filled({3, 3}, 1.0f / 3));
        const RunResult r = run(g, options);
        const Tensor& y = r.at(g, "Y");
        const json& seed = seed_values();
        for (std::size_t i = 0; i < 3; ++i) {
            BOOST_TEST(std::abs(y.at_flat(i * 4 + 0) - seed["head1.O"][i][0].get<double>()) < 1e-5);
            BOOST_TEST(std::abs(y.at_flat(i * 4 + 1) - seed["head1.O"][i][1].get<double>()) < 1e-5);
            BOOST_TEST(std::abs(y.at_flat(i * 4 + 2) - 1.0 / 3) < 1e-6);
            BOOST_TEST(std::abs(y.at_flat(i * 4 + 3) - 1.0 / 3) < 1e-6);
        }
        // upstream of the patch is computed as in a clean run
        BOOST_TEST(max_abs_diff(r.at(g, "head2.S"), seed["head2.S"]) < 1e-5);
        BOOST_TEST(r.at(g, "head2.A").at_flat(4) == 1.0f / 3);
    }
}

BOOST_AUTO_TEST_CASE(hooks_see_the_computed_value_and_replace_it) {
    const Graph g = load_graph(seed_graph());
    RunOptions options;
    options.threads = 2;
    int calls = 0;
    double seen = 0;
    add_hook(g, options, "head1.O", [&](const Tensor& t) {
        ++calls;
        seen = t.at_flat(1);
        return zeros(DType::f32, t.shape());  // zero-ablation
    });
    const RunResult r = run(g, options);
    BOOST_TEST(calls == 1);
    BOOST_TEST(std::abs(seen - seed_values()["head1.O"][0][1].get<double>()) < 1e-5);
    const Tensor& y = r.at(g, "Y");
    for (std::size_t i = 0; i < 3; ++i) {
        BOOST_TEST(y.at_flat(i * 4) == 0.0);
        BOOST_TEST(y.at_flat(i * 4 + 1) == 0.0);
        BOOST_TEST(std::abs(y.at_flat(i * 4 + 3) - seed_values()["Y"][i][3].get<double>()) < 1e-5);
    }
    RunOptions bad;
    add_hook(g, bad, "head1.O", [](const Tensor&) { return zeros(DType::f32, {2, 2}); });
    BOOST_CHECK_EXCEPTION(run(g, bad), ShapeError, [](const ShapeError& e) {
        return std::string(e.what()).find("head1.O") != std::string::npos &&
               std::string(e.what()).find("2x2") != std::string::npos;
    });
}

BOOST_AUTO_TEST_CASE(bad_patches_are_one_clear_error_each) {
    const Graph g = load_graph(seed_graph());
    RunOptions options;
    auto message = [&](const std::string& name, const Tensor& t) -> std::string {
        try {
            add_patch(g, options, name, t, "p.npy");
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    BOOST_TEST(message("head9.A", filled({3, 3}, 0)) == "patch head9.A: graph 'seed_mha' has no node named 'head9.A'");
    BOOST_TEST(message("head2.A", filled({2, 3}, 0)) ==
               "patch head2.A: p.npy is 2x3, node 'head2.A' (Softmax) outputs 3x3");
    BOOST_TEST(message("X", filled({3, 4}, 0)) ==
               "patch X: 'X' is an input tensor, not a node output (replace it with --input X=FILE.npy)");
    BOOST_TEST(message("head1.Wq", filled({4, 2}, 0)) ==
               "patch head1.Wq: 'head1.Wq' is a param tensor, not a node output (replace it with --input "
               "head1.Wq=FILE.npy)");
    BOOST_TEST(options.patches.empty());
}

BOOST_AUTO_TEST_CASE(gradients_treat_a_frozen_value_as_a_constant) {
    const Graph g = load_graph(seed_graph());
    const Graph frozen = freeze_values(g, {{"head2.A", filled({3, 3}, 1.0f / 3)}});
    RunOptions options;
    options.keep_all = true;
    const RunResult fwd = run(frozen, options);
    BackwardOptions bo;
    bo.wrt = {"head2.Wv", "head2.A", "head1.Wv"};
    const Gradients grads = backward(frozen, fwd, {}, bo);
    // L = sum(Y), Y[:, 2:4] = A2 · X · Wv2: dL/dWv2[k][c] = sum_i (A2 · X)[i][k] = 3 · mean_i X[i][k]... = column sums
    // of X (A2 uniform: sum_i (A2·X)[i][k] = sum_j X[j][k]); X's column sums are 2, 2, 1, 1
    const double colsum[4] = {2, 2, 1, 1};
    for (std::size_t k = 0; k < 4; ++k)
        for (std::size_t c = 0; c < 2; ++c)
            BOOST_TEST(std::abs(grads.at("head2.Wv").at_flat(k * 2 + c) - colsum[k]) < 1e-5);
    BOOST_TEST((frozen.value(frozen.at("head2.A")).kind == ValueKind::param));
    // the frozen graph computes the same Y as the patched run
    RunOptions patched;
    add_patch(g, patched, "head2.A", filled({3, 3}, 1.0f / 3));
    BOOST_TEST((run(g, patched).at(g, "Y") == fwd.at(frozen, "Y")));
}

BOOST_AUTO_TEST_CASE(cli_patch_marks_the_trace_and_diff_shows_the_effect) {
    TempDir dir;
    save_npy(dir.path / "uniform.npy", filled({3, 3}, 1.0f / 3));
    save_npy(dir.path / "wide.npy", filled({3, 4}, 0));
    const std::string graph = q(seed_graph());
    BOOST_REQUIRE_EQUAL(run_cli("run " + graph + " --trace clean", dir.path).code, 0);
    const CliResult r =
        run_cli("run " + graph + " --patch head2.A=uniform.npy --trace patched --tokens a,b,c", dir.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    BOOST_TEST(r.out.find("0.333333") != std::string::npos);
    const json manifest = json::parse(slurp(dir.path / "patched" / "manifest.json"));
    BOOST_TEST(manifest["tokens"] == json({"a", "b", "c"}));
    int marked = 0;
    for (const auto& e : manifest["entries"]) {
        const bool patched = e.value("patched", false);
        marked += patched;
        BOOST_TEST(patched == (e["name"] == "head2.A"));
    }
    BOOST_TEST(marked == 1);
    const Tensor y = load_npy(dir.path / "patched" / "Y.npy");
    BOOST_TEST(std::abs(y.at_flat(2) - 1.0 / 3) < 1e-6);

    const CliResult d = run_cli("diff clean patched", dir.path);
    BOOST_TEST(d.code != 0);
    auto status_of = [&](const std::string& name) {
        std::istringstream in(d.out);
        std::string line;
        while (std::getline(in, line))
            if (line.rfind(name + " ", 0) == 0) return line;
        return std::string();
    };
    for (const char* changed : {"head2.A", "head2.O", "O_concat", "Y"})
        BOOST_TEST(status_of(changed).find("DIFFERS") != std::string::npos, changed << ": " << status_of(changed));
    for (const char* same : {"head1.O", "head2.S", "head2.V"})
        BOOST_TEST(status_of(same).find("DIFFERS") == std::string::npos, same << ": " << status_of(same));

    // bad patches: one line each, exit 1, no trace left behind
    expect_bad_patches("run " + graph, dir.path, "X=wide.npy",
                       "error: patch X: 'X' is an input tensor, not a node output (replace it with --input "
                       "X=FILE.npy)\n");
    const CliResult missing = run_cli("run " + graph + " --patch head2.A=nope.npy", dir.path);
    BOOST_TEST(missing.code == 1);
    BOOST_TEST(missing.err.rfind("error: --patch head2.A=nope.npy: ", 0) == 0);
}

BOOST_AUTO_TEST_CASE(cli_grad_patch_treats_the_patched_value_as_a_constant) {
    TempDir dir;
    save_npy(dir.path / "uniform.npy", filled({3, 3}, 1.0f / 3));
    save_npy(dir.path / "wide.npy", filled({3, 4}, 0));
    const std::string graph = q(seed_graph());
    const CliResult r =
        run_cli("grad " + graph + " --patch head2.A=uniform.npy --wrt head2.Wv,head2.Wq,head1.Wv --trace g", dir.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    // L = sum(Y) with head2's attention uniform: dL/dWv2[k][c] = the column sums of X: 2, 2, 1, 1
    const Tensor wv2 = load_npy(dir.path / "g" / "grad" / "head2.Wv.npy");
    BOOST_REQUIRE((wv2.shape() == Shape{4, 2}));
    const double colsum[4] = {2, 2, 1, 1};
    for (std::size_t k = 0; k < 4; ++k)
        for (std::size_t c = 0; c < 2; ++c) BOOST_TEST(std::abs(wv2.at_flat(k * 2 + c) - colsum[k]) < 1e-5);
    // no gradient flows through the constant A to head2's queries
    const Tensor wq2 = load_npy(dir.path / "g" / "grad" / "head2.Wq.npy");
    for (std::size_t i = 0; i < wq2.size(); ++i) BOOST_TEST(wq2.at_flat(i) == 0.0);
    // head 1 is untouched by the patch: dL/dWv1[k][c] = sum_i (A1 · X)[i][k], A1 from the seed document
    const json& seed = seed_values();
    const double x[3][4] = {{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}};
    const Tensor wv1 = load_npy(dir.path / "g" / "grad" / "head1.Wv.npy");
    for (std::size_t k = 0; k < 4; ++k) {
        double want = 0;
        for (std::size_t i = 0; i < 3; ++i)
            for (std::size_t j = 0; j < 3; ++j) want += seed["head1.A"][i][j].get<double>() * x[j][k];
        for (std::size_t c = 0; c < 2; ++c) BOOST_TEST(std::abs(wv1.at_flat(k * 2 + c) - want) < 1e-5);
    }
    const json manifest = json::parse(slurp(dir.path / "g" / "manifest.json"));
    std::vector<std::string> marked;
    for (const auto& e : manifest["entries"])
        if (e.value("patched", false)) marked.push_back(e["name"].get<std::string>());
    BOOST_TEST(marked == std::vector<std::string>{"head2.A"}, boost::test_tools::per_element());

    // the printed gradients (the default --wrt: every param of the graph file, not the frozen value)
    const CliResult all = run_cli("grad " + graph + " --patch head2.A=uniform.npy", dir.path);
    BOOST_REQUIRE_MESSAGE(all.code == 0, all.err);
    BOOST_TEST(all.out.find("dL/dhead2.Wv (4x2)") != std::string::npos);
    BOOST_TEST(all.out.find("dL/dhead2.A") == std::string::npos);

    expect_bad_patches("grad " + graph, dir.path, "head1.Wq=wide.npy",
                       "error: patch head1.Wq: 'head1.Wq' is a param tensor, not a node output (replace it with "
                       "--input head1.Wq=FILE.npy)\n");
}

BOOST_AUTO_TEST_SUITE_END()  // test_patch
