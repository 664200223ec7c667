// Graph validation (every bad input of issue 2 point 3, from C++ and from JSON text, each a
// typed exception naming the node, the op and the shapes), node order in files, the C++
// builder against the file, with_tensors, graph_to_json round trips, multi-output names.
#include <algorithm>
#include <fstream>
#include <random>

#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/trace.hpp"
#include "graphs/mha.hpp"
#include "ops/common.hpp"
#include "engine/builder.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_graph)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {

json seed_doc() {
    std::ifstream in(seed_graph());
    return json::parse(in);
}

json& node_of(json& doc, const std::string& name) {
    for (auto& n : doc["nodes"])
        if (n["name"] == name) return n;
    BOOST_FAIL("no node " + name);
    throw;
}

Graph parse(const json& doc, const std::string& origin = "bad.json") {
    return parse_graph(doc.dump(), seed_graph().parent_path(), origin);
}

// Runs f, expects exactly an E (not a sibling type), a one-line message holding every part.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
    try {
        f();
        BOOST_ERROR("no exception; expected one mentioning " << parts.at(0));
    } catch (const E& e) {
        const std::string msg = e.what();
        BOOST_TEST_MESSAGE("  " << msg);
        for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' missing in: " << msg);
        BOOST_TEST(msg.find('\n') == std::string::npos, "not one line: " << msg);
    } catch (const std::exception& e) {
        BOOST_ERROR("wrong exception type: " << e.what());
    }
}

// Everything that defines a graph, by name: kind, shape, op, inputs, attributes; outputs.
json canonical(const Graph& g) {
    json c;
    c["name"] = g.name();
    c["dtype"] = to_string(g.dtype());
    c["tokens"] = g.tokens();
    for (const auto& v : g.values()) {
        json& e = c["values"][v.name];
        e["kind"] = to_string(v.kind);
        e["shape"] = v.shape;
        if (v.data) e["data"] = tensor_to_json(*v.data);
    }
    for (const auto& n : g.nodes()) {
        json& e = c["nodes"][n.name];
        e["op"] = n.op->name;
        for (int id : n.inputs) e["inputs"].push_back(g.value(id).name);
        e["attrs"] = n.op->attrs_to_json(n.attrs);
    }
    for (int id : g.outputs()) c["outputs"].push_back(g.value(id).name);
    return c;
}

void check_topological(const Graph& g) {
    for (std::size_t i = 0; i < g.nodes().size(); ++i)
        for (int id : g.nodes()[i].inputs) {
            const int p = g.value(id).producer;
            BOOST_TEST(p < static_cast<int>(i), g.nodes()[i].name << " comes before its input " << g.value(id).name);
        }
}

void check_same_results(const Graph& a, const Graph& b) {
    RunOptions o;
    o.keep_all = true;
    const RunResult ra = run(a, o), rb = run(b, o);
    for (const auto& v : a.values()) BOOST_TEST((ra.at(a, v.name) == rb.at(b, v.name)), "value " << v.name);
}

}  // namespace

// ---- bad graph files -----------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(bad_json)

BOOST_AUTO_TEST_CASE(unknown_op) {
    json doc = seed_doc();
    node_of(doc, "head1.S")["op"] = "Scal";
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "node 'head1.S'", "unknown op 'Scal'", "Scale"});
}

BOOST_AUTO_TEST_CASE(unknown_attribute) {
    json doc = seed_doc();
    node_of(doc, "head1.S")["attrs"]["facter"] = 2;
    expect_error<GraphError>([&] { parse(doc); },
                             {"bad.json", "node 'head1.S' (Scale)", "unknown attribute 'facter'", "factor"});
    doc = seed_doc();
    node_of(doc, "head1.Q")["attrs"] = {{"bias", true}};
    expect_error<GraphError>([&] { parse(doc); }, {"node 'head1.Q' (Linear)", "unknown attribute 'bias'"});
}

BOOST_AUTO_TEST_CASE(missing_required_attribute) {
    json doc = seed_doc();
    node_of(doc, "head2.S").erase("attrs");
    expect_error<GraphError>([&] { parse(doc); },
                             {"bad.json", "node 'head2.S' (Scale)", "missing required attribute 'factor'"});
}

