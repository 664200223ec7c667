// Bad input for the attention vocabulary through the CLI (issue 12 §4): a graph file whose
// Mask, Alibi or Reshape does not fit gives one `error:` line naming the file, the node, the
// op and the shapes, exit code 1, and no trace directory.
#include <boost/test/unit_test.hpp>

#include "support/helpers.hpp"

using namespace attngraph;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

// A graph of X (shape `x`), optional M (shape `m`) and one node `op` with `attrs`.
std::string graph(const std::string& op, const nlohmann::json& attrs, const Shape& x, const Shape& m) {
    auto zeros_of = [](const Shape& s) {
        nlohmann::json t = {{"kind", "input"}, {"shape", s}};
        std::size_t count = 1;
        for (auto d : s) count *= d;
        t["data"] = nlohmann::json::array();
        // nested lists are not needed: a flat list is refused, so build them
        std::function<nlohmann::json(std::size_t)> nest = [&](std::size_t axis) {
            nlohmann::json a = nlohmann::json::array();
            for (std::size_t i = 0; i < s[axis]; ++i)
                a.push_back(axis + 1 == s.size() ? nlohmann::json(0.5) : nest(axis + 1));
            return a;
        };
        t["data"] = nest(0);
        return t;
    };
    nlohmann::json g = {{"name", "bad"}, {"tensors", {{"X", zeros_of(x)}}}};
    std::vector<std::string> inputs = {"X"};
    if (!m.empty()) {
        g["tensors"]["M"] = zeros_of(m);
        inputs.push_back("M");
    }
    g["nodes"] = {{{"name", "scores"}, {"op", op}, {"inputs", inputs}, {"attrs", attrs}}};
    return g.dump();
}

}  // namespace

BOOST_AUTO_TEST_CASE(bad_masks_slopes_and_reshapes_are_one_line_errors) {
    struct Case {
        std::string op;
        nlohmann::json attrs;
        Shape x, m;
        std::vector<std::string> message;
    };
    const std::vector<Case> cases = {
        {"Mask", {{"mask_type", "additive"}}, {2, 3, 4}, {3, 5}, {"mask (3x5) does not broadcast to x (2x3x4)"}},
        {"Mask", {{"pattern", "causal"}, {"mask_type", "boolean"}}, {2, 3, 4}, {2, 4, 4}, {"mask (2x4x4)"}},
        {"Mask", {{"mask_type", "sum"}}, {3, 4}, {3, 4}, {"unknown mask_type 'sum'"}},
        {"Mask", {{"pattern", "padding"}, {"lengths", {1, 2}}, {"offset", 1}}, {2, 3, 4}, {}, {"'offset'"}},
        {"Mask", {{"pattern", "causal"}, {"offset", 1}, {"offset_from_end", true}}, {3, 4}, {}, {"not both"}},
        {"Alibi", nlohmann::json::object(), {2, 3, 4, 4}, {2}, {"slopes (2)", "x (2x3x4x4)"}},
        {"Alibi", nlohmann::json::object(), {4, 4}, {4}, {"x must be (..., h, n, m)", "(4x4)"}},
        {"Reshape",
         {{"shape", {-1}}, {"keep_leading", 2}, {"keep_trailing", 2}},
         {2, 3, 4},
         {},
         {"keep_leading 2", "(2x3x4)"}},
    };
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.op << " " << c.attrs.dump()) {
            test::TempDir dir;
            {
                std::ofstream f(dir.path / "bad.json");
                f << graph(c.op, c.attrs, c.x, c.m);
            }
            const auto r = run_cli("run bad.json --trace t", dir.path);
            BOOST_TEST(r.code == 1, r.err);
            BOOST_TEST(r.err.rfind("error: ", 0) == 0u, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
            BOOST_TEST(r.err.find("bad.json") != std::string::npos, r.err);
            BOOST_TEST(r.err.find("'scores' (" + c.op + ")") != std::string::npos, r.err);
            for (const auto& part : c.message)
                BOOST_TEST(r.err.find(part) != std::string::npos, r.err << " lacks " << part);
            BOOST_TEST(!fs::exists(dir.path / "t"));
        }
    }
}
