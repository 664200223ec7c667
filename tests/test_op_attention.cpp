// Attention (composite, ONNX opset 23): ONNX's own v1.22 conformance data
// (tests/data/onnx_attention/*.json, converted from onnx-node-tests by convert.py there) run
// through attention(); the nodes it adds, in ONNX's order; a plain-loop reference for GQA with
// a past and a boolean causal mask; gradients through every intermediate; bad inputs; the
// same conformance cases as graph files with one `Attention` node.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "graphs/mha.hpp"
#include "ops/attention.hpp"
#include "support/helpers.hpp"

using namespace attngraph;
namespace fs = std::filesystem;
namespace bdata = boost::unit_test::data;

namespace {

Tensor tensor_of(const nlohmann::json& t, DType dtype) {
    const Shape shape = t["shape"].get<Shape>();
    Tensor out = zeros(DType::f64, shape);
    double* d = out.as<double>().data();
    std::size_t i = 0;
    for (const auto& x : t["data"])
        d[i++] = x.is_string() ? (x == "NaN" ? NAN : x == "Infinity" ? INFINITY : -INFINITY) : x.get<double>();
    BOOST_REQUIRE(i == element_count(shape));
    return out.cast(dtype);
}

std::vector<std::string> conformance_cases() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(test::source_dir() / "tests" / "data" / "onnx_attention"))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

// Builds a graph of one Attention for an ONNX case; returns it and the ONNX outputs by our names.
struct ConformanceCase {
    Graph graph;
    std::map<std::string, Tensor> expected;  // value name in the graph -> ONNX output
};

ConformanceCase build_case(const std::string& name, DType dtype) {
    const auto doc =
        nlohmann::json::parse(test::slurp(test::source_dir() / "tests" / "data" / "onnx_attention" / (name + ".json")));
    GraphBuilder b(name, dtype);
    AttentionInputs in;
    auto input = [&](const char* slot) {
        return doc["inputs"].contains(slot) ? b.input(slot, tensor_of(doc["inputs"][slot], dtype)) : Value();
    };
    in.q = input("Q"), in.k = input("K"), in.v = input("V");
    in.attn_mask = input("attn_mask"), in.past_key = input("past_key"), in.past_value = input("past_value");
    AttentionAttrs a;
    const auto& attrs = doc["attrs"];
    if (attrs.contains("scale")) a.scale = attrs["scale"].get<double>();
    a.is_causal = attrs.value("is_causal", 0);
    a.softcap = attrs.value("softcap", 0.0);
    if (attrs.contains("q_num_heads")) a.q_num_heads = attrs["q_num_heads"].get<int>();
    if (attrs.contains("kv_num_heads")) a.kv_num_heads = attrs["kv_num_heads"].get<int>();
    a.qk_matmul_output_mode = attrs.value("qk_matmul_output_mode", 0);
    if (doc["inputs"].contains("attn_mask") && doc["inputs"]["attn_mask"]["boolean"].get<bool>())
        a.mask_type = "boolean";
    const AttentionOutputs out = attention("attn", in, a);
    ConformanceCase c;
    auto expect = [&](const char* slot, const Value& v) {
        if (!doc["outputs"].contains(slot)) return;
        BOOST_REQUIRE(!v.name().empty());
        b.output(v);
        c.expected[v.name()] = tensor_of(doc["outputs"][slot], DType::f64);
    };
    expect("Y", out.y);
    expect("present_key", out.present_key);
    expect("present_value", out.present_value);
    expect("qk_matmul_output", out.qk);
    c.graph = b.build();
    return c;
}

std::vector<std::string> node_names(const Graph& g) {
    std::vector<std::string> names;
    for (const auto& n : g.nodes()) names.push_back(n.name);
    return names;
}

}  // namespace

