// Bad input for the attention vocabulary through the CLI (issue 12 §4): a graph file whose
// Mask, Alibi or Reshape does not fit gives one `error:` line naming the file, the node, the
// op and the shapes, exit code 1, and no trace directory.
#include <boost/test/unit_test.hpp>

#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_cli_attention_errors)

using namespace attngraph;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

// A graph of X (shape `x`), optional M (shape `m`) and one node `op` with `attrs`.
std::string graph(const std::string& op, const nlohmann::json& attrs, const Shape& x, const Shape& m) {
    auto zeros_of = [](const Shape& s) {
        nlohmann::json t = {{"kind", "input"}, {"shape", s}};
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

namespace {

struct Operand {
    std::string name;
    Shape shape;
    double fill = 0.5;  // every element
};

// A graph of the operands (inputs) and one node `scores` of `op` reading them in order.
std::string graph_of(const std::string& op, const nlohmann::json& attrs, const std::vector<Operand>& operands) {
    nlohmann::json g = {{"name", "bad"}, {"tensors", nlohmann::json::object()}};
    std::vector<std::string> inputs;
    for (const auto& o : operands) {
        std::function<nlohmann::json(std::size_t)> nest = [&](std::size_t axis) {
            nlohmann::json a = nlohmann::json::array();
            for (std::size_t i = 0; i < o.shape[axis]; ++i)
                a.push_back(axis + 1 == o.shape.size() ? nlohmann::json(o.fill) : nest(axis + 1));
            return a;
        };
        g["tensors"][o.name] = {{"kind", "input"}, {"shape", o.shape}, {"data", nest(0)}};
        inputs.push_back(o.name);
    }
    g["nodes"] = {{{"name", "scores"}, {"op", op}, {"inputs", inputs}, {"attrs", attrs}}};
    return g.dump();
}

}  // namespace

// Issue 12 §4, one case each: the error line names the file, the node, the op, and the shapes
// or the value that is wrong; nothing is written.
BOOST_AUTO_TEST_CASE(bad_rope_heads_gather_and_positions_are_one_line_errors) {
    struct Case {
        std::string what, op;
        nlohmann::json attrs;
        std::vector<Operand> in;
        std::vector<std::string> message;
    };
    const std::vector<Case> cases = {
        {"RoPE on an odd head size",
         "RotaryEmbedding",
         nlohmann::json::object(),
         {{"X", {1, 2, 3, 5}}, {"cos", {1, 3, 2}}, {"sin", {1, 3, 2}}},
         {"head size 5 of x (1x2x3x5) is odd"}},
        {"position ids past the cache",
         "RotaryEmbedding",
         nlohmann::json::object(),
         {{"X", {1, 2, 3, 4}}, {"cos", {4, 2}}, {"sin", {4, 2}}, {"pos", {1, 3}, 7}},
         {"position id 7", "past the cache of 4 positions", "position_ids (1x3)"}},
        {"a mask that does not broadcast",
         "Attention",
         nlohmann::json::object(),
         {{"Q", {1, 2, 3, 4}}, {"K", {1, 2, 5, 4}}, {"V", {1, 2, 5, 4}}, {"M", {3, 4}}},
         {"(3x4)", "Q (1x2x3x4)"}},
        {"q_num_heads not a multiple of kv_num_heads",
         "Attention",
         {{"q_num_heads", 3}, {"kv_num_heads", 2}},
         {{"Q", {1, 4, 12}}, {"K", {1, 4, 8}}, {"V", {1, 4, 8}}},
         {"q_num_heads 3 is not a multiple of kv_num_heads 2", "Q (1x4x12)"}},
        {"Gather indices out of range",
         "Gather",
         {{"axis", 1}},
         {{"X", {2, 3}}, {"idx", {2}, 3}},
         {"index 3", "out of range for axis 1 of size 3", "indices (2)"}},
    };
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.what) {
            test::TempDir dir;
            std::ofstream(dir.path / "bad.json") << graph_of(c.op, c.attrs, c.in);
            const auto r = run_cli("run bad.json --trace t", dir.path);
            BOOST_TEST(r.code == 1, r.err);
            BOOST_TEST(r.err.rfind("error: ", 0) == 0u, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
            BOOST_TEST(r.err.find("bad.json") != std::string::npos, r.err);
            BOOST_TEST(r.err.find("'scores") != std::string::npos, r.err);
            BOOST_TEST(r.err.find(c.op) != std::string::npos, r.err);
            for (const auto& part : c.message)
                BOOST_TEST(r.err.find(part) != std::string::npos, r.err << " lacks " << part);
            BOOST_TEST(!fs::exists(dir.path / "t"));
        }
    }
}

// A negative base to a fractional power is NaN, not an error; --check-finite names the node
// and how many values are not finite.
BOOST_AUTO_TEST_CASE(pow_of_a_negative_base_is_nan_that_check_finite_names) {
    test::TempDir dir;
    std::ofstream(dir.path / "pow.json") << graph_of("Pow", {{"exponent", 0.5}}, {{"X", {2, 2}, -4}});
    const auto plain = run_cli("run pow.json", dir.path);
    BOOST_TEST(plain.code == 0, plain.err);
    BOOST_TEST(plain.out.find("nan") != std::string::npos, plain.out);
    const auto checked = run_cli("run pow.json --check-finite --trace t", dir.path);
    BOOST_TEST(checked.code == 1, checked.err);
    BOOST_TEST(checked.err.rfind("error: ", 0) == 0u, checked.err);
    BOOST_TEST(checked.err.find("'scores' (Pow)") != std::string::npos, checked.err);
    BOOST_TEST(checked.err.find("4 non-finite values") != std::string::npos, checked.err);
    // diff says which trace is incomplete, even when the values they share agree
    BOOST_TEST_REQUIRE(run_cli("run pow.json --trace full -q", dir.path).code == 0);
    const auto diffed = run_cli("diff full t", dir.path);
    BOOST_TEST(diffed.code == 0, diffed.err);
    BOOST_TEST(diffed.out.find("note: t is an incomplete trace") != std::string::npos, diffed.out);
    BOOST_TEST(diffed.out.find("note: full") == std::string::npos, diffed.out);
}

BOOST_AUTO_TEST_SUITE_END()  // test_cli_attention_errors