BOOST_AUTO_TEST_CASE(wrong_attribute_type) {
    json doc = seed_doc();
    node_of(doc, "head1.A")["attrs"]["axis"] = "last";
    expect_error<GraphError>([&] { parse(doc); },
                             {"node 'head1.A' (Softmax)", "attribute 'axis'", "wrong type", "\"last\""});
    doc = seed_doc();
    node_of(doc, "head1.A")["attrs"]["axis"] = -1.5;
    expect_error<GraphError>([&] { parse(doc); }, {"node 'head1.A' (Softmax)", "attribute 'axis'"});
    doc = seed_doc();
    node_of(doc, "head1.S")["attrs"]["factor"] = "0.7";
    expect_error<GraphError>([&] { parse(doc); }, {"node 'head1.S' (Scale)", "attribute 'factor'"});
    doc = seed_doc();
    node_of(doc, "head1.KT")["attrs"] = {{"perm", {1.0, 0.5}}};
    expect_error<GraphError>([&] { parse(doc); }, {"node 'head1.KT' (Transpose)", "attribute 'perm'"});
    doc = seed_doc();
    node_of(doc, "O_concat")["attrs"] = json::array({-1});
    expect_error<GraphError>([&] { parse(doc); }, {"node 'O_concat' (Concat)", "\"attrs\" must be an object"});
}

BOOST_AUTO_TEST_CASE(missing_input) {
    json doc = seed_doc();
    node_of(doc, "head1.Q")["inputs"][0] = "Xx";
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "node 'head1.Q' (Linear)", "input 'Xx'"});
    doc = seed_doc();
    node_of(doc, "Y")["inputs"][0] = "O_concat:1";
    expect_error<GraphError>([&] { parse(doc); }, {"node 'Y' (Linear)", "'O_concat:1'"});
    doc = seed_doc();
    doc["outputs"] = {"Z"};
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "output 'Z'"});
}

BOOST_AUTO_TEST_CASE(duplicate_names) {
    // tensor / tensor: the same key twice in "tensors" (nlohmann keeps the last one silently)
    std::string text = seed_doc().dump();
    const std::string wq = "\"head1.Wq\":";
    const auto at = text.find(wq);
    BOOST_TEST_REQUIRE(at != std::string::npos);
    text.insert(at, "\"head1.Wq\":{\"kind\":\"param\",\"data\":[[9,9]]},");
    expect_error<GraphError>([&] { parse_graph(text, seed_graph().parent_path(), "dup.json"); },
                             {"dup.json", "duplicate", "'head1.Wq'", "\"tensors\""});
    // node / node
    json doc = seed_doc();
    json extra = node_of(doc, "head1.S");
    doc["nodes"].push_back(extra);
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "duplicate node name 'head1.S'"});
    // tensor / node
    doc = seed_doc();
    doc["tensors"]["head1.K"] = {{"kind", "param"}, {"data", {{1.0, 2.0}}}};
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "duplicate name 'head1.K'", "tensor and a node"});
    // the same key twice in one node object
    text =
        R"({"tensors": {"X": {"data": [1, 2]}}, "nodes": [{"name": "a", "op": "Softmax", "op": "Scale", "inputs": ["X"]}]})";
    expect_error<GraphError>([&] { parse_graph(text, ".", "dup2.json"); },
                             {"dup2.json", "duplicate key 'op'", "\"nodes\""});
}

BOOST_AUTO_TEST_CASE(cycles) {
    json doc = seed_doc();
    node_of(doc, "head1.KT")["inputs"] = {"head1.O"};  // KT -> S_raw -> S -> A -> O -> KT
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "cycle", "head1.KT (Transpose)", "head1.S_raw (MatMul)",
                                                   "head1.S (Scale)", "head1.A (Softmax)", "head1.O (MatMul)"});
    doc = seed_doc();
    node_of(doc, "head2.S")["inputs"] = {"head2.S"};
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "cycle", "head2.S (Scale) -> head2.S (Scale)"});
}

BOOST_AUTO_TEST_CASE(wrong_number_of_inputs) {
    json doc = seed_doc();
    node_of(doc, "head1.S")["inputs"] = {"head1.S_raw", "head1.S_raw"};
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "node 'head1.S' (Scale)", "takes 1 inputs, got 2"});
    doc = seed_doc();
    node_of(doc, "head1.Q")["inputs"] = {"X"};
    expect_error<GraphError>([&] { parse(doc); }, {"node 'head1.Q' (Linear)", "takes 2 to 3 inputs, got 1"});
    doc = seed_doc();
    node_of(doc, "O_concat").erase("inputs");
    expect_error<GraphError>([&] { parse(doc); }, {"node 'O_concat' (Concat)", "at least 1", "got 0"});
}