BOOST_DATA_TEST_CASE(onnx_conformance_cases, bdata::make(conformance_cases()) * bdata::make({0, 1}), name, f64) {
    if (name.find("softcap") != std::string::npos && !OpRegistry::instance().find("Tanh")) {
        // until the Tanh op is in the build, softcap is refused, clearly
        BOOST_CHECK_EXCEPTION(build_case(name, DType::f32), ShapeError, [](const ShapeError& e) {
            return std::string(e.what()).find("softcap needs the Tanh op") != std::string::npos;
        });
        return;
    }
    const ConformanceCase c = build_case(name, f64 ? DType::f64 : DType::f32);
    RunOptions o;
    o.keep_all = true;
    o.threads = 2;
    const RunResult r = run(c.graph, o);
    BOOST_TEST(!c.expected.empty());
    for (const auto& [value, want] : c.expected) {
        BOOST_TEST_CONTEXT(name << ": " << value) {
            const Tensor& got = r.at(c.graph, value);
            BOOST_TEST((got.shape() == want.shape()));
            BOOST_TEST(test::max_abs_diff(got, want) <= 2e-6);  // ONNX's data is float32
        }
    }
}

BOOST_AUTO_TEST_CASE(nodes_come_in_onnx_order) {
    const bool tanh = OpRegistry::instance().find("Tanh") != nullptr;
    const ConformanceCase c = build_case(
        tanh ? "attention_3d_with_past_and_present_qk_matmul_softcap" : "attention_4d_with_qk_matmul_softmax",
        DType::f32);
    const std::vector<std::string> names = node_names(c.graph);
    auto pos = [&](const std::string& n) {
        const auto it = std::find(names.begin(), names.end(), "attn." + n);
        BOOST_TEST_REQUIRE((it != names.end()), "attn." + n);
        return it - names.begin();
    };
    BOOST_TEST(pos("S_raw") < pos("S"));
    if (tanh) {
        BOOST_TEST(pos("S") < pos("S_capped"));
        BOOST_TEST(pos("S_capped") < pos("S_masked"));
        BOOST_TEST(pos("present_key") < pos("S_raw"));
    }
    BOOST_TEST(pos("S") < pos("S_masked"));
    BOOST_TEST(pos("S_masked") < pos("A"));
    BOOST_TEST(pos("A") < pos("O"));
}

