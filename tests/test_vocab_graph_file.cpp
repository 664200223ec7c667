// Every op of the vocabulary (elementwise, reductions, shape and index ops, norms, RoPE) in one
// graph file: attributes read from JSON, the graph run, differentiated (the engine's gradcheck
// over every tensor, which skips indices and positions) and written back to JSON unchanged;
// through the command line (check, run, grad, explain); docs/ops.md lists every op.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>

#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_vocab_graph_file)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {

json node(const std::string& name, const std::string& op, const std::vector<std::string>& inputs,
          const json& attrs = nullptr) {
    json n = {{"name", name}, {"op", op}, {"inputs", inputs}};
    if (!attrs.is_null()) n["attrs"] = attrs;
    return n;
}

json vocabulary_graph() {
    json t = {
        {"x",
         {{"kind", "input"},
          {"data",
           {{{0.5, -1, 2, 0.25}, {1.5, -0.5, 0.75, -2}, {0.1, 0.2, -0.3, 1}},
            {{-0.6, 0.9, 1.2, -1.1}, {0.3, 0.8, -0.7, 0.4}, {2.1, -1.4, 0.6, 0.05}}}}}},
        {"s", {{"kind", "param"}, {"data", {0.9, 1.1, -0.8, 1.3}}}},
        {"b", {{"kind", "param"}, {"data", {0.1, -0.2, 0.3, 0}}}},
        {"idx", {{"kind", "input"}, {"data", {3, -4}}}},
        {"cos", {{"kind", "param"}, {"data", {{1, 1}, {0.54, 0.99}, {-0.42, 0.98}, {-0.99, 0.96}}}}},
        {"sin", {{"kind", "param"}, {"data", {{0, 0}, {0.84, 0.1}, {0.91, 0.2}, {0.14, 0.3}}}}},
        {"pos", {{"kind", "input"}, {"data", {{2, 0, 3}}}}},
        // rope3 rotates 2 of each 2-wide head: caches of rotary dim / 2 = 1 column
        {"cos1", {{"kind", "param"}, {"data", {{1}, {0.54}, {-0.42}, {-0.99}}}}},
        {"sin1", {{"kind", "param"}, {"data", {{0}, {0.84}, {0.91}, {0.14}}}}},
        {"cw", {{"kind", "param"}, {"data", {{{0.5, -1}, {2, 0.25}, {1, 1}}, {{-0.5, 1.5}, {0, 1}, {0.75, -2}}}}}},
    };
    json n = json::array();
    n.push_back(node("q_idx", "Range", {}, {{"limit", 3}}));
    n.push_back(node("kv_idx", "Range", {}, {{"start", 0}, {"limit", 3}, {"delta", 1}}));
    n.push_back(node("q_col", "Reshape", {"q_idx"}, {{"shape", {3, 1}}}));
    n.push_back(node("before", "Less", {"q_col", "kv_idx"}));
    n.push_back(node("same", "Equal", {"q_col", "kv_idx"}));
    n.push_back(node("after", "Greater", {"q_col", "kv_idx"}));
    n.push_back(node("scores", "ReduceSum", {"x"}, {{"axes", {-1}}}));  // (2, 3, 1)
    n.push_back(node("grid", "Expand", {"scores"}, {{"shape", {2, 3, 3}}}));
    n.push_back(node("masked", "Where", {"after", "grid", "same"}));
    n.push_back(node("e", "Exp", {"s"}));
    n.push_back(node("xs", "Mul", {"x", "s"}));
    n.push_back(node("xb", "Sub", {"xs", "b"}));
    n.push_back(node("xd", "Div", {"xb", "e"}));
    n.push_back(node("xn", "Neg", {"xd"}));
    n.push_back(node("xt", "Tanh", {"xn"}));
    n.push_back(node("xe", "Erf", {"xn"}));
    n.push_back(node("xr", "Relu", {"xn"}));
    n.push_back(node("xg", "Sigmoid", {"xn"}));
    n.push_back(node("ls", "Log", {"e"}));
    n.push_back(node("rs", "Sqrt", {"e"}));
    n.push_back(node("ps", "Pow", {"e"}, {{"exponent", 1.5}}));
    n.push_back(node("sx", "Sin", {"x"}));
    n.push_back(node("cx", "Cos", {"x"}));
    n.push_back(node("xa", "Abs", {"xn"}));
    n.push_back(node("xc", "Clip", {"xn"}, {{"min", -0.5}, {"max", 0.75}}));
    n.push_back(node("xl", "LeakyRelu", {"xn"}, {{"alpha", 0.2}}));
    n.push_back(node("xp", "Softplus", {"xn"}));
    n.push_back(node("xm", "Max", {"xn", "sx"}));
    n.push_back(node("xi", "Min", {"xn", "s"}));
    n.push_back(node("mean", "ReduceMean", {"x"}));
    n.push_back(node("peak", "ReduceMax", {"x"}, {{"axes", {1}}, {"keepdims", 0}}));
    n.push_back(node("cols", "Gather", {"x", "idx"}, {{"axis", 2}}));
    n.push_back(node("rms", "RMSNormalization", {"x", "s"}));
    n.push_back(node("ln", "LayerNormalization", {"x", "s", "b"}, {{"epsilon", 1e-3}, {"stats", 1}}));
    n.push_back(node("heads", "Reshape", {"x"}, {{"shape", {1, 2, 3, 4}}}));
    n.push_back(node("rope", "RotaryEmbedding", {"heads", "cos", "sin", "pos"}));
    n.push_back(node("rope3", "RotaryEmbedding", {"x", "cos1", "sin1", "pos"},
                     {{"num_heads", 2}, {"rotary_embedding_dim", 2}, {"interleaved", 1}}));
    n.push_back(node("cv", "Conv", {"x", "cw"}, {{"strides", {2}}, {"pads", {1, 0}}}));  // (2, 2, 2)
    return {{"name", "vocabulary"}, {"dtype", "f64"}, {"tensors", t}, {"nodes", n}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_op_in_a_graph_file) {
    TempDir d;
    std::ofstream(d.path / "vocab.json") << vocabulary_graph().dump(1);
    const Graph g = load_graph(d.path / "vocab.json");
    BOOST_TEST(g.nodes().size() == 38u);
    // written back: the same attributes, read again: the same graph
    const json back = graph_to_json(g);
    BOOST_TEST(graph_to_json(parse_graph(back.dump(), d.path, "back")) == back);

    RunOptions o;
    o.keep_all = true;
    const RunResult r = run(g, o);
    // a few values by hand: where(q > kv, rowsum, q == kv)
    const auto& m = r.at(g, "masked").as<double>();
    BOOST_TEST(m(0, 0, 0) == 1.0);                   // q = kv = 0
    BOOST_TEST(m(0, 0, 1) == 0.0);                   // q < kv
    BOOST_TEST(m(0, 1, 0) == 1.5 - 0.5 + 0.75 - 2);  // q > kv: the row sum of x[0, 1]
    const auto& cols = r.at(g, "cols").as<double>();
    BOOST_TEST(cols(0, 0, 0) == 0.25);  // x[0, 0, 3]
    BOOST_TEST(cols(0, 0, 1) == 0.5);   // x[0, 0, -4] = x[0, 0, 0]
    BOOST_TEST(r.at(g, "ln:1").shape() == (Shape{2, 3, 1}));
    BOOST_TEST(r.at(g, "peak").shape() == (Shape{2, 4}));
    // the first tap of the convolution falls in the padding: W[0, c, 1]·x[0, c, 0] over c
    const auto& cv = r.at(g, "cv").as<double>();
    BOOST_TEST(std::abs(cv(0, 0, 0) - (-1 * 0.5 + 0.25 * 1.5 + 1 * 0.1)) < 1e-15);

    // gradients of every tensor with one, by finite differences; idx and pos are not perturbed
    const GradcheckResult gc = gradcheck(g);
    BOOST_TEST_MESSAGE(gc.report());
    BOOST_TEST(gc.entries.size() == 8u);  // x, s, b, cos, sin, cos1, sin1, cw
    BOOST_TEST(gc.max_rel_error < 1e-6);
}

BOOST_AUTO_TEST_CASE(every_op_through_the_command_line) {
    TempDir d;
    std::ofstream(d.path / "vocab.json") << vocabulary_graph().dump(1);
    for (const std::string cmd :
         {"check vocab.json", "run vocab.json --trace t1 --format text", "run vocab.json --dtype f32",
          "grad vocab.json --trace t2", "explain vocab.json -o vocab.md"}) {
        BOOST_TEST_CONTEXT("attngraph " << cmd) {
            const CliResult r = run_cli(cmd, d.path);
            BOOST_TEST(r.code == 0, r.err);
        }
    }
    // the text trace and explain show each op's formula
    const std::string trace = slurp(d.path / "t1" / "trace.txt");
    for (const std::string f :
         {"rope(heads (1x2x3x4), cos (4x2), sin (4x2), positions=pos (1x3))",
          "where(after (3x3), grid (2x3x3), same (3x3))", "(q_col (3x1) < kv_idx (3))", "relu(xn (2x3x4))",
          "sigmoid(xn (2x3x4))", "abs(xn (2x3x4))", "clip(xn (2x3x4), -0.5, 0.75)", "leaky_relu(xn (2x3x4), 0.2)",
          "softplus(xn (2x3x4))", "maximum(xn (2x3x4), sx (2x3x4))", "minimum(xn (2x3x4), s (4))",
          "gather(x (2x3x4), idx (2), axis=2)", "range(0, 3)", "e (4)^1.5", "max(x (2x3x4), axes=[1], keepdims=0)",
          "conv(x (2x3x4), cw (2x3x2))"})
        BOOST_TEST(trace.find(f) != std::string::npos, f << " not in the text trace:\n" << trace);
    const std::string md = slurp(d.path / "vocab.md");
    BOOST_TEST(md.find("`rope = rope(heads (1x2x3x4), cos (4x2), sin (4x2), positions=pos (1x3))`") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(docs_list_every_op) {
    const std::string doc = slurp(source_dir() / "docs" / "ops.md");
    for (const auto& name : OpRegistry::instance().names())
        BOOST_TEST(
            (doc.find("| `" + name + "`") != std::string::npos || doc.find(", `" + name + "`") != std::string::npos),
            name << " has no row in docs/ops.md");
}

BOOST_AUTO_TEST_SUITE_END()  // test_vocab_graph_file