BOOST_AUTO_TEST_CASE(shape_mismatch) {
    json doc = seed_doc();
    node_of(doc, "head1.S_raw")["inputs"] = {"head1.Q", "head1.K"};
    expect_error<ShapeError>([&] { parse(doc); },
                             {"bad.json", "node 'head1.S_raw' (MatMul)", "head1.Q (3x2)", "head1.K (3x2)"});
    doc = seed_doc();
    doc["tensors"]["head2.Wk"]["shape"] = {3, 2};
    doc["tensors"]["head2.Wk"]["data"] = {{1, 0}, {0, 1}, {0, 0}};
    expect_error<ShapeError>([&] { parse(doc); }, {"node 'head2.K' (Linear)", "X (3x4)", "head2.Wk (3x2)"});
    doc = seed_doc();
    node_of(doc, "O_concat")["attrs"]["axis"] = 0;  // fine: (6x2)
    node_of(doc, "Y")["inputs"][0] = "O_concat";
    expect_error<ShapeError>([&] { parse(doc); }, {"node 'Y' (Linear)", "O_concat (6x2)", "Wo (4x4)"});
    doc = seed_doc();
    doc["tensors"]["bo"]["data"] = {{0, 0, 0}};
    doc["tensors"]["bo"]["shape"] = {1, 3};
    expect_error<ShapeError>([&] { parse(doc); }, {"node 'Y' (Linear)", "bo (1x3)"});
}

BOOST_AUTO_TEST_CASE(file_level_errors) {
    expect_error<GraphError>([&] { parse_graph("{\"tensors\": {", ".", "trunc.json"); },
                             {"trunc.json", "malformed JSON"});
    expect_error<GraphError>([&] { parse_graph("[1, 2]", ".", "list.json"); }, {"list.json", "JSON object"});
    json doc = seed_doc();
    doc["nodez"] = json::array();
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "unknown key 'nodez'"});
    doc = seed_doc();
    doc["tensors"]["X"]["dtype"] = "f32";
    expect_error<GraphError>([&] { parse(doc); }, {"tensor 'X'", "unknown key 'dtype'"});
    doc = seed_doc();
    node_of(doc, "Y")["attr"] = json::object();
    expect_error<GraphError>([&] { parse(doc); }, {"nodes[17]", "unknown key 'attr'"});
    doc = seed_doc();
    doc["tensors"]["X"]["data"] = {{1, 0, 0}, {0, 1, 1, 0}, {1, 1, 0, 0}};
    expect_error<GraphError>([&] { parse(doc); }, {"tensor 'X'", "\"data\" does not agree with shape (3x4)"});
    doc = seed_doc();
    doc["tensors"]["X"]["data"][1][2] = "one";
    expect_error<GraphError>([&] { parse(doc); }, {"tensor 'X'", "\"one\""});
    doc = seed_doc();
    doc["tensors"]["X"]["npy"] = "x.npy";
    expect_error<GraphError>([&] { parse(doc); }, {"tensor 'X'", "exactly one of"});
    doc = seed_doc();
    doc["tensors"]["X"].erase("data");
    doc["tensors"]["X"]["npy"] = "no_such_file.npy";
    expect_error<IoError>([&] { parse(doc); }, {"bad.json", "tensor 'X'", "no_such_file.npy"});
    doc = seed_doc();
    doc["tensors"]["X"]["kind"] = "weight";
    expect_error<GraphError>([&] { parse(doc); }, {"tensor 'X'", "\"kind\""});
    doc = seed_doc();
    doc["dtype"] = "f16";
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "f16"});
    doc = seed_doc();
    doc["name"] = 7;
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "\"name\""});
    doc = seed_doc();
    node_of(doc, "Y")["name"] = "Y out";
    expect_error<GraphError>([&] { parse(doc); }, {"bad.json", "invalid node name 'Y out'"});
    doc = seed_doc();
    doc["tensors"]["../X"] = doc["tensors"]["X"];
    expect_error<GraphError>([&] { parse(doc); }, {"invalid tensor name '../X'"});
    expect_error<IoError>([&] { load_graph("/no/such/graph.json"); }, {"/no/such/graph.json"});
}

BOOST_AUTO_TEST_SUITE_END()