namespace {

// Attention by plain loops in double (4-D inputs, GQA, a past, boolean keep mask (n, m),
// causal with offset = past): what ONNX's operator text says, written independently.
struct LoopCase {
    std::size_t B = 2, H = 4, G = 2, n = 3, past = 2, m_new = 3, dk = 4, dv = 5;
    double scale = 0.3;
};
std::vector<double> loop_attention(const LoopCase& c, const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const std::vector<double>& keep) {
    const std::size_t m = c.past + c.m_new, r = c.H / c.G;
    std::vector<double> y(c.B * c.H * c.n * c.dv, 0.0);
    for (std::size_t b = 0; b < c.B; ++b)
        for (std::size_t h = 0; h < c.H; ++h)
            for (std::size_t i = 0; i < c.n; ++i) {
                const std::size_t g = h / r;
                std::vector<double> s(m);
                std::vector<bool> kept(m);
                double mx = -INFINITY;
                for (std::size_t j = 0; j < m; ++j) {
                    double dot = 0;
                    for (std::size_t t = 0; t < c.dk; ++t)
                        dot += q[((b * c.H + h) * c.n + i) * c.dk + t] * k[((b * c.G + g) * m + j) * c.dk + t];
                    s[j] = c.scale * dot;
                    kept[j] = keep[i * m + j] != 0 && j <= i + c.past;
                    if (kept[j]) mx = std::max(mx, s[j]);
                }
                double sum = 0;
                for (std::size_t j = 0; j < m; ++j) sum += kept[j] ? std::exp(s[j] - mx) : 0.0;
                for (std::size_t j = 0; j < m; ++j) {
                    const double a = kept[j] ? std::exp(s[j] - mx) / sum : 0.0;
                    for (std::size_t t = 0; t < c.dv; ++t)
                        y[((b * c.H + h) * c.n + i) * c.dv + t] += a * v[((b * c.G + g) * m + j) * c.dv + t];
                }
            }
    return y;
}

std::vector<double> flat(const Tensor& t) {
    std::vector<double> out(t.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.at_flat(i);
    return out;
}

// A graph of one Attention with GQA, a past, a boolean mask and is_causal.
Graph loop_case_graph(const LoopCase& c, DType dtype, AttentionOutputs* outs = nullptr) {
    const std::size_t m = c.past + c.m_new;
    GraphBuilder b("gqa_past", dtype);
    AttentionInputs in;
    in.q = b.input("Q", graphs::random_tensor({c.B, c.H, c.n, c.dk}, dtype, 1));
    in.k = b.input("K", graphs::random_tensor({c.B, c.G, c.m_new, c.dk}, dtype, 2));
    in.v = b.input("V", graphs::random_tensor({c.B, c.G, c.m_new, c.dv}, dtype, 3));
    in.past_key = b.input("past_key", graphs::random_tensor({c.B, c.G, c.past, c.dk}, dtype, 4));
    in.past_value = b.input("past_value", graphs::random_tensor({c.B, c.G, c.past, c.dv}, dtype, 5));
    Tensor keep = zeros(DType::f64, {c.n, m});
    for (std::size_t e = 0; e < keep.size(); ++e) keep.as<double>().data()[e] = (e * 7) % 5 == 3 ? 0.0 : 1.0;
    in.attn_mask = b.input("attn_mask", keep.cast(dtype));
    AttentionAttrs a;
    a.scale = c.scale;
    a.is_causal = 1;
    a.mask_type = "boolean";
    const AttentionOutputs o = attention("attn", in, a);
    b.output(o.y);
    b.output(o.present_key);
    b.output(o.present_value);
    if (outs) *outs = o;
    return b.build();
}

}  // namespace

BOOST_DATA_TEST_CASE(gqa_with_past_and_boolean_causal_mask_matches_plain_loops, bdata::make({0, 1}), f64) {
    const LoopCase c;
    const Graph g = loop_case_graph(c, f64 ? DType::f64 : DType::f32);
    RunOptions o;
    o.keep_all = true;
    const RunResult r = run(g, o);
    const std::vector<double> pk = flat(*g.value(g.at("past_key")).data), nk = flat(*g.value(g.at("K")).data);
    const std::vector<double> pv = flat(*g.value(g.at("past_value")).data), nv = flat(*g.value(g.at("V")).data);
    // present = concat(past, new) along the sequence axis, by hand
    std::vector<double> k, v;
    for (std::size_t bg = 0; bg < c.B * c.G; ++bg) {
        k.insert(k.end(), pk.begin() + long(bg * c.past * c.dk), pk.begin() + long((bg + 1) * c.past * c.dk));
        k.insert(k.end(), nk.begin() + long(bg * c.m_new * c.dk), nk.begin() + long((bg + 1) * c.m_new * c.dk));
        v.insert(v.end(), pv.begin() + long(bg * c.past * c.dv), pv.begin() + long((bg + 1) * c.past * c.dv));
        v.insert(v.end(), nv.begin() + long(bg * c.m_new * c.dv), nv.begin() + long((bg + 1) * c.m_new * c.dv));
    }
    BOOST_TEST(flat(r.at(g, "attn.present_key")) == k, boost::test_tools::per_element());
    BOOST_TEST(flat(r.at(g, "attn.present_value")) == v, boost::test_tools::per_element());
    const std::vector<double> want =
        loop_attention(c, flat(*g.value(g.at("Q")).data), k, v, flat(*g.value(g.at("attn_mask")).data));
    const std::vector<double> got = flat(r.at(g, "attn.O"));
    BOOST_REQUIRE(got.size() == want.size());
    double diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::abs(got[i] - want[i]));
    BOOST_TEST(diff <= (f64 ? 1e-12 : 2e-6));
    BOOST_TEST((r.at(g, "attn.S_raw").shape() == Shape{c.B, c.H, c.n, c.past + c.m_new}));
}