// ---- bad graphs from C++ ---------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(bad_builder)

BOOST_AUTO_TEST_CASE(eager_interface) {
    GraphBuilder g("cpp");
    Value x = g.input("X", Tensor(literal<float>({3, 4}, std::vector<double>(12, 1.0))));
    Value w = g.param("W", Tensor(literal<float>({4, 2}, std::vector<double>(8, 1.0))));
    // unknown op
    expect_error<GraphError>(
        [&] {
            g.node("Scal", {x}, op_attrs("Scale", {{"factor", 1}}), "s");
        },
        {"node 's'", "unknown op 'Scal'"});
    // attributes: unknown, missing, wrong type (the parser every op shares), and a struct of another op
    const OpDef& scale_def = OpRegistry::instance().get("Scale");
    expect_error<GraphError>(
        [&] {
            scale_def.parse_attrs({{"factor", 1}, {"facter", 1}}, "node 's' (Scale)");
        },
        {"node 's' (Scale)", "unknown attribute 'facter'"});
    expect_error<GraphError>([&] { scale_def.parse_attrs(json::object(), "node 's' (Scale)"); },
                             {"node 's' (Scale)", "missing required attribute 'factor'"});
    expect_error<GraphError>(
        [&] {
            scale_def.parse_attrs({{"factor", "x"}}, "node 's' (Scale)");
        },
        {"node 's' (Scale)", "attribute 'factor' has the wrong type"});
    expect_error<GraphError>([&] { g.node("Scale", {x}, op_attrs("Softmax"), "s"); },
                             {"node 's' (Scale)", "attributes of the wrong type"});
    // duplicate names: tensor/tensor, node/node, tensor/node
    expect_error<GraphError>([&] { g.param("X", Tensor(literal<float>({1}, {1}))); }, {"duplicate name 'X'"});
    Value a = softmax(x).named("a");
    expect_error<GraphError>([&] { softmax(x).named("a"); }, {"duplicate name 'a'"});
    expect_error<GraphError>([&] { softmax(x).named("W"); }, {"duplicate name 'W'"});
    expect_error<GraphError>([&] { g.input("a", Tensor(literal<float>({1}, {1}))); }, {"duplicate name 'a'"});
    expect_error<GraphError>([&] { g.input("bad name", Tensor(literal<float>({1}, {1}))); },
                             {"invalid name 'bad name'"});
    // a node that already has consumers keeps its name
    Value b = scale(a, 2);
    expect_error<GraphError>([&] { a.named("renamed"); }, {"'a'", "consumers"});
    // arity
    expect_error<GraphError>(
        [&] {
            g.node("Scale", {x, x}, op_attrs("Scale", {{"factor", 1}}), "s2");
        },
        {"node 's2' (Scale)", "takes 1 inputs, got 2"});
    expect_error<GraphError>([&] { g.node("Linear", {x}, op_attrs("Linear"), "l"); },
                             {"node 'l' (Linear)", "takes 2 to 3 inputs, got 1"});
    // shape mismatch at once, naming the node, the op and both operands
    expect_error<ShapeError>([&] { matmul(x, x).named("never"); }, {"(MatMul)", "X (3x4)", "inner dimensions"});
    expect_error<ShapeError>(
        [&] {
            g.node("MatMul", {x, b}, op_attrs("MatMul"), "mm");
        },
        {"node 'mm' (MatMul)", "X (3x4)", "(3x4)"});
    expect_error<ShapeError>([&] { linear(w, x); }, {"(Linear)", "W (4x2)", "X (3x4)"});
    // a value of another builder
    GraphBuilder other("other");
    Value y = other.input("Y", Tensor(literal<float>({4, 3}, std::vector<double>(12, 1.0))));
    expect_error<GraphError>([&] { matmul(x, y); }, {"another graph"});
    // what was added is still a valid graph
    g.output(b);
    const Graph graph = g.build();
    BOOST_TEST(graph.find("a") >= 0);
    BOOST_TEST(graph.value(graph.outputs().at(0)).name == b.name());
}

BOOST_AUTO_TEST_CASE(deferred_interface) {
    auto base = [] {
        GraphBuilder g("deferred");
        g.add_tensor("X", ValueKind::input, Tensor(literal<float>({2, 3}, {1, 2, 3, 4, 5, 6})));
        return g;
    };
    const NodeAttrs f1 = op_attrs("Scale", {{"factor", 1}});
    {
        GraphBuilder g = base();
        g.add_node("s", "Scal", {"X"}, f1);
        expect_error<GraphError>([&] { g.build(); }, {"node 's'", "unknown op 'Scal'"});
    }
    {
        GraphBuilder g = base();
        g.add_node("s", "Scale", {"nope"}, f1);
        expect_error<GraphError>([&] { g.build(); }, {"node 's' (Scale)", "input 'nope'"});
    }
    {
        GraphBuilder g = base();
        g.add_tensor("X", ValueKind::param, Tensor(literal<float>({1}, {1})));
        g.add_node("s", "Scale", {"X"}, f1);
        expect_error<GraphError>([&] { g.build(); }, {"duplicate tensor name 'X'"});
    }
    {
        GraphBuilder g = base();
        g.add_node("s", "Scale", {"X"}, f1);
        g.add_node("s", "Softmax", {"X"}, op_attrs("Softmax"));
        expect_error<GraphError>([&] { g.build(); }, {"duplicate node name 's'"});
    }
    {
        GraphBuilder g = base();
        g.add_node("X", "Scale", {"X"}, f1);
        expect_error<GraphError>([&] { g.build(); }, {"duplicate name 'X'", "tensor and a node"});
    }
    {
        GraphBuilder g = base();
        g.add_node("a", "Scale", {"c"}, f1);
        g.add_node("b", "Scale", {"a"}, f1);
        g.add_node("c", "Scale", {"b"}, f1);
        g.add_node("d", "Scale", {"X"}, f1);
        expect_error<GraphError>([&] { g.build(); }, {"cycle", "a (Scale) -> b (Scale) -> c (Scale) -> a (Scale)"});
    }
    {
        GraphBuilder g = base();
        g.add_node("self", "Softmax", {"self"}, op_attrs("Softmax"));
        expect_error<GraphError>([&] { g.build(); }, {"cycle", "self (Softmax) -> self (Softmax)"});
    }
    {
        GraphBuilder g = base();
        g.add_node("mm", "MatMul", {"X", "X"}, op_attrs("MatMul"));
        expect_error<ShapeError>([&] { g.build(); }, {"node 'mm' (MatMul)", "X (2x3)", "inner dimensions"});
    }
    {
        GraphBuilder g = base();
        g.add_node("cat", "Concat", {}, op_attrs("Concat"));
        expect_error<GraphError>([&] { g.build(); }, {"node 'cat' (Concat)", "at least 1", "got 0"});
    }
    {
        GraphBuilder g = base();
        expect_error<GraphError>([&] { g.build(); }, {"no nodes"});
    }
}

BOOST_AUTO_TEST_SUITE_END()

// ---- same graph, different routes ------------------------------------------------------

BOOST_AUTO_TEST_SUITE(equivalence)

BOOST_AUTO_TEST_CASE(node_order_in_the_file_does_not_matter) {
    const json doc = seed_doc();
    const Graph ref = parse(doc);
    check_topological(ref);
    std::mt19937 rng(3);
    for (int trial = 0; trial < 6; ++trial) {
        json shuffled = doc;
        auto& nodes = shuffled["nodes"];
        if (trial == 0)
            std::reverse(nodes.begin(), nodes.end());
        else
            std::shuffle(nodes.begin(), nodes.end(), rng);
        BOOST_TEST_CONTEXT("order " << trial << ", first node " << nodes[0]["name"]) {
            const Graph g = parse(shuffled);
            check_topological(g);
            BOOST_TEST(canonical(g) == canonical(ref));
            check_same_results(g, ref);
        }
    }
}

BOOST_AUTO_TEST_CASE(builder_and_file_give_the_same_ir) {
    const Graph file = load_graph(seed_graph());
    const Graph code = graphs::build_mha(graphs::seed_mha_config(), graphs::seed_mha_weights());
    BOOST_TEST(canonical(file) == canonical(code));
    BOOST_TEST(graph_to_json(file) == graph_to_json(code));
    for (std::size_t i = 0; i < file.nodes().size(); ++i) {
        BOOST_TEST(file.nodes()[i].name == code.nodes()[i].name);
        BOOST_TEST(file.formula(file.nodes()[i]) == code.formula(code.nodes()[i]));
    }
    BOOST_TEST(file.formula(file.nodes()[static_cast<std::size_t>(file.value(file.at("head1.S_raw")).producer)]) ==
               "head1.Q (3x2) · head1.KT (2x3)");
    check_same_results(file, code);
    // and in f64
    LoadOptions lo;
    lo.dtype = DType::f64;
    auto config = graphs::seed_mha_config();
    config.dtype = DType::f64;
    check_same_results(load_graph(seed_graph(), lo), graphs::build_mha(config, graphs::seed_mha_weights()));
}