BOOST_AUTO_TEST_CASE(every_intermediate_is_differentiable) {
    const Graph g = loop_case_graph(LoopCase{}, DType::f64);
    GradcheckOptions o;
    o.wrt = {"Q", "K", "V", "past_key", "past_value"};  // not the boolean mask
    const GradcheckResult r = gradcheck(g, o);
    BOOST_TEST(r.entries.size() == 5u);
    BOOST_TEST(r.max_rel_error < 1e-6, r.report());
    // an additive mask (a learned bias) gets a gradient too
    GraphBuilder b("additive", DType::f64);
    AttentionInputs in;
    in.q = b.input("Q", graphs::random_tensor({1, 2, 3, 4}, DType::f64, 1));
    in.k = b.input("K", graphs::random_tensor({1, 2, 5, 4}, DType::f64, 2));
    in.v = b.input("V", graphs::random_tensor({1, 2, 5, 4}, DType::f64, 3));
    in.attn_mask = b.param("bias", graphs::random_tensor({2, 3, 5}, DType::f64, 4));
    AttentionAttrs a;
    a.is_causal = 1;
    b.output(attention("attn", in, a).y);
    const GradcheckResult rb = gradcheck(b.build());
    BOOST_TEST(rb.entries.size() == 4u);
    BOOST_TEST(rb.max_rel_error < 1e-6, rb.report());
}

BOOST_AUTO_TEST_CASE(bad_inputs_name_node_op_and_shapes) {
    auto expect_error = [](const std::function<void(GraphBuilder&, AttentionInputs&, AttentionAttrs&)>& setup,
                           const std::vector<std::string>& parts) {
        GraphBuilder b("bad");
        AttentionInputs in;
        AttentionAttrs a;
        in.q = b.input("Q", graphs::random_tensor({2, 4, 3, 8}, DType::f32, 1));
        in.k = b.input("K", graphs::random_tensor({2, 2, 5, 8}, DType::f32, 2));
        in.v = b.input("V", graphs::random_tensor({2, 2, 5, 8}, DType::f32, 3));
        setup(b, in, a);
        try {
            attention("attn", in, a);
            BOOST_FAIL("no error");
        } catch (const ShapeError& e) {
            const std::string what = e.what();
            BOOST_TEST(what.find("node 'attn' (Attention)") != std::string::npos, what);
            for (const auto& p : parts) BOOST_TEST(what.find(p) != std::string::npos, what << " lacks " << p);
        }
    };
    // a mask that does not broadcast to the scores (2, 4, 3, 5)
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.attn_mask = b.input("M", graphs::random_tensor({3, 4}, DType::f32, 4));
        },
        {"attn_mask (3x4) does not broadcast", "(2x4x3x5)"});
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.attn_mask = b.input("M", graphs::random_tensor({3, 3, 5}, DType::f32, 4));
        },
        {"attn_mask (3x3x5)"});
    // q_num_heads not a multiple of kv_num_heads (4-D: the head axes; 3-D: the attributes)
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.k = b.input("K3", graphs::random_tensor({2, 3, 5, 8}, DType::f32, 5));
            in.v = b.input("V3", graphs::random_tensor({2, 3, 5, 8}, DType::f32, 6));
        },
        {"q_num_heads 4 is not a multiple of kv_num_heads 3", "K (2x3x5x8)"});
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs& a) {
            in.q = b.input("Q3", graphs::random_tensor({2, 3, 24}, DType::f32, 7));
            in.k = b.input("K3", graphs::random_tensor({2, 5, 12}, DType::f32, 8));
            in.v = b.input("V3", graphs::random_tensor({2, 5, 12}, DType::f32, 9));
            a.q_num_heads = 6, a.kv_num_heads = 4;
        },
        {"q_num_heads 6 is not a multiple of kv_num_heads 4", "Q (2x3x24)"});
    // 3-D inputs without head counts; head sizes that differ; a past that does not fit
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.q = b.input("Q3", graphs::random_tensor({2, 3, 24}, DType::f32, 7));
            in.k = b.input("K3", graphs::random_tensor({2, 5, 12}, DType::f32, 8));
            in.v = b.input("V3", graphs::random_tensor({2, 5, 12}, DType::f32, 9));
        },
        {"need the attributes q_num_heads and kv_num_heads"});
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.k = b.input("K6", graphs::random_tensor({2, 2, 5, 6}, DType::f32, 5));
        },
        {"different head sizes", "K (2x2x5x6)"});
    expect_error(
        [](GraphBuilder& b, AttentionInputs& in, AttentionAttrs&) {
            in.past_key = b.input("pk", graphs::random_tensor({2, 2, 4, 7}, DType::f32, 5));
            in.past_value = b.input("pv", graphs::random_tensor({2, 2, 4, 8}, DType::f32, 6));
        },
        {"past_key (2x2x4x7)"});
    expect_error([](GraphBuilder&, AttentionInputs&, AttentionAttrs& a) { a.qk_matmul_output_mode = 4; },
                 {"qk_matmul_output_mode 4"});
}