BOOST_AUTO_TEST_CASE(graph_to_json_round_trip) {
    for (DType dtype : {DType::f32, DType::f64}) {
        BOOST_TEST_CONTEXT(to_string(dtype)) {
            LoadOptions lo;
            lo.dtype = dtype;
            const Graph g = load_graph(seed_graph(), lo);
            const json j = graph_to_json(g);
            const Graph back = parse_graph(j.dump(), ".", "round.json");
            BOOST_TEST(graph_to_json(back) == j);
            BOOST_TEST(canonical(back) == canonical(g));
            check_same_results(g, back);
            // with the tensors written as .npy next to the graph file
            TempDir dir;
            std::filesystem::create_directories(dir.path / "weights");
            const json with_npy = graph_to_json(g, dir.path / "weights", dir.path);
            BOOST_TEST(with_npy["tensors"]["Wo"]["npy"] == "weights/Wo.npy");
            std::ofstream(dir.path / "g.json") << with_npy.dump(2);
            const Graph from_npy = load_graph(dir.path / "g.json");
            BOOST_TEST(canonical(from_npy) == canonical(g));
            check_same_results(g, from_npy);
        }
    }
    // a random larger graph with 3-D X and non-finite data survives too
    graphs::MhaConfig c;
    c.seq = 5;
    c.d_model = 6;
    c.heads = 3;
    c.batch = 2;
    c.dtype = DType::f64;
    auto w = graphs::random_mha_weights(c);
    w.wo.as<double>()(0, 0) = std::numeric_limits<double>::infinity();
    w.bo.as<double>()(0, 1) = std::nan("");
    const Graph g = graphs::build_mha(c, w);
    const json j = graph_to_json(g);
    BOOST_TEST(j["tensors"]["Wo"]["data"][0][0] == "Infinity");
    BOOST_TEST(j["tensors"]["bo"]["data"][0][1] == "NaN");
    const Graph back = parse_graph(j.dump(), ".", "random.json");
    BOOST_TEST(graph_to_json(back).dump() == j.dump());
}

BOOST_AUTO_TEST_CASE(with_tensors_another_sequence_length) {
    const Graph seed = load_graph(seed_graph());
    // five tokens: the seed's three and two more
    const std::vector<double> x5 = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0.5, -1, 2, 0, 0, 0, 1, 1};
    const Graph g = seed.with_tensors({{"X", Tensor(literal<float>({5, 4}, x5))}});
    BOOST_TEST((g.value(g.at("X")).shape == Shape{5, 4}));
    BOOST_TEST((g.value(g.at("head1.Q")).shape == Shape{5, 2}));
    BOOST_TEST((g.value(g.at("head1.KT")).shape == Shape{2, 5}));
    BOOST_TEST((g.value(g.at("head2.A")).shape == Shape{5, 5}));
    BOOST_TEST((g.value(g.at("O_concat")).shape == Shape{5, 4}));
    BOOST_TEST((g.value(g.at("Y")).shape == Shape{5, 4}));
    BOOST_TEST(g.formula(g.nodes()[static_cast<std::size_t>(g.value(g.at("head1.S_raw")).producer)]) ==
               "head1.Q (5x2) · head1.KT (2x5)");
    BOOST_TEST((seed.value(seed.at("Y")).shape == Shape{3, 4}));  // the original is unchanged
    // the same as a file that holds the five rows
    json doc = seed_doc();
    doc["tensors"]["X"]["shape"] = {5, 4};
    doc["tensors"]["X"]["data"] = {{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}, {0.5, -1, 2, 0}, {0, 0, 1, 1}};
    const Graph file5 = parse(doc);
    check_same_results(g, file5);
    const RunResult r = run(g, {});
    BOOST_TEST((r.at(g, "Y").shape() == Shape{5, 4}));
    // row 5 = [0,0,1,1]: head1.Q = x·Wq = [0, 0], so head1.A's last row is uniform, 1/5 each
    RunOptions keep;
    keep.keep_all = true;
    const RunResult rk = run(g, keep);
    for (std::size_t j = 0; j < 5; ++j) BOOST_TEST(std::abs(rk.at(g, "head1.A").at_flat(20 + j) - 0.2) < 1e-7);

    // an f64 replacement is converted to the graph's dtype
    const Graph g64 = seed.with_tensors({{"X", Tensor(literal<double>({5, 4}, x5))}});
    BOOST_TEST((g64.value(g64.at("X")).data->dtype() == DType::f32));
    check_same_results(g, g64);
    // the seed's own X again gives the seed
    const Graph same = seed.with_tensors({{"X", *seed.value(seed.at("X")).data}});
    check_same_results(same, seed);

    expect_error<ShapeError>(
        [&] {
            seed.with_tensors({{"X", Tensor(literal<float>({5, 3}, std::vector<double>(15)))}});
        },
        {"node 'head1.Q' (Linear)", "X (5x3)", "head1.Wq (4x2)"});
    expect_error<ShapeError>(
        [&] {
            seed.with_tensors({{"head1.bq", Tensor(literal<float>({1, 3}, std::vector<double>(3)))}});
        },
        {"node 'head1.Q' (Linear)", "head1.bq (1x3)"});
    expect_error<GraphError>(
        [&] {
            seed.with_tensors({{"head1.A", Tensor(literal<float>({3, 3}, std::vector<double>(9)))}});
        },
        {"'head1.A'", "node"});
    expect_error<GraphError>(
        [&] {
            seed.with_tensors({{"Q", Tensor(literal<float>({3, 3}, std::vector<double>(9)))}});
        },
        {"'Q'", "seed_mha"});
}