// The same cases as graph files with one `Attention` node (ops/attention_op.hpp): inputs in
// ONNX's order, the optional ones told apart by their count; "attn" stands for Y, and the
// expansion's nodes (attn.present_key, ...) are outputs by name.
BOOST_DATA_TEST_CASE(onnx_conformance_cases_as_graph_files, bdata::make(conformance_cases()), name) {
    const auto doc =
        nlohmann::json::parse(test::slurp(test::source_dir() / "tests" / "data" / "onnx_attention" / (name + ".json")));
    test::TempDir dir;
    nlohmann::json g = {{"name", name}, {"dtype", "f64"}, {"tensors", nlohmann::json::object()}};
    std::vector<std::string> inputs;
    for (const char* slot : {"Q", "K", "V", "attn_mask", "past_key", "past_value"}) {
        if (!doc["inputs"].contains(slot)) continue;
        save_npy(dir.path / (std::string(slot) + ".npy"), tensor_of(doc["inputs"][slot], DType::f64));
        g["tensors"][slot] = {{"kind", "input"}, {"npy", std::string(slot) + ".npy"}};
        inputs.push_back(slot);
    }
    nlohmann::json attrs = nlohmann::json::object();
    for (const char* a : {"scale", "is_causal", "softcap", "q_num_heads", "kv_num_heads", "qk_matmul_output_mode"})
        if (doc["attrs"].contains(a)) attrs[a] = doc["attrs"][a];
    if (doc["inputs"].contains("attn_mask") && doc["inputs"]["attn_mask"]["boolean"].template get<bool>())
        attrs["mask_type"] = "boolean";
    g["nodes"] = {{{"name", "attn"}, {"op", "Attention"}, {"inputs", inputs}, {"attrs", attrs}}};
    std::vector<std::string> outputs = {"attn"};
    if (doc["outputs"].contains("present_key")) outputs.push_back("attn.present_key");
    g["outputs"] = outputs;
    std::ofstream(dir.path / "g.json") << g.dump();

    const Graph graph = load_graph(dir.path / "g.json");
    const RunResult r = run(graph, RunOptions{});
    const Tensor want_y = tensor_of(doc["outputs"]["Y"], DType::f64);
    // "attn" names Y while the graph is built; the built graph names the value by its node
    const std::string y_name = graph.value(graph.outputs().at(0)).name;
    BOOST_TEST((y_name == "attn.O" || y_name == "attn.Y"), y_name);
    const Tensor& y = r.at(graph, y_name);
    BOOST_TEST((y.shape() == want_y.shape()));
    BOOST_TEST(test::max_abs_diff(y, want_y) <= 2e-6);
    if (doc["outputs"].contains("present_key"))
        BOOST_TEST(test::max_abs_diff(r.at(graph, "attn.present_key"),
                                      tensor_of(doc["outputs"]["present_key"], DType::f64)) <= 2e-6);
}

BOOST_AUTO_TEST_CASE(graph_file_attention_refuses_bad_input_counts) {
    test::TempDir dir;
    const nlohmann::json x = {{"kind", "input"}, {"shape", {1, 1, 2, 2}}, {"data", {{{{1, 0}, {0, 1}}}}}};
    const nlohmann::json g = {{"name", "two"},
                              {"tensors", {{"Q", x}, {"K", x}}},
                              {"nodes", {{{"name", "attn"}, {"op", "Attention"}, {"inputs", {"Q", "K"}}}}}};
    std::ofstream(dir.path / "g.json") << g.dump();
    BOOST_CHECK_EXCEPTION(load_graph(dir.path / "g.json"), GraphError, [](const GraphError& e) {
        const std::string m = e.what();
        return m.find("'attn' (Attention)") != std::string::npos && m.find("got 2") != std::string::npos;
    });
}