BOOST_AUTO_TEST_CASE(with_dtype_converts_every_tensor) {
    const Graph seed = load_graph(seed_graph());
    const Graph g64 = seed.with_dtype(DType::f64);
    BOOST_TEST((g64.dtype() == DType::f64));
    BOOST_TEST((seed.dtype() == DType::f32));
    for (const auto& v : g64.values())
        if (v.data) {
            BOOST_TEST((v.data->dtype() == DType::f64), v.name);
            BOOST_TEST(max_abs_diff(*v.data, *seed.value(seed.at(v.name)).data) == 0.0, v.name);
        }
    RunOptions o;
    o.keep_all = true;
    const RunResult r = run(g64, o);
    for (const auto& [name, rows] : seed_values().items())
        BOOST_TEST(max_abs_diff(r.at(g64, name), rows) <= 2e-6, name);
    BOOST_TEST((r.at(g64, "Y").dtype() == DType::f64));
    check_same_results(g64.with_dtype(DType::f32), seed);
}

BOOST_AUTO_TEST_CASE(outputs_default_to_the_unread_node_outputs) {
    json doc = seed_doc();
    doc.erase("outputs");
    const Graph g = parse(doc);
    BOOST_TEST_REQUIRE(g.outputs().size() == 1u);
    BOOST_TEST(g.value(g.outputs()[0]).name == "Y");
    doc["outputs"] = {"head1.A", "Y"};
    const Graph g2 = parse(doc);
    BOOST_TEST(g2.outputs().size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- multi-output nodes ------------------------------------------------------------------

namespace {
// Splits the last axis into two halves: x (..., 2m) -> (..., m), (..., m).
struct SplitAttrs {};
}  // namespace
BOOST_AUTO_TEST_SUITE_END()  // Hana adapts structs in the global namespace only
BOOST_HANA_ADAPT_STRUCT(test_graph::SplitAttrs);
BOOST_AUTO_TEST_SUITE(test_graph)
namespace {
struct Split2 {
    static constexpr const char* name = "TestSplit2";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SplitAttrs;
    static std::vector<Shape> infer_shape(const Attrs&, const std::vector<Shape>& in) {
        if (in[0].empty() || in[0].back() % 2)
            throw ShapeError("last axis must be even, got (" + shape_str(in[0]) + ")");
        Shape h = in[0];
        h.back() /= 2;
        return {h, h};
    }
    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "split(" + v[0] + ")"; }
    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const std::size_t m = out[0]->shape().back(), rows = out[0]->size() / (m ? m : 1);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = 0; j < m; ++j) {
                out[0]->data()[r * m + j] = in[0]->data()[r * 2 * m + j];
                out[1]->data()[r * m + j] = in[0]->data()[r * 2 * m + m + j];
            }
    }
};
void register_split() {
    static const bool once = [] {
        OpRegistry::instance().add<Split2>();
        return true;
    }();
    (void)once;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(multi_output)

BOOST_AUTO_TEST_CASE(names_from_json) {
    register_split();
    const std::string text = R"({
      "name": "split",
      "tensors": {"X": {"kind": "input", "data": [[1, 2, 3, 4], [5, 6, 7, 8]]}},
      "nodes": [
        {"name": "sum", "op": "Concat", "inputs": ["sp:1", "sp:0"], "attrs": {"axis": 0}},
        {"name": "sp", "op": "TestSplit2", "inputs": ["X"]}
      ],
      "outputs": ["sum", "sp:1"]
    })";
    const Graph g = parse_graph(text, ".", "split.json");
    BOOST_TEST(g.find("sp") < 0);
    BOOST_TEST((g.value(g.at("sp:0")).shape == Shape{2, 2}));
    BOOST_TEST(g.value(g.at("sp:1")).output_index == 1);
    RunOptions o;
    o.trace = true;
    const RunResult r = run(g, o);
    // sp:0 = [[1,2],[5,6]], sp:1 = [[3,4],[7,8]]; sum = sp:1 over sp:0
    check_close(r.at(g, "sum").as<float>(), {4, 2}, {3, 4, 7, 8, 1, 2, 5, 6}, 0);
    check_close(r.at(g, "sp:1").as<float>(), {2, 2}, {3, 4, 7, 8}, 0);
    const Trace t = make_trace(g, r);
    BOOST_TEST_REQUIRE(t.find("sp:0") != nullptr);
    BOOST_TEST(t.find("sp:0")->op == "TestSplit2");
    BOOST_TEST(t.find("sum")->formula == "concat(sp:1 (2x2), sp:0 (2x2), axis=0)");
    TempDir dir;
    write_trace(t, dir.path / "trace", TraceFormat::npy, false);
    BOOST_TEST((load_npy(dir.path / "trace" / "sp:1.npy") == r.at(g, "sp:1")));
    // round trip
    check_same_results(g, parse_graph(graph_to_json(g).dump(), ".", "again.json"));

    // a plain name for a multi-output node, or an output that does not exist
    json doc = json::parse(text);
    doc["nodes"][0]["inputs"] = {"sp", "sp:0"};
    expect_error<GraphError>([&] { parse_graph(doc.dump(), ".", "split.json"); },
                             {"node 'sum' (Concat)", "'sp'", "several outputs", "'sp:k'"});
    doc = json::parse(text);
    doc["nodes"][0]["inputs"] = {"sp:2", "sp:0"};
    expect_error<GraphError>([&] { parse_graph(doc.dump(), ".", "split.json"); }, {"node 'sum' (Concat)", "'sp:2'"});
    doc = json::parse(text);
    doc["outputs"] = {"sp"};
    expect_error<GraphError>([&] { parse_graph(doc.dump(), ".", "split.json"); }, {"output 'sp'", "'sp:k'"});
    doc = json::parse(text);
    doc["tensors"]["X"]["data"] = {{1, 2, 3}};
    expect_error<ShapeError>([&] { parse_graph(doc.dump(), ".", "split.json"); },
                             {"node 'sp' (TestSplit2)", "X (1x3)"});
}

BOOST_AUTO_TEST_CASE(names_from_cpp) {
    register_split();
    GraphBuilder g("split_cpp", DType::f64);
    Value x = g.input("X", Tensor(literal<double>({1, 4}, {1, 2, 3, 4})));
    Value sp = g.node<Split2>({x}, {}, "sp");
    BOOST_TEST((sp[0].shape() == Shape{1, 2}));
    BOOST_TEST((sp[1].shape() == Shape{1, 2}));
    expect_error<GraphError>([&] { sp.shape(); }, {"'sp'", "2 outputs"});
    expect_error<GraphError>([&] { sp[2].shape(); }, {"'sp'", "no output 2"});
    g.output(matmul(transpose(sp[0]), sp[1]).named("outer"));
    const Graph graph = g.build();
    const RunResult r = run(graph, {});
    // [1,2]ᵀ·[3,4] = [[3,4],[6,8]]
    check_close(r.at(graph, "outer").as<double>(), {2, 2}, {3, 4, 6, 8}, 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_graph
