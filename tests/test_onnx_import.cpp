// ONNX import through the CLI: a torch-style model (names like "/attn/MatMul_output_0", shape
// arithmetic to fold) runs with its values checked against a plain-loop reference; `check`
// prints the name map; `import` writes a graph file; and every kind of bad input gives one
// `error:` line naming what is wrong. The models are written here with the ONNX project's
// protobuf classes.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <onnx/onnx_pb.h>

#include "engine/npy.hpp"
#include "engine/optimize.hpp"
#include "onnx/import.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_onnx_import)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;

namespace {

using TP = onnx::TensorProto;

void add_input(onnx::GraphProto& g, const std::string& name, const std::vector<std::int64_t>& dims,
               int type = TP::FLOAT, const std::string& symbolic = "") {
    auto* v = g.add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    if (!symbolic.empty()) t->mutable_shape()->add_dim()->set_dim_param(symbolic);
}

void add_output(onnx::GraphProto& g, const std::string& name) {
    auto* v = g.add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
}

TP* add_init(onnx::GraphProto& g, const std::string& name, const std::vector<std::int64_t>& dims,
             const std::vector<float>& values) {
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return t;
}

onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out, const std::string& name = "") {
    auto* n = g.add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? out.at(0) : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
}

void attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
}

void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto v : values) a->add_ints(v);
}

onnx::ModelProto model_of(const onnx::GraphProto& g) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_version(17);
    *m.mutable_graph() = g;
    return m;
}

void write(const onnx::ModelProto& m, const fs::path& p) {
    std::ofstream out(p, std::ios::binary);
    m.SerializeToOstream(&out);
}

// ONNX Runtime (npm onnxruntime-node, tests/node/ort_check.js) runs `model` on the inputs in
// the trace directory `trace` and compares each output with the trace's within `tolerance`:
// the script's exit status (0: all within) and its report, a line per output.
struct OrtCheck {
    int status;
    std::string report;
    long lines() const { return std::count(report.begin(), report.end(), '\n'); }
};
OrtCheck ort_check(const fs::path& model, const fs::path& trace, const std::string& tolerance) {
    BOOST_TEST_REQUIRE(fs::is_directory(source_dir() / "tests" / "node" / "node_modules" / "onnxruntime-node"),
                       "onnxruntime-node is missing: run scripts/install-deps.sh");
    const fs::path out = trace.parent_path() / "ort.out";
    const std::string cmd = "node '" + (source_dir() / "tests" / "node" / "ort_check.js").string() + "' '" +
                            model.string() + "' '" + trace.string() + "' " + tolerance + " >'" + out.string() +
                            "' 2>&1";
    const int status = std::system(cmd.c_str());
    return {status, slurp(out)};
}

// X (2x3) -> /attn/MatMul (X·W) -> + b -> reshaped through Shape/Gather/Concat arithmetic ->
// Softmax over the last axis -> Y (2x4)
onnx::GraphProto torch_style() {
    onnx::GraphProto g;
    g.set_name("tiny");
    add_input(g, "input.1", {2, 3});
    add_init(g, "attn.W", {3, 4}, {0.5f, -1, 0.25f, 2, 1, 0, -0.5f, 0.75f, -1.5f, 0.125f, 1, -0.25f});
    add_init(g, "attn.b", {4}, {0.1f, -0.2f, 0.3f, 0});
    add_node(g, "MatMul", {"input.1", "attn.W"}, {"/attn/MatMul_output_0"}, "/attn/MatMul");
    add_node(g, "Add", {"/attn/MatMul_output_0", "attn.b"}, {"/attn/Add_output_0"}, "/attn/Add");
    add_node(g, "Shape", {"/attn/Add_output_0"}, {"/attn/Shape_output_0"}, "/attn/Shape");
    auto* c = add_node(g, "Constant", {}, {"/attn/Constant_output_0"}, "/attn/Constant");
    auto* a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(TP::INT64);
    a->mutable_t()->add_int64_data(0);
    add_node(g, "Gather", {"/attn/Shape_output_0", "/attn/Constant_output_0"}, {"/attn/Gather_output_0"},
             "/attn/Gather");
    auto* u = add_node(g, "Unsqueeze", {"/attn/Gather_output_0", "/attn/axes"}, {"/attn/Unsqueeze_output_0"},
                       "/attn/Unsqueeze");
    (void)u;
    auto* axes = g.add_initializer();
    axes->set_name("/attn/axes");
    axes->set_data_type(TP::INT64);
    axes->add_dims(1);
    axes->add_int64_data(0);
    auto* minus1 = g.add_initializer();
    minus1->set_name("/attn/minus1");
    minus1->set_data_type(TP::INT64);
    minus1->add_dims(1);
    minus1->add_int64_data(-1);
    add_node(g, "Concat", {"/attn/Unsqueeze_output_0", "/attn/minus1"}, {"/attn/Concat_output_0"}, "/attn/Concat")
        ->add_attribute()
        ->set_name("axis");
    add_node(g, "Reshape", {"/attn/Add_output_0", "/attn/Concat_output_0"}, {"/attn/Reshape_output_0"},
             "/attn/Reshape");
    auto* sm = add_node(g, "Softmax", {"/attn/Reshape_output_0"}, {"Y"}, "/attn/Softmax");
    auto* ax = sm->add_attribute();
    ax->set_name("axis");
    ax->set_type(onnx::AttributeProto::INT);
    ax->set_i(-1);
    add_output(g, "Y");
    // Concat's axis attribute: 0
    for (auto& n : *g.mutable_node())
        if (n.op_type() == "Concat") {
            n.mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
            n.mutable_attribute(0)->set_i(0);
        }
    return g;
}

std::vector<double> reference_y(const std::vector<double>& x) {
    const double W[3][4] = {{0.5, -1, 0.25, 2}, {1, 0, -0.5, 0.75}, {-1.5, 0.125, 1, -0.25}};
    const double b[4] = {0.1, -0.2, 0.3, 0};
    std::vector<double> y;
    for (int i = 0; i < 2; ++i) {
        double s[4], m = -INFINITY, sum = 0;
        for (int j = 0; j < 4; ++j) {
            s[j] = b[j];
            for (int k = 0; k < 3; ++k) s[j] += x[i * 3 + k] * W[k][j];
            m = std::max(m, s[j]);
        }
        for (double& v : s) sum += (v = std::exp(v - m));
        for (double v : s) y.push_back(v / sum);
    }
    return y;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(onnx_import)

BOOST_AUTO_TEST_CASE(a_torch_style_model_runs_and_is_traced_under_sanitised_names) {
    TempDir tmp;
    write(model_of(torch_style()), tmp.path / "tiny.onnx");
    const std::vector<double> x = {1, 2, 3, -1, 0.5, 0.25};
    Array<float> xa = xt::zeros<float>(Shape{2, 3});
    for (std::size_t i = 0; i < 6; ++i) xa.data()[i] = static_cast<float>(x[i]);
    save_npy(tmp.path / "x.npy", Tensor(xa));
    const CliResult r = run_cli("run tiny.onnx --input input.1=x.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "Y.npy");
    const auto want = reference_y(x);
    BOOST_TEST_REQUIRE(y.size() == 8u);
    for (std::size_t i = 0; i < 8; ++i) BOOST_TEST(std::fabs(y.at_flat(i) - want[i]) <= 1e-6, i);
    // the intermediate keeps its ONNX name, sanitised; folded shape arithmetic has no entry
    BOOST_TEST(fs::exists(tmp.path / "t" / "attn.MatMul_output_0.npy"));
    BOOST_TEST(fs::exists(tmp.path / "t" / "input.1.npy"));
    BOOST_TEST(!fs::exists(tmp.path / "t" / "attn.Shape_output_0.npy"));
    // manifest.json records each entry's ONNX name
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "t" / "manifest.json"));
    std::map<std::string, std::string> onnx_of;
    for (const auto& e : manifest["entries"]) onnx_of[e["name"]] = e.value("onnx_name", std::string());
    BOOST_TEST(onnx_of["attn.MatMul_output_0"] == "/attn/MatMul_output_0");
    BOOST_TEST(onnx_of["input.1"] == "input.1");
    BOOST_TEST(onnx_of["Y"] == "Y");
    BOOST_TEST(onnx_of.count("attn.Shape_output_0") == 0u);

    const CliResult c = run_cli("check tiny.onnx", tmp.path);
    BOOST_TEST_REQUIRE(c.code == 0, c.err);
    BOOST_TEST(c.out.find("ONNX name -> attngraph name") != std::string::npos, c.out);
    BOOST_TEST(c.out.find("  /attn/MatMul_output_0 -> attn.MatMul_output_0\n") != std::string::npos, c.out);
    BOOST_TEST(c.out.find("  attn.W -> attn.W\n") != std::string::npos, c.out);
    BOOST_TEST(c.out.find("Shape_output_0") == std::string::npos, c.out);

    const CliResult imp = run_cli("import tiny.onnx -o g.json", tmp.path);
    BOOST_TEST_REQUIRE(imp.code == 0, imp.err);
    const CliResult again = run_cli("import tiny.onnx -o g.json", tmp.path);
    BOOST_TEST(again.code == 1);
    BOOST_TEST(again.err.find("exists (use --force") != std::string::npos, again.err);
    const CliResult rj = run_cli("run g.json --input input.1=x.npy --trace tj", tmp.path);
    BOOST_TEST_REQUIRE(rj.code == 0, rj.err);
    BOOST_TEST((load_npy(tmp.path / "tj" / "Y.npy") == y));  // the graph file gives the same bits
    // weights beside the graph file load as they are; outside its folder, a note says how
    fs::create_directory(tmp.path / "sub");
    const CliResult inside = run_cli("import tiny.onnx -o sub/g.json --weights-dir sub/w", tmp.path);
    BOOST_TEST_REQUIRE(inside.code == 0, inside.err);
    BOOST_TEST(inside.err.empty(), inside.err);
    const CliResult outside = run_cli("import tiny.onnx -o sub/g2.json --weights-dir w2", tmp.path);
    BOOST_TEST_REQUIRE(outside.code == 0, outside.err);
    BOOST_TEST(outside.err.find("note: the weights are outside the graph file's folder: load it with "
                                "--allow-outside-paths") != std::string::npos,
               outside.err);
    BOOST_TEST(run_cli("run sub/g2.json --input input.1=x.npy", tmp.path).code == 1);
    BOOST_TEST(run_cli("run sub/g2.json --input input.1=x.npy --allow-outside-paths", tmp.path).code == 0);
}

BOOST_AUTO_TEST_CASE(bad_models_give_one_error_line) {
    TempDir tmp;
    const auto expect_error = [&](const std::string& args, const std::string& part) {
        const CliResult r = run_cli(args, tmp.path);
        BOOST_TEST(r.code == 1, args);
        BOOST_TEST(r.err.rfind("error: ", 0) == 0, r.err);
        BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
        BOOST_TEST(r.err.find(part) != std::string::npos, args << ": " << r.err);
        BOOST_TEST(!fs::exists(tmp.path / "out.json"));
    };
    // not ONNX, truncated
    std::ofstream(tmp.path / "text.onnx") << "this is not a protobuf";
    expect_error("import text.onnx -o out.json", "text.onnx: not an ONNX model");
    onnx::ModelProto good = model_of(torch_style());
    std::string bytes;
    good.SerializeToString(&bytes);
    std::ofstream(tmp.path / "cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    expect_error("import cut.onnx -o out.json", "cut.onnx: not an ONNX model");
    // an unsupported op names op, node and the docs
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 2});
        add_node(g, "LSTM", {"X"}, {"Y"}, "/rnn/LSTM");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "lstm.onnx");
        expect_error("import lstm.onnx -o out.json",
                     "lstm.onnx: node '/rnn/LSTM' (LSTM): op 'LSTM' is not supported on computed values; shapes "
                     "(2x2) (supported ops: docs/onnx.md)");
    }
    // a node without its input, or without any output (protobuf's own range check used to
    // end the import with its log line and an untyped error)
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 2});
        add_node(g, "Relu", {}, {"Y"}, "/act/Relu");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "noinput.onnx");
        expect_error("import noinput.onnx -o out.json", "noinput.onnx: node '/act/Relu' (Relu): input 0 is missing");
        g.mutable_node(0)->add_input("X");
        g.mutable_node(0)->clear_output();
        write(model_of(g), tmp.path / "nooutput.onnx");
        expect_error("import nooutput.onnx -o out.json",
                     "nooutput.onnx: node '/act/Relu' (Relu): the node has no outputs");
    }
    // an input of another shape than the one a torch export baked its Reshape for: the
    // folded Reshape names both shapes and the element counts
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        auto* shape = g.add_initializer();
        shape->set_name("/attn/shape");
        shape->set_data_type(TP::INT64);
        shape->add_dims(2);
        shape->add_int64_data(3);
        shape->add_int64_data(-1);
        add_node(g, "Reshape", {"X", "/attn/shape"}, {"Y"}, "/attn/Reshape");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "reshape.onnx");
        save_npy(tmp.path / "x25.npy", Tensor(Array<float>(xt::zeros<float>(Shape{2, 5}))));
        expect_error("run reshape.onnx --input X=x25.npy",
                     "reshape.onnx: node '/attn/Reshape' (Reshape): cannot infer -1 for 10 elements; shapes "
                     "(2x5), (2)");
        shape->set_int64_data(1, 4);
        write(model_of(g), tmp.path / "reshape.onnx");
        expect_error("run reshape.onnx --input X=x25.npy",
                     "reshape.onnx: node '/attn/Reshape' (Reshape): a reshape to (3x4) changes the element count "
                     "10 to 12; shapes (2x5), (2) (the model declares input 'X' as (2x3), given (2x5))");
        // an error of the graph's own shape rules says so too
        onnx::GraphProto h;
        add_input(h, "X", {2, 3});
        add_init(h, "s", {3}, {1, 1, 1});
        add_node(h, "LayerNormalization", {"X", "s"}, {"Y"}, "/ln/LayerNorm");
        add_output(h, "Y");
        write(model_of(h), tmp.path / "ln.onnx");
        expect_error("run ln.onnx --input X=x25.npy", "(the model declares input 'X' as (2x3), given (2x5))");
        BOOST_TEST(run_cli("run ln.onnx", tmp.path).code == 0);
    }
    // an attribute the mapping does not read is refused (never ignored): file, node, op, shapes
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        auto* n = add_node(g, "LayerNormalization", {"X", "s"}, {"Y"}, "/ln/LayerNorm");
        auto* a = n->add_attribute();
        a->set_name("future_mode");
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(1);
        add_init(g, "s", {3}, {1, 1, 1});
        add_output(g, "Y");
        write(model_of(g), tmp.path / "attr.onnx");
        expect_error("import attr.onnx -o out.json",
                     "attr.onnx: node '/ln/LayerNorm' (LayerNormalization): attribute 'future_mode' is not "
                     "supported; shapes (2x3), (3)");
    }
    // Pow with an exponent computed from the inputs: attngraph's Pow takes one constant exponent
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        add_input(g, "E", {3});
        add_node(g, "Pow", {"X", "E"}, {"Y"}, "/pow");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "pow.onnx");
        expect_error("import pow.onnx -o out.json",
                     "pow.onnx: node '/pow' (Pow): an exponent that is not one constant number is not supported "
                     "(attngraph's Pow takes a scalar exponent); shapes (2x3), (3)");
    }
    // Attention with 3-D inputs and no head counts: attention() names the node, op and shapes
    {
        onnx::GraphProto g;
        for (const char* x : {"Q", "K", "V"}) add_input(g, x, {1, 4, 8});
        add_node(g, "Attention", {"Q", "K", "V"}, {"Y"}, "attn");
        add_output(g, "Y");
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(23);
        write(m, tmp.path / "heads.onnx");
        expect_error("import heads.onnx -o out.json",
                     "heads.onnx: node 'attn' (Attention): 3-D inputs need the attributes q_num_heads and "
                     "kv_num_heads: Q (1x4x8), K (1x4x8), V (1x4x8)");
    }
    // a symbolic input dimension: named, with the way out
    {
        onnx::GraphProto g;
        add_input(g, "X", {2}, TP::FLOAT, "seq");
        add_node(g, "Softmax", {"X"}, {"Y"});
        add_output(g, "Y");
        write(model_of(g), tmp.path / "sym.onnx");
        expect_error("check sym.onnx", "graph input 'X' has the symbolic dimension 'seq'");
        // ... which --input resolves
        save_npy(tmp.path / "x.npy", Tensor(Array<float>(xt::zeros<float>(Shape{2, 5}))));
        BOOST_TEST(run_cli("check sym.onnx --input X=x.npy", tmp.path).code == 0);
    }
    // a reshape whose shape is computed from data cannot be resolved statically: the value is named
    {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        add_input(g, "S", {2});
        add_node(g, "Reshape", {"X", "S"}, {"Y"});
        add_output(g, "Y");
        write(model_of(g), tmp.path / "dyn.onnx");
        expect_error("check dyn.onnx", "shape 'S' is computed from the graph's inputs, not a constant");
    }
    // unsupported data types
    {
        onnx::GraphProto g;
        add_input(g, "X", {2}, TP::STRING);
        add_node(g, "Identity", {"X"}, {"Y"});
        add_output(g, "Y");
        write(model_of(g), tmp.path / "str.onnx");
        expect_error("check str.onnx", "graph input 'X' has data type string, which attngraph does not support");
        onnx::GraphProto h;
        add_input(h, "X", {2});
        auto* t = h.add_initializer();
        t->set_name("C");
        t->set_data_type(TP::COMPLEX64);
        t->add_dims(2);
        add_node(h, "Add", {"X", "C"}, {"Y"});
        add_output(h, "Y");
        write(model_of(h), tmp.path / "complex.onnx");
        expect_error("check complex.onnx", "initializer 'C' has data type complex64");
    }
    // external data: missing, escaping the folder
    const auto external = [&](const std::string& location, const std::string& file) {
        onnx::GraphProto g;
        add_input(g, "X", {2});
        auto* t = g.add_initializer();
        t->set_name("B");
        t->set_data_type(TP::FLOAT);
        t->add_dims(2);
        t->set_data_location(TP::EXTERNAL);
        auto* kv = t->add_external_data();
        kv->set_key("location");
        kv->set_value(location);
        add_node(g, "Add", {"X", "B"}, {"Y"});
        add_output(g, "Y");
        write(model_of(g), tmp.path / file);
    };
    external("weights.bin", "ext.onnx");
    expect_error("check ext.onnx", "initializer 'B': external data file 'weights.bin' is missing");
    const float two[2] = {1.5f, -2.0f};
    std::ofstream(tmp.path / "weights.bin", std::ios::binary).write(reinterpret_cast<const char*>(two), 8);
    const CliResult ok = run_cli("run ext.onnx --trace te", tmp.path);
    BOOST_TEST_REQUIRE(ok.code == 0, ok.err);
    BOOST_TEST(load_npy(tmp.path / "te" / "B.npy").at_flat(1) == -2.0);
    external("../weights.bin", "escape.onnx");
    expect_error("check escape.onnx", "external data file '../weights.bin' leaves the model's folder");
    external("/etc/passwd", "absolute.onnx");
    expect_error("check absolute.onnx", "external data file '/etc/passwd' leaves the model's folder");
    // a tensor over --max-memory is refused before its data is read
    {
        onnx::GraphProto g;
        add_input(g, "X", {1000, 1000});
        add_node(g, "Softmax", {"X"}, {"Y"});
        add_output(g, "Y");
        write(model_of(g), tmp.path / "big.onnx");
        expect_error("check big.onnx --max-memory 1M",
                     "graph input 'X' of shape (1000x1000) has 1000000 elements, over the limit");
        onnx::GraphProto h;
        add_input(h, "X", {2});
        auto* t = h.add_initializer();
        t->set_name("W");
        t->set_data_type(TP::FLOAT);
        t->add_dims(1000000);
        t->add_dims(1000000);
        add_node(h, "Add", {"X", "W"}, {"Y"});
        add_output(h, "Y");
        write(model_of(h), tmp.path / "huge.onnx");
        expect_error("check huge.onnx",
                     "initializer 'W' of shape (1000000x1000000) has 1000000000000 elements, over the limit");
    }
}

// Bools of computed values: attngraph holds them as 0/1 floats. A Cast of any float to bool is
// nonzero -> 1 (a Where), a comparison's result needs none; And is their product.
BOOST_AUTO_TEST_CASE(a_cast_of_computed_floats_to_bool_and_and) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3});
    add_init(g, "half", {}, {0.5f});
    attr_int(add_node(g, "Cast", {"X"}, {"nonzero"}), "to", TP::BOOL);
    add_node(g, "Less", {"X", "half"}, {"small"});
    add_node(g, "And", {"nonzero", "small"}, {"both"});
    attr_int(add_node(g, "Cast", {"both"}, {"Y"}), "to", TP::FLOAT);
    attr_int(add_node(g, "Cast", {"nonzero"}, {"Z"}), "to", TP::FLOAT);
    add_output(g, "Y");
    add_output(g, "Z");
    write(model_of(g), tmp.path / "bools.onnx");
    Array<float> x = {{0.0f, 2.0f, -1.0f}, {0.25f, 0.0f, 3.0f}};
    save_npy(tmp.path / "x.npy", Tensor(x));
    const CliResult r = run_cli("run bools.onnx --input X=x.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    // the float Casts add no node: outputs Y and Z are the values `both` and `nonzero`
    const Tensor y = load_npy(tmp.path / "t" / "both.npy"), z = load_npy(tmp.path / "t" / "nonzero.npy");
    BOOST_TEST(fs::exists(tmp.path / "t" / "nonzero.one.npy"));  // nonzero = where(X, 1, 0)
    const std::vector<double> want_y = {0, 0, 1, 1, 0, 0}, want_z = {0, 1, 1, 1, 0, 1};
    for (std::size_t i = 0; i < 6; ++i) {
        BOOST_TEST(y.at_flat(i) == want_y[i], i);
        BOOST_TEST(z.at_flat(i) == want_z[i], i);
    }
}

// Or and Not of computed bools (torch's nn.MultiheadAttention joins a bool key_padding_mask
// and a bool attn_mask with Or): a or b = where(a, 1, b), not a = where(a, 0, 1) on 0/1 values.
BOOST_AUTO_TEST_CASE(or_and_not_of_computed_bools) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3});
    add_input(g, "M", {3}, TP::BOOL);
    add_init(g, "half", {}, {0.5f});
    add_node(g, "Less", {"X", "half"}, {"small"});
    add_node(g, "Or", {"small", "M"}, {"either"});
    add_node(g, "Not", {"either"}, {"neither"});
    attr_int(add_node(g, "Cast", {"either"}, {"Y"}), "to", TP::FLOAT);
    attr_int(add_node(g, "Cast", {"neither"}, {"Z"}), "to", TP::FLOAT);
    add_output(g, "Y");
    add_output(g, "Z");
    write(model_of(g), tmp.path / "or.onnx");
    Array<float> x = {{0.0f, 2.0f, -1.0f}, {0.75f, 0.5f, 3.0f}};
    Array<float> m = {0.0f, 1.0f, 0.0f};
    save_npy(tmp.path / "x.npy", Tensor(x));
    save_npy(tmp.path / "m.npy", Tensor(m));
    const CliResult r = run_cli("run or.onnx --input X=x.npy --input M=m.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "either.npy"), z = load_npy(tmp.path / "t" / "neither.npy");
    BOOST_TEST_REQUIRE(y.size() == 6u);
    const std::vector<double> want_y = {1, 1, 1, 0, 1, 0};
    for (std::size_t i = 0; i < 6; ++i) {
        BOOST_TEST(y.at_flat(i) == want_y[i], i);
        BOOST_TEST(z.at_flat(i) == 1 - want_y[i], i);
    }
}

// One `error:` line, exit 1, for the command run in `tmp`; the message must hold `part`.
void expect_one_error(const TempDir& tmp, const std::string& args, const std::string& part) {
    const CliResult r = run_cli(args, tmp.path);
    BOOST_TEST(r.code == 1, args << ": " << r.err);
    BOOST_TEST(r.err.rfind("error: ", 0) == 0, r.err);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
    BOOST_TEST(r.err.find(part) != std::string::npos, args << ": " << r.err);
}

// Folding checks an output's shape against --max-memory before it allocates it: a
// ConstantOfShape of (5000x4000) used to be built in full (324 MB resident under a 60 MB
// limit) and refused afterwards; (40000x40000) ended in std::bad_alloc and (2^30x2^30) in
// std::vector's length_error, naming no node. Expand and broadcasting grow values too.
BOOST_AUTO_TEST_CASE(folding_checks_the_memory_limit_before_allocating) {
    TempDir tmp;
    // X (1) + ReduceSum(ConstantOfShape(dims)): folded but for the Add
    const auto model = [&](const std::string& file, const std::vector<std::int64_t>& dims) {
        onnx::GraphProto g;
        add_input(g, "X", {1});
        auto* shape = g.add_initializer();
        shape->set_name("dims");
        shape->set_data_type(TP::INT64);
        shape->add_dims(static_cast<std::int64_t>(dims.size()));
        for (auto d : dims) shape->add_int64_data(d);
        add_node(g, "ConstantOfShape", {"dims"}, {"c"}, "/fill");
        add_node(g, "ReduceSum", {"c"}, {"s"}, "/sum");
        add_node(g, "Add", {"X", "s"}, {"Y"}, "/add");
        add_output(g, "Y");
        write(model_of(g), tmp.path / file);
    };
    model("small.onnx", {50, 40});
    const CliResult ok = run_cli("check small.onnx --max-memory 60M", tmp.path);
    BOOST_TEST(ok.code == 0, ok.err);
    model("fill.onnx", {5000, 4000});
    expect_one_error(tmp, "check fill.onnx --max-memory 60M",
                     "fill.onnx: node '/fill' (ConstantOfShape): output 'c' of shape (5000x4000) has 20000000 "
                     "elements, over the limit of 15728640 (--max-memory)");
    model("huge.onnx", {40000, 40000});
    expect_one_error(tmp, "check huge.onnx --max-memory 60M",
                     "huge.onnx: node '/fill' (ConstantOfShape): output 'c' of shape (40000x40000) has 1600000000 "
                     "elements, over the limit of 15728640 (--max-memory)");
    model("vast.onnx", {1 << 30, 1 << 30});  // no --max-memory: the default, half the machine's memory
    expect_one_error(tmp, "check vast.onnx",
                     "vast.onnx: node '/fill' (ConstantOfShape): output 'c' of shape (1073741824x1073741824) has "
                     "1152921504606846976 elements, over the limit of ");
    model("overflow.onnx", {std::int64_t(1) << 40, std::int64_t(1) << 40});
    expect_one_error(tmp, "check overflow.onnx",
                     "node '/fill' (ConstantOfShape): output 'c' of shape (1099511627776x1099511627776) has too many "
                     "elements, over the limit of ");
    // Expand of a scalar and a broadcast Add of a row and a column
    {
        onnx::GraphProto g;
        add_input(g, "X", {1});
        add_init(g, "one", {}, {1.0f});
        auto* shape = g.add_initializer();
        shape->set_name("dims");
        shape->set_data_type(TP::INT64);
        shape->add_dims(2);
        shape->add_int64_data(40000);
        shape->add_int64_data(40000);
        add_node(g, "Expand", {"one", "dims"}, {"e"}, "/expand");
        add_node(g, "Add", {"X", "e"}, {"Y"}, "/add");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "expand.onnx");
        expect_one_error(tmp, "check expand.onnx --max-memory 60M",
                         "expand.onnx: node '/expand' (Expand): output 'e' of shape (40000x40000) has 1600000000 "
                         "elements, over the limit of 15728640 (--max-memory)");
        onnx::GraphProto h;
        add_input(h, "X", {1});
        add_init(h, "row", {1, 40000}, std::vector<float>(40000, 1.0f));
        add_init(h, "col", {40000, 1}, std::vector<float>(40000, 2.0f));
        add_node(h, "Mul", {"row", "col"}, {"outer"}, "/outer");
        add_node(h, "Add", {"X", "outer"}, {"Y"}, "/add");
        add_output(h, "Y");
        write(model_of(h), tmp.path / "outer.onnx");
        expect_one_error(tmp, "check outer.onnx --max-memory 60M",
                         "outer.onnx: node '/outer' (Mul): output 'outer' of shape (40000x40000) has 1600000000 "
                         "elements, over the limit of 15728640 (--max-memory)");
    }
}

// ONNX graphs are SSA: a name defined twice (two node outputs, a node output shadowing a graph
// input, two initializers, an input listed twice) was accepted, the last definition winning.
// An initializer also listed as a graph input (IR < 4 models) is legal: its value is used.
BOOST_AUTO_TEST_CASE(names_defined_twice_are_refused_naming_both_definers) {
    TempDir tmp;
    {
        onnx::GraphProto g;
        add_input(g, "X", {2});
        add_node(g, "Neg", {"X"}, {"a"}, "first");
        add_node(g, "Exp", {"X"}, {"a"}, "second");
        add_node(g, "Add", {"a", "a"}, {"Y"}, "sum");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "nodes.onnx");
        expect_one_error(tmp, "check nodes.onnx",
                         "nodes.onnx: 'a' is defined twice, by node 'first' (Neg) and by node 'second' (Exp) (an "
                         "ONNX name is defined once)");
    }
    {
        onnx::GraphProto g;
        add_input(g, "X", {2});
        add_node(g, "Neg", {"X"}, {"X"}, "shadow");
        add_node(g, "Exp", {"X"}, {"Y"}, "exp");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "shadow.onnx");
        expect_one_error(tmp, "check shadow.onnx",
                         "shadow.onnx: 'X' is defined twice, by graph input 'X' and by node 'shadow' (Neg)");
    }
    {
        onnx::GraphProto g;
        add_input(g, "X", {2});
        add_init(g, "B", {2}, {1, 2});
        add_init(g, "B", {2}, {3, 4});
        add_node(g, "Add", {"X", "B"}, {"Y"}, "add");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "inits.onnx");
        expect_one_error(tmp, "check inits.onnx",
                         "inits.onnx: 'B' is defined twice, by initializer 'B' and by initializer 'B'");
    }
    {
        onnx::GraphProto g;
        add_input(g, "X", {2});
        add_input(g, "X", {2});
        add_node(g, "Neg", {"X"}, {"Y"}, "neg");
        add_output(g, "Y");
        write(model_of(g), tmp.path / "inputs.onnx");
        expect_one_error(tmp, "check inputs.onnx", "inputs.onnx: graph input 'X' is listed twice");
    }
    // legal: B is an initializer and a graph input; the initializer is its value
    onnx::GraphProto g;
    add_input(g, "X", {2});
    add_input(g, "B", {2});
    add_init(g, "B", {2}, {1.5f, -2.0f});
    add_node(g, "Add", {"X", "B"}, {"Y"}, "add");
    add_output(g, "Y");
    write(model_of(g), tmp.path / "default.onnx");
    save_npy(tmp.path / "x.npy", Tensor(Array<float>{10.0f, 20.0f}));
    const CliResult r = run_cli("run default.onnx --input X=x.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "Y.npy");
    BOOST_TEST(y.at_flat(0) == 11.5);
    BOOST_TEST(y.at_flat(1) == 18.0);
}

// The default domain's opset decides what every op means: a model without one, or newer than
// the mapping knows, is refused (it was read as opset 1, or as if its ops had not changed).
// An external data `length` that disagrees with the tensor names both sizes.
BOOST_AUTO_TEST_CASE(opset_imports_and_external_data_lengths_are_checked) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2});
    add_node(g, "Neg", {"X"}, {"Y"}, "neg");
    add_output(g, "Y");
    onnx::ModelProto none = model_of(g);
    none.clear_opset_import();
    none.add_opset_import()->set_domain("com.microsoft");
    write(none, tmp.path / "none.onnx");
    expect_one_error(tmp, "check none.onnx",
                     "none.onnx: the model imports no opset of the default ONNX domain ('' or 'ai.onnx')");
    onnx::ModelProto future = model_of(g);
    future.mutable_opset_import(0)->set_version(26);
    write(future, tmp.path / "future.onnx");
    expect_one_error(tmp, "check future.onnx",
                     "future.onnx: opset 26 of the default ONNX domain is not supported (opsets 1 to 25)");
    onnx::ModelProto newest = model_of(g);
    newest.mutable_opset_import(0)->set_domain("ai.onnx");
    newest.mutable_opset_import(0)->set_version(25);
    write(newest, tmp.path / "newest.onnx");
    const CliResult ok = run_cli("check newest.onnx", tmp.path);
    BOOST_TEST(ok.code == 0, ok.err);

    onnx::GraphProto h;
    add_input(h, "X", {3});
    auto* t = h.add_initializer();
    t->set_name("B");
    t->set_data_type(TP::FLOAT);
    t->add_dims(3);
    t->set_data_location(TP::EXTERNAL);
    for (const auto& [k, v] : {std::pair<const char*, const char*>{"location", "w.bin"}, {"length", "48"}}) {
        auto* kv = t->add_external_data();
        kv->set_key(k);
        kv->set_value(v);
    }
    add_node(h, "Add", {"X", "B"}, {"Y"}, "add");
    add_output(h, "Y");
    write(model_of(h), tmp.path / "length.onnx");
    std::ofstream(tmp.path / "w.bin", std::ios::binary) << std::string(48, '\0');
    expect_one_error(tmp, "check length.onnx",
                     "length.onnx: initializer 'B' of shape (3) float needs 12 bytes, its external data length is 48 "
                     "(file 'w.bin')");
}

// ---- Abs, Clip, LeakyRelu, Softplus, Max, Min ----------------------------------------------

void attr_float(onnx::NodeProto* n, const std::string& name, float value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
}

// X (2x4), Y (4) through every mapping of these ops: Clip's bounds as inputs (opset 13; one
// absent, none), LeakyRelu's default and given alpha, a Max of three inputs (one a constant),
// a Max of one input inside a Min.
onnx::GraphProto activations() {
    onnx::GraphProto g;
    add_input(g, "X", {2, 4});
    add_input(g, "Y", {4});
    add_init(g, "lo", {}, {-1.0f});
    add_init(g, "hi", {}, {1.5f});
    add_init(g, "quarter", {}, {0.25f});
    add_init(g, "half", {}, {0.5f});
    add_node(g, "Abs", {"X"}, {"A"});
    add_node(g, "Clip", {"X", "lo", "hi"}, {"C"});
    add_node(g, "Clip", {"X", "", "quarter"}, {"Cmax"});
    add_node(g, "Clip", {"X"}, {"C0"});
    add_node(g, "LeakyRelu", {"X"}, {"L"});
    attr_float(add_node(g, "LeakyRelu", {"X"}, {"L2"}), "alpha", 0.5f);
    add_node(g, "Softplus", {"X"}, {"S"});
    add_node(g, "Max", {"X", "Y", "half"}, {"M"});
    add_node(g, "Max", {"Y"}, {"Y1"});
    add_node(g, "Min", {"X", "Y1"}, {"N"});
    for (const char* out : {"A", "C", "Cmax", "C0", "L", "L2", "S", "M", "N"}) add_output(g, out);
    return g;
}

// Values worked out by hand with numpy's semantics (NaN propagates through abs, clip,
// maximum, minimum); Softplus to 50 digits (mpmath), in float
BOOST_AUTO_TEST_CASE(abs_clip_leaky_relu_softplus_max_min_import_with_numpys_values) {
    TempDir tmp;
    write(model_of(activations()), tmp.path / "act.onnx");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    save_npy(tmp.path / "x.npy", Tensor(Array<float>({{-3.0f, -0.5f, 0.0f, 0.5f}, {1.0f, 2.0f, 7.0f, nan}})));
    save_npy(tmp.path / "y.npy", Tensor(Array<float>({0.25f, -1.0f, 0.0f, 9.0f})));
    const CliResult r = run_cli("run act.onnx --input X=x.npy --input Y=y.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const double n = std::numeric_limits<double>::quiet_NaN();
    const std::map<std::string, std::vector<double>> want = {
        {"A", {3, 0.5, 0, 0.5, 1, 2, 7, n}},
        {"C", {-1, -0.5, 0, 0.5, 1, 1.5, 1.5, n}},
        {"Cmax", {-3, -0.5, 0, 0.25, 0.25, 0.25, 0.25, n}},
        {"C0", {-3, -0.5, 0, 0.5, 1, 2, 7, n}},
        {"L", {-3 * 0.01f, -0.5 * 0.01f, 0, 0.5, 1, 2, 7, n}},
        {"L2", {-1.5, -0.25, 0, 0.5, 1, 2, 7, n}},
        {"S",
         {0.04858735157374206, 0.4740769841801067, 0.6931471805599453, 0.9740769841801067, 1.3132616875182228,
          2.1269280110429727, 7.000911466453775, n}},
        {"M", {0.5, 0.5, 0.5, 9, 1, 2, 7, n}},
        {"N", {-3, -1, 0, 0.5, 0.25, -1, 0, n}},
    };
    for (const auto& [name, values] : want) {
        const Tensor y = load_npy(tmp.path / "t" / (name + ".npy"));
        BOOST_TEST_REQUIRE(y.size() == 8u, name);
        for (std::size_t i = 0; i < 8; ++i) {
            if (std::isnan(values[i]))
                BOOST_TEST(std::isnan(y.at_flat(i)), name << "[" << i << "] = " << y.at_flat(i));
            else
                BOOST_TEST(std::fabs(y.at_flat(i) - values[i]) <= 1e-7 * std::max(1.0, std::fabs(values[i])),
                           name << "[" << i << "] = " << y.at_flat(i) << ", want " << values[i]);
        }
    }
    // a Max of three inputs is two Max nodes: M.1 = max(X, Y), M = max(M.1, half)
    BOOST_TEST(fs::exists(tmp.path / "t" / "M.1.npy"));
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "t" / "manifest.json"));
    std::map<std::string, std::string> op_of;
    for (const auto& e : manifest["entries"]) op_of[e["name"]] = e.value("op", std::string());
    BOOST_TEST(op_of["M"] == "Max");
    BOOST_TEST(op_of["M.1"] == "Max");
    BOOST_TEST(op_of["C"] == "Clip");
    BOOST_TEST(op_of["L"] == "LeakyRelu");
    BOOST_TEST(op_of["S"] == "Softplus");
    BOOST_TEST(op_of.count("Y1") == 0u);  // a Max of one input is that input
}

// The same model run by ONNX Runtime (npm onnxruntime-node, tests/node/): every output within
// 1e-6 of attngraph's (finite inputs: the comparison counts NaN as a difference)
BOOST_AUTO_TEST_CASE(abs_clip_leaky_relu_softplus_max_min_match_onnx_runtime) {
    TempDir tmp;
    write(model_of(activations()), tmp.path / "act.onnx");
    save_npy(tmp.path / "x.npy", Tensor(Array<float>({{-3.0f, -0.5f, 0.1f, 0.5f}, {1.25f, 2.0f, 30.0f, -20.0f}})));
    save_npy(tmp.path / "y.npy", Tensor(Array<float>({0.25f, -1.0f, 0.1f, 9.0f})));
    const CliResult r = run_cli("run act.onnx --input X=x.npy --input Y=y.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const OrtCheck ort = ort_check(tmp.path / "act.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 9, ort.report);  // one line per output
}

// Max and Min of constants fold at import: every input (three here), NaN propagating as in
// numpy (the folding read only the first two inputs and took std::max's / std::min's side)
BOOST_AUTO_TEST_CASE(max_and_min_of_constants_fold_over_every_input_with_nan) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2});
    add_init(g, "a", {2}, {-1.0f, 4.0f});
    add_init(g, "b", {}, {0.25f});
    add_init(g, "c", {2}, {1.5f, 2.0f});
    add_init(g, "n", {}, {std::numeric_limits<float>::quiet_NaN()});
    add_node(g, "Max", {"a", "b", "c"}, {"K"});
    add_node(g, "Min", {"c", "n"}, {"Kn"});
    add_node(g, "Add", {"X", "K"}, {"Y"});
    add_node(g, "Add", {"X", "Kn"}, {"Z"});
    add_output(g, "Y");
    add_output(g, "Z");
    write(model_of(g), tmp.path / "fold.onnx");
    const CliResult r = run_cli("run fold.onnx --trace t", tmp.path);  // X holds zeros
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "Y.npy"), z = load_npy(tmp.path / "t" / "Z.npy");
    BOOST_TEST(y.at_flat(0) == 1.5);  // max(-1, 0.25, 1.5)
    BOOST_TEST(y.at_flat(1) == 4.0);  // max(4, 0.25, 2)
    BOOST_TEST(std::isnan(z.at_flat(0)));
    BOOST_TEST(std::isnan(z.at_flat(1)));
}

// Before opset 11 Clip's bounds are attributes (ReLU6 as torch exported it at opset 9)
BOOST_AUTO_TEST_CASE(clip_before_opset_11_reads_its_bounds_from_attributes) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {5});
    auto* relu6 = add_node(g, "Clip", {"X"}, {"R6"});
    attr_float(relu6, "min", 0);
    attr_float(relu6, "max", 6);
    attr_float(add_node(g, "Clip", {"X"}, {"Below"}), "max", 1);
    add_output(g, "R6");
    add_output(g, "Below");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(9);
    write(m, tmp.path / "relu6.onnx");
    save_npy(tmp.path / "x.npy", Tensor(Array<float>({-2.0f, 0.5f, 3.0f, 6.5f, 100.0f})));
    const CliResult r = run_cli("run relu6.onnx --input X=x.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor r6 = load_npy(tmp.path / "t" / "R6.npy"), below = load_npy(tmp.path / "t" / "Below.npy");
    const std::vector<double> want_r6 = {0, 0.5, 3, 6, 6}, want_below = {-2, 0.5, 1, 1, 1};
    for (std::size_t i = 0; i < 5; ++i) {
        BOOST_TEST(r6.at_flat(i) == want_r6[i], i);
        BOOST_TEST(below.at_flat(i) == want_below[i], i);
    }
}

// Gelu (opset 20), both forms, against the plain formulas in double (std::erf, std::tanh) and
// against ONNX Runtime; an approximation ONNX does not define is refused
BOOST_AUTO_TEST_CASE(gelu_imports_with_both_approximations) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 5});
    add_node(g, "Gelu", {"X"}, {"E"});
    auto* t = add_node(g, "Gelu", {"X"}, {"T"});
    auto* a = t->add_attribute();
    a->set_name("approximate");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("tanh");
    add_output(g, "E");
    add_output(g, "T");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(20);
    write(m, tmp.path / "gelu.onnx");
    const std::vector<float> x = {-6.0f, -2.5f, -1.0f, -0.25f, 0.0f, 1e-3f, 0.5f, 1.0f, 3.0f, 8.0f};
    save_npy(tmp.path / "X.npy",
             Tensor(Array<float>({{x[0], x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8], x[9]}})));
    const CliResult r = run_cli("run gelu.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor e = load_npy(tmp.path / "t" / "E.npy"), th = load_npy(tmp.path / "t" / "T.npy");
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        const double exact = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        const double approx = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        BOOST_TEST(std::fabs(e.at_flat(i) - exact) <= 1e-6 * std::max(1.0, std::fabs(exact)),
                   i << ": " << e.at_flat(i));
        BOOST_TEST(std::fabs(th.at_flat(i) - approx) <= 1e-6 * std::max(1.0, std::fabs(approx)),
                   i << ": " << th.at_flat(i));
    }
    BOOST_TEST(std::fabs(e.at_flat(2) - th.at_flat(2)) > 1e-5);  // the two forms differ
    const OrtCheck ort = ort_check(tmp.path / "gelu.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 2, ort.report);
    a->set_s("erf");
    m = model_of(g);
    m.mutable_opset_import(0)->set_version(20);
    write(m, tmp.path / "erf.onnx");
    expect_one_error(tmp, "check erf.onnx",
                     "erf.onnx: node 'T' (Gelu): approximate 'erf' is not 'none' or 'tanh'; shapes (2x5)");
}

// Reciprocal of computed values (and rsqrt as Reciprocal(Sqrt)), against 1/x in double and
// ONNX Runtime; the gradient of sum(R) + sum(RS): -1/x² - x^(-3/2)/2
BOOST_AUTO_TEST_CASE(reciprocal_imports_and_differentiates) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3});
    add_node(g, "Reciprocal", {"X"}, {"R"});
    add_node(g, "Sqrt", {"X"}, {"S"});
    add_node(g, "Reciprocal", {"S"}, {"RS"});
    add_output(g, "R");
    add_output(g, "RS");
    write(model_of(g), tmp.path / "recip.onnx");
    const std::vector<float> x = {0.5f, 3.0f, 7.0f, 1e-3f, 100.0f, 1.0f};
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{x[0], x[1], x[2]}, {x[3], x[4], x[5]}})));
    const CliResult r = run_cli("run recip.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor rec = load_npy(tmp.path / "t" / "R.npy"), rs = load_npy(tmp.path / "t" / "RS.npy");
    for (std::size_t i = 0; i < x.size(); ++i) {
        BOOST_TEST(rec.at_flat(i) == static_cast<double>(1.0f / x[i]), i);  // one division, exactly rounded
        const double want = 1 / std::sqrt(static_cast<double>(x[i]));
        BOOST_TEST(std::fabs(rs.at_flat(i) - want) <= 1e-6 * want, i);
    }
    const CliResult d = run_cli("grad recip.onnx --input X=X.npy --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(d.code == 0, d.err);
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "g" / "manifest.json"));
    std::string file;
    for (const auto& e : manifest["entries"])
        if (e.value("name", std::string()) == "X") file = e.value("grad", std::string());
    BOOST_TEST_REQUIRE(!file.empty());
    const Tensor dx = load_npy(tmp.path / "g" / file);
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = x[i], want = -1 / (v * v) - 0.5 / (v * std::sqrt(v));
        BOOST_TEST(std::fabs(dx.at_flat(i) - want) <= 1e-6 * std::fabs(want), i << ": " << dx.at_flat(i));
    }
    const OrtCheck ort = ort_check(tmp.path / "recip.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
}

BOOST_AUTO_TEST_CASE(bad_clip_leaky_relu_max_nodes_give_one_error_line) {
    TempDir tmp;
    save_npy(tmp.path / "x.npy", Tensor(Array<float>({{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}})));
    const auto model = [&](const std::string& file, auto&& build, std::int64_t opset = 17) {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        add_input(g, "Z", {2});
        add_init(g, "pair", {2}, {0.0f, 1.0f});
        add_init(g, "nan", {}, {std::numeric_limits<float>::quiet_NaN()});
        build(g);
        add_output(g, "Y");
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(opset);
        write(m, tmp.path / file);
    };
    // a bound computed from the graph's inputs: named, as other constant inputs are
    model("computed.onnx", [](onnx::GraphProto& g) { add_node(g, "Clip", {"X", "X"}, {"Y"}, "/act/Clip"); });
    expect_one_error(tmp, "check computed.onnx",
                     "computed.onnx: node '/act/Clip' (Clip): min 'X' is computed from the graph's inputs, not a "
                     "constant: its value cannot be resolved statically; shapes (2x3), (2x3)");
    model("pair.onnx", [](onnx::GraphProto& g) { add_node(g, "Clip", {"X", "", "pair"}, {"Y"}, "/act/Clip"); });
    expect_one_error(tmp, "check pair.onnx",
                     "pair.onnx: node '/act/Clip' (Clip): max 'pair' of shape (2) is not a scalar (Clip's bounds are "
                     "one number); shapes (2x3), (absent), (2)");
    model("nan.onnx", [](onnx::GraphProto& g) { add_node(g, "Clip", {"X", "nan"}, {"Y"}, "/act/Clip"); });
    expect_one_error(tmp, "check nan.onnx",
                     "nan.onnx: node '/act/Clip' (Clip): min NaN is not supported (a bound is a finite number, or "
                     "-inf for min and inf for max); shapes (2x3), ()");
    // attributes the op's opset does not define (Clip's min from opset 11 on; opset 1's
    // consumed_inputs) are refused, never ignored
    model("attr.onnx",
          [](onnx::GraphProto& g) { attr_float(add_node(g, "Clip", {"X"}, {"Y"}, "/act/Clip"), "min", 0); });
    expect_one_error(tmp, "check attr.onnx",
                     "attr.onnx: node '/act/Clip' (Clip): attribute 'min' is not supported; shapes (2x3) (supported "
                     "ops: docs/onnx.md)");
    model(
        "leaky.onnx",
        [](onnx::GraphProto& g) {
            attr_int(add_node(g, "LeakyRelu", {"X"}, {"Y"}, "/act/LeakyRelu"), "consumed_inputs", 1);
        },
        1);
    expect_one_error(tmp, "check leaky.onnx",
                     "leaky.onnx: node '/act/LeakyRelu' (LeakyRelu): attribute 'consumed_inputs' is not supported; "
                     "shapes (2x3)");
    // operands that do not broadcast
    model("max.onnx", [](onnx::GraphProto& g) { add_node(g, "Max", {"X", "X", "Z"}, {"Y"}, "/act/Max"); });
    expect_one_error(tmp, "check max.onnx", "max.onnx: node '/act/Max' (Max): shapes (2x3) and (2) do not broadcast");
}

// ---- Einsum --------------------------------------------------------------------------------

void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
}

// ---- activations, reductions, Tile, Pad and CumSum written out with attngraph's ops ---------

TP* add_init_i64(onnx::GraphProto& g, const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(TP::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return t;
}

// the path of the gradient of `name` in a grad trace directory
fs::path grad_file(const fs::path& trace, const std::string& name) {
    const auto manifest = nlohmann::json::parse(slurp(trace / "manifest.json"));
    for (const auto& e : manifest["entries"])
        if (e.value("name", std::string()) == name) return trace / e.value("grad", std::string());
    return {};
}

// HardSigmoid, HardSwish, Elu, Selu, Celu, ThresholdedRelu, PRelu and Mish (opset 18) against
// their formulas in double, as ONNX's reference defines them, and against ONNX Runtime
BOOST_AUTO_TEST_CASE(written_out_activations_match_their_formulas_and_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 5});
    add_init(g, "slope", {5}, {0.25f, -0.5f, 2.0f, 0.0f, 1.5f});
    add_node(g, "HardSigmoid", {"X"}, {"HS"});
    auto* hs2 = add_node(g, "HardSigmoid", {"X"}, {"HS2"});
    attr_float(hs2, "alpha", 0.5f);
    attr_float(hs2, "beta", 0.25f);
    add_node(g, "HardSwish", {"X"}, {"HW"});
    add_node(g, "Elu", {"X"}, {"E"});
    attr_float(add_node(g, "Elu", {"X"}, {"E2"}), "alpha", 0.5f);
    add_node(g, "Selu", {"X"}, {"SE"});
    attr_float(add_node(g, "Celu", {"X"}, {"CE"}), "alpha", 2.0f);
    add_node(g, "ThresholdedRelu", {"X"}, {"TR"});
    add_node(g, "PRelu", {"X", "slope"}, {"PR"});
    add_node(g, "Mish", {"X"}, {"MI"});
    const std::vector<std::string> outs = {"HS", "HS2", "HW", "E", "E2", "SE", "CE", "TR", "PR", "MI"};
    for (const auto& o : outs) add_output(g, o);
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "act.onnx");
    const std::vector<float> x = {-6.0f, -2.5f, -1.0f, -0.25f, 0.0f, 1e-3f, 0.5f, 1.0f, 3.0f, 8.0f};
    save_npy(tmp.path / "X.npy",
             Tensor(Array<float>({{x[0], x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8], x[9]}})));
    const CliResult r = run_cli("run act.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const double selu_alpha = 1.67326319217681884765625, selu_gamma = 1.05070102214813232421875;
    const std::vector<double> slope = {0.25, -0.5, 2.0, 0.0, 1.5};
    auto want = [&](const std::string& o, std::size_t i) {
        const double v = x[i];
        const double elu = v > 0 ? v : std::exp(v) - 1;
        if (o == "HS") return std::clamp(0.2 * v + 0.5, 0.0, 1.0);
        if (o == "HS2") return std::clamp(0.5 * v + 0.25, 0.0, 1.0);
        if (o == "HW") return v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
        if (o == "E") return elu;
        if (o == "E2") return v > 0 ? v : 0.5 * (std::exp(v) - 1);
        if (o == "SE") return selu_gamma * (v > 0 ? v : selu_alpha * (std::exp(v) - 1));
        if (o == "CE") return std::max(0.0, v) + std::min(0.0, 2 * (std::exp(v / 2) - 1));
        if (o == "TR") return v > 1 ? v : 0.0;
        if (o == "PR") return v < 0 ? slope[i % 5] * v : v;
        return v * std::tanh(std::log1p(std::exp(v)));  // MI
    };
    for (const auto& o : outs) {
        const Tensor y = load_npy(tmp.path / "t" / (o + ".npy"));
        BOOST_TEST_REQUIRE(y.size() == x.size(), o);
        for (std::size_t i = 0; i < x.size(); ++i)
            BOOST_TEST(std::fabs(y.at_flat(i) - want(o, i)) <= 1e-6 * std::max(1.0, std::fabs(want(o, i))),
                       o << "[" << i << "] = " << y.at_flat(i) << ", want " << want(o, i));
    }
    // each step is a traced node: Elu's exp reads min(x, 0)
    const Tensor e_exp = load_npy(tmp.path / "t" / "E.exp.npy");
    BOOST_TEST(e_exp.at_flat(9) == 1.0);  // exp(min(8, 0))
    const OrtCheck ort = ort_check(tmp.path / "act.onnx", tmp.path / "t", "1e-5");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == static_cast<long>(outs.size()), ort.report);
}

// The gradients of the written-out steps: d/dx of Elu(x) + HardSwish(x) is finite where exp(x)
// overflows f32 (x = 100: the side Where does not pick reads exp(min(x, 0))), alpha·e^x at and
// below 0 and (2x + 3)/6 inside HardSwish's ramp; PRelu's slope gets the sum of the negative
// x of its column, x gets the slope there and 1 elsewhere
BOOST_AUTO_TEST_CASE(written_out_activations_differentiate) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {5});
    add_node(g, "Elu", {"X"}, {"E"});
    add_node(g, "HardSwish", {"X"}, {"H"});
    add_node(g, "Add", {"E", "H"}, {"Y"});
    add_output(g, "Y");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "act.onnx");
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({100.0f, -100.0f, 0.0f, -1.0f, 2.0f})));
    const CliResult r = run_cli("grad act.onnx --input X=X.npy --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X"));
    const std::vector<double> want = {1 + 1, std::exp(-100.0) + 0, 1 + 0.5, std::exp(-1.0) + 1.0 / 6, 1 + 7.0 / 6};
    for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(std::fabs(dx.at_flat(i) - want[i]) <= 1e-6, i << ": " << dx.at_flat(i) << ", want " << want[i]);

    onnx::GraphProto p;
    add_input(p, "X", {2, 3});
    add_init(p, "slope", {3}, {0.25f, -0.5f, 2.0f});
    add_node(p, "PRelu", {"X", "slope"}, {"Y"});
    add_output(p, "Y");
    write(model_of(p), tmp.path / "prelu.onnx");
    save_npy(tmp.path / "X2.npy", Tensor(Array<float>({{-1.0f, 2.0f, -3.0f}, {-4.0f, -5.0f, 6.0f}})));
    const CliResult d = run_cli("grad prelu.onnx --input X=X2.npy --wrt X --wrt slope --trace h", tmp.path);
    BOOST_TEST_REQUIRE(d.code == 0, d.err);
    const Tensor dxp = load_npy(grad_file(tmp.path / "h", "X")), ds = load_npy(grad_file(tmp.path / "h", "slope"));
    const std::vector<double> want_dx = {0.25, 1, 2, 0.25, -0.5, 1}, want_ds = {-5, -5, -3};
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(dxp.at_flat(i) == want_dx[i], i);
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(ds.at_flat(i) == want_ds[i], i);
}

// ReduceMin, ReduceL1, ReduceL2 and ReduceSumSquare of computed values (opset 18: axes as an
// input), against plain loops and ONNX Runtime; ReduceL2 of a constant folds at import
BOOST_AUTO_TEST_CASE(written_out_reductions_match_plain_loops_and_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3, 4});
    add_init_i64(g, "ax1", {1});
    add_init_i64(g, "ax2", {2});
    add_init_i64(g, "ax0_last", {0, -1});
    add_init(g, "C", {2}, {3.0f, 4.0f});
    attr_int(add_node(g, "ReduceMin", {"X", "ax1"}, {"RMIN"}), "keepdims", 0);
    add_node(g, "ReduceL1", {"X", "ax2"}, {"RL1"});
    add_node(g, "ReduceL2", {"X"}, {"RL2"});
    attr_int(add_node(g, "ReduceSumSquare", {"X", "ax0_last"}, {"RSS"}), "keepdims", 0);
    attr_int(add_node(g, "ReduceL2", {"C"}, {"five"}), "keepdims", 0);
    add_node(g, "Add", {"RMIN", "five"}, {"RC"});
    for (const char* o : {"RMIN", "RL1", "RL2", "RSS", "RC"}) add_output(g, o);
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "red.onnx");
    std::vector<float> x(24);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>((k * 5) % 11) - 4.75f;
    Array<float> xa = Array<float>::from_shape({2, 3, 4});
    std::copy(x.begin(), x.end(), xa.data());
    save_npy(tmp.path / "X.npy", Tensor(xa));
    const CliResult r = run_cli("run red.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    auto at = [&](std::size_t a, std::size_t b, std::size_t c) { return double(x[(a * 3 + b) * 4 + c]); };
    std::vector<double> rmin, rl1, rss;
    double l2 = 0;
    for (std::size_t a = 0; a < 2; ++a)
        for (std::size_t c = 0; c < 4; ++c) rmin.push_back(std::min({at(a, 0, c), at(a, 1, c), at(a, 2, c)}));
    for (std::size_t a = 0; a < 2; ++a)
        for (std::size_t b = 0; b < 3; ++b) {
            double s = 0;
            for (std::size_t c = 0; c < 4; ++c) s += std::fabs(at(a, b, c));
            rl1.push_back(s);
        }
    for (std::size_t b = 0; b < 3; ++b) {
        double s = 0;
        for (std::size_t a = 0; a < 2; ++a)
            for (std::size_t c = 0; c < 4; ++c) s += at(a, b, c) * at(a, b, c);
        rss.push_back(s);
    }
    for (float v : x) l2 += double(v) * v;
    std::vector<double> rc = rmin;
    for (double& v : rc) v += 5;
    const std::map<std::string, std::pair<Shape, std::vector<double>>> want = {
        {"RMIN", {{2, 4}, rmin}}, {"RL1", {{2, 3, 1}, rl1}}, {"RL2", {{1, 1, 1}, {std::sqrt(l2)}}},
        {"RSS", {{3}, rss}},      {"RC", {{2, 4}, rc}},
    };
    for (const auto& [name, expected] : want) {
        const Tensor y = load_npy(tmp.path / "t" / (name + ".npy"));
        BOOST_TEST(y.shape() == expected.first, name);
        BOOST_TEST_REQUIRE(y.size() == expected.second.size(), name);
        for (std::size_t i = 0; i < y.size(); ++i)
            BOOST_TEST(std::fabs(y.at_flat(i) - expected.second[i]) <= 1e-6 * std::max(1.0, expected.second[i]),
                       name << "[" << i << "] = " << y.at_flat(i) << ", want " << expected.second[i]);
    }
    // folded: a constant (a param), not a node
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "t" / "manifest.json"));
    for (const auto& e : manifest["entries"])
        if (e.value("name", std::string()) == "five") BOOST_TEST(e.value("op", std::string()).empty());
    BOOST_TEST(load_npy(tmp.path / "t" / "five.npy").at_flat(0) == 5.0);
    const OrtCheck ort = ort_check(tmp.path / "red.onnx", tmp.path / "t", "1e-5");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 5, ort.report);
}

// Tile, Pad (constant with a crop, edge on one axis, reflect, wrap) and CumSum (plain,
// exclusive and reversed, of a vector), opset 19. Each output element is a sum of input
// elements (none: Pad's constant or CumSum's exclusive 0), listed here by plain index
// arithmetic: the values are those sums and the gradient of the sum of the outputs counts
// the reads of each x. Checked against ONNX Runtime too.
BOOST_AUTO_TEST_CASE(tile_pad_and_cumsum_match_index_arithmetic_onnx_runtime_and_their_gradients) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3});
    add_input(g, "V", {4});
    add_init_i64(g, "reps", {2, 3});
    add_init_i64(g, "pads_c", {1, -1, 0, 2});
    add_init(g, "half", {}, {0.5f});
    add_init_i64(g, "pads_e", {2, 1});
    add_init_i64(g, "axis1", {1});
    add_init_i64(g, "pads_r", {0, 2, 0, 2});
    add_init_i64(g, "pads_w", {1, 1, 1, 2});
    add_init_i64(g, "zero", {0});
    add_node(g, "Tile", {"X", "reps"}, {"T"});
    add_node(g, "Pad", {"X", "pads_c", "half"}, {"PC"});
    attr_string(add_node(g, "Pad", {"X", "pads_e", "", "axis1"}, {"PE"}), "mode", "edge");
    attr_string(add_node(g, "Pad", {"X", "pads_r"}, {"PR"}), "mode", "reflect");
    attr_string(add_node(g, "Pad", {"X", "pads_w"}, {"PW"}), "mode", "wrap");
    add_node(g, "CumSum", {"X", "axis1"}, {"C1"});
    auto* c0 = add_node(g, "CumSum", {"X", "zero"}, {"C0"});
    attr_int(c0, "exclusive", 1);
    attr_int(c0, "reverse", 1);
    add_node(g, "CumSum", {"V", "zero"}, {"CV"});
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(19);
    // (the graph's outputs are added below, with their references)
    const std::vector<float> xv = {1, -2, 3, 4, 5, -6.5f}, vv = {0.5f, -1, 2, 8};
    // sources: flat indices into X (0-5) and V (6-9)
    struct Want {
        std::string name;
        Shape shape;
        double fill;
        std::vector<std::vector<int>> sources;
    };
    std::vector<Want> want;
    auto X = [](int i, int j) { return i * 3 + j; };
    {
        Want t{"T", {4, 9}, 0, {}};
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 9; ++j) t.sources.push_back({X(i % 2, j % 3)});
        want.push_back(t);
        Want pc{"PC", {3, 4}, 0.5, {}};  // rows: one before; columns: one cropped before, two after
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 4; ++j) {
                const int si = i - 1, sj = j + 1;
                pc.sources.push_back(si >= 0 && sj < 3 ? std::vector<int>{X(si, sj)} : std::vector<int>{});
            }
        want.push_back(pc);
        Want pe{"PE", {2, 6}, 0, {}};
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 6; ++j) pe.sources.push_back({X(i, std::clamp(j - 2, 0, 2))});
        want.push_back(pe);
        Want pr{"PR", {2, 7}, 0, {}};
        const int reflect[7] = {2, 1, 0, 1, 2, 1, 0};  // c b | a b c | b a
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 7; ++j) pr.sources.push_back({X(i, reflect[j])});
        want.push_back(pr);
        Want pw{"PW", {4, 6}, 0, {}};
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 6; ++j) pw.sources.push_back({X((i + 1) % 2, (j + 2) % 3)});
        want.push_back(pw);
        Want c1{"C1", {2, 3}, 0, {}}, c0w{"C0", {2, 3}, 0, {}}, cv{"CV", {4}, 0, {}};
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j) {
                std::vector<int> s1, s0;
                for (int k = 0; k <= j; ++k) s1.push_back(X(i, k));
                for (int k = i + 1; k < 2; ++k) s0.push_back(X(k, j));
                c1.sources.push_back(s1);
                c0w.sources.push_back(s0);
            }
        for (int j = 0; j < 4; ++j) {
            std::vector<int> s;
            for (int k = 0; k <= j; ++k) s.push_back(6 + k);
            cv.sources.push_back(s);
        }
        want.push_back(c1);
        want.push_back(c0w);
        want.push_back(cv);
    }
    for (const auto& w : want) add_output(*m.mutable_graph(), w.name);
    write(m, tmp.path / "shape.onnx");
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{xv[0], xv[1], xv[2]}, {xv[3], xv[4], xv[5]}})));
    save_npy(tmp.path / "V.npy", Tensor(Array<float>({vv[0], vv[1], vv[2], vv[3]})));
    const CliResult r = run_cli("run shape.onnx --input X=X.npy --input V=V.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    std::vector<double> reads(6, 0);
    for (const auto& w : want) {
        const Tensor y = load_npy(tmp.path / "t" / (w.name + ".npy"));
        BOOST_TEST(y.shape() == w.shape, w.name);
        BOOST_TEST_REQUIRE(y.size() == w.sources.size(), w.name);
        for (std::size_t e = 0; e < y.size(); ++e) {
            double v = w.sources[e].empty() ? w.fill : 0;
            for (int s : w.sources[e]) {
                v += s < 6 ? xv[static_cast<std::size_t>(s)] : vv[static_cast<std::size_t>(s - 6)];
                if (s < 6) reads[static_cast<std::size_t>(s)] += 1;
            }
            BOOST_TEST(y.at_flat(e) == v, w.name << "[" << e << "] = " << y.at_flat(e) << ", want " << v);
        }
    }
    const OrtCheck ort = ort_check(tmp.path / "shape.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == static_cast<long>(want.size()), ort.report);
    const CliResult d = run_cli("grad shape.onnx --input X=X.npy --input V=V.npy --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(d.code == 0, d.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X"));
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(dx.at_flat(i) == reads[i], i << ": " << dx.at_flat(i));
}

// LogSoftmax (opset 18 and, flattened around its axis, opset 12), ReduceLogSumExp,
// ReduceLogSum, LessOrEqual, GreaterOrEqual, Sum, Mean and Softsign of computed values against
// their formulas in double and ONNX Runtime; IsNaN, IsInf (each detection) and the comparisons
// on NaN and ±inf against the formulas
BOOST_AUTO_TEST_CASE(log_softmax_log_sum_exp_comparisons_sum_mean_and_checks_match_formulas_and_onnx_runtime) {
    TempDir tmp;
    const auto build = [&](std::int64_t opset, const std::string& file) {
        onnx::GraphProto g;
        add_input(g, "X", {2, 4});
        add_input(g, "Y", {4});
        if (opset >= 18) add_init_i64(g, "ax1", {1});
        add_node(g, "LogSoftmax", {"X"}, {"LS"});
        attr_int(add_node(g, "LogSoftmax", {"X"}, {"LS0"}), "axis", 0);
        if (opset >= 18) {
            attr_int(add_node(g, "ReduceLogSumExp", {"X", "ax1"}, {"LSE"}), "keepdims", 0);
            add_node(g, "Exp", {"X"}, {"EX"});
            add_node(g, "ReduceLogSum", {"EX", "ax1"}, {"LOGSUM"});
        }
        add_node(g, "LessOrEqual", {"X", "Y"}, {"LE"});
        add_node(g, "GreaterOrEqual", {"X", "Y"}, {"GE"});
        add_node(g, "Sum", {"X", "Y", "X"}, {"SUM"});
        add_node(g, "Mean", {"X", "Y"}, {"MEAN"});
        add_node(g, "Softsign", {"X"}, {"SS"});
        add_node(g, "IsNaN", {"X"}, {"NAN"});
        add_node(g, "IsInf", {"X"}, {"INF"});
        attr_int(add_node(g, "IsInf", {"X"}, {"PINF"}), "detect_negative", 0);
        attr_int(add_node(g, "IsInf", {"X"}, {"NINF"}), "detect_positive", 0);
        std::vector<std::string> outs = {"LS", "LS0", "LE", "GE", "SUM", "MEAN", "SS", "NAN", "INF", "PINF", "NINF"};
        if (opset >= 18) outs.insert(outs.end(), {"LSE", "LOGSUM"});
        for (const auto& o : outs) {
            auto* v = g.add_output();
            v->set_name(o);
            const bool boolean = o == "LE" || o == "GE" || o == "NAN" || o == "INF" || o == "PINF" || o == "NINF";
            v->mutable_type()->mutable_tensor_type()->set_elem_type(boolean ? TP::BOOL : TP::FLOAT);
        }
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(opset);
        write(m, tmp.path / file);
        return outs;
    };
    const std::vector<float> y = {0.5f, -1.0f, 3.0f, 2.0f};
    save_npy(tmp.path / "Y.npy", Tensor(Array<float>({y[0], y[1], y[2], y[3]})));
    const auto check = [&](const std::vector<float>& x, const std::vector<std::string>& outs, const fs::path& trace,
                           std::int64_t opset) {
        auto X = [&](std::size_t r, std::size_t c) { return double(x[r * 4 + c]); };
        for (const auto& o : outs) {
            const Tensor t = load_npy(trace / (o + ".npy"));
            const std::size_t n = o == "LSE" || o == "LOGSUM" ? 2 : 8;
            BOOST_TEST_REQUIRE(t.size() == n, o);
            for (std::size_t e = 0; e < n; ++e) {
                const std::size_t r = e / 4, c = e % 4;
                const double v = X(r, c), yc = y[c];
                double want = 0;
                if (o == "LS" || o == "LSE" || o == "LOGSUM") {  // over the row
                    const std::size_t row = o == "LS" ? r : e;
                    double mx = -INFINITY, sum = 0;
                    for (std::size_t k = 0; k < 4; ++k) mx = std::max(mx, X(row, k));
                    for (std::size_t k = 0; k < 4; ++k) sum += std::exp(X(row, k) - mx);
                    want = o == "LS" ? v - mx - std::log(sum) : mx + std::log(sum);
                } else if (o == "LS0" && opset < 13) {  // axis 0 flattens the whole (2x4) into one row
                    double mx = -INFINITY, sum = 0;
                    for (float a : x) mx = std::max(mx, double(a));
                    for (float a : x) sum += std::exp(a - mx);
                    want = v - mx - std::log(sum);
                } else if (o == "LS0") {  // over the column
                    const double mx = std::max(X(0, c), X(1, c));
                    want = v - mx - std::log(std::exp(X(0, c) - mx) + std::exp(X(1, c) - mx));
                } else if (o == "LE") {
                    want = v <= yc;
                } else if (o == "GE") {
                    want = v >= yc;
                } else if (o == "SUM") {
                    want = 2 * v + yc;
                } else if (o == "MEAN") {
                    want = (v + yc) / 2;
                } else if (o == "SS") {
                    want = v / (1 + std::fabs(v));
                } else if (o == "NAN") {
                    want = std::isnan(v);
                } else if (o == "INF") {
                    want = std::isinf(v);
                } else if (o == "PINF") {
                    want = std::isinf(v) && v > 0;
                } else if (o == "NINF") {
                    want = std::isinf(v) && v < 0;
                }
                if (std::isnan(want))
                    BOOST_TEST(std::isnan(t.at_flat(e)), o << "[" << e << "] = " << t.at_flat(e));
                else
                    BOOST_TEST(std::fabs(t.at_flat(e) - want) <= 1e-6 * std::max(1.0, std::fabs(want)),
                               o << "[" << e << "] = " << t.at_flat(e) << ", want " << want);
            }
        }
    };
    // finite values, ties with Y among them: against the formulas and ONNX Runtime, both opsets
    const std::vector<float> x = {-3.0f, -1.0f, 3.0f, 7.5f, 0.5f, 2.0f, -0.25f, 2.0f};
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{x[0], x[1], x[2], x[3]}, {x[4], x[5], x[6], x[7]}})));
    for (const std::int64_t opset : {18, 12}) {
        const std::string file = "m" + std::to_string(opset) + ".onnx", trace = "t" + std::to_string(opset);
        const auto outs = build(opset, file);
        const CliResult r = run_cli("run " + file + " --input X=X.npy --input Y=Y.npy --trace " + trace, tmp.path);
        BOOST_TEST_REQUIRE(r.code == 0, r.err);
        check(x, outs, tmp.path / trace, opset);
        const OrtCheck ort = ort_check(tmp.path / file, tmp.path / trace, "1e-6");
        BOOST_TEST(ort.status == 0, ort.report);
        BOOST_TEST(ort.lines() == static_cast<long>(outs.size()), ort.report);
    }
    // NaN and ±inf: the checks and the comparisons (NaN compares false)
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> odd = {nan, inf, -inf, 2.0f, 1.0f, -inf, nan, 3.0e38f};
    save_npy(tmp.path / "odd.npy",
             Tensor(Array<float>({{odd[0], odd[1], odd[2], odd[3]}, {odd[4], odd[5], odd[6], odd[7]}})));
    const CliResult r = run_cli("run m18.onnx --input X=odd.npy --input Y=Y.npy --trace odd", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    check(odd, {"NAN", "INF", "PINF", "NINF", "LE", "GE"}, tmp.path / "odd", 18);
}

// d/dx of sum(LogSoftmax(x)) + sum(ReduceLogSumExp(x)) over rows of 4: 1 − 4·softmax + softmax
BOOST_AUTO_TEST_CASE(log_softmax_and_log_sum_exp_differentiate) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 4});
    add_init_i64(g, "ax1", {1});
    add_node(g, "LogSoftmax", {"X"}, {"LS"});
    attr_int(add_node(g, "ReduceLogSumExp", {"X", "ax1"}, {"LSE"}), "keepdims", 0);
    add_output(g, "LS");
    add_output(g, "LSE");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "ls.onnx");
    const std::vector<float> x = {-3.0f, -1.0f, 3.0f, 7.5f, 0.5f, 2.0f, -0.25f, 2.0f};
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{x[0], x[1], x[2], x[3]}, {x[4], x[5], x[6], x[7]}})));
    const CliResult r = run_cli("grad ls.onnx --input X=X.npy --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X"));
    for (std::size_t row = 0; row < 2; ++row) {
        double sum = 0;
        for (std::size_t k = 0; k < 4; ++k) sum += std::exp(double(x[row * 4 + k]));
        for (std::size_t k = 0; k < 4; ++k) {
            const double softmax = std::exp(double(x[row * 4 + k])) / sum, want = 1 - 3 * softmax;
            BOOST_TEST(std::fabs(dx.at_flat(row * 4 + k) - want) <= 1e-6,
                       row << "," << k << ": " << dx.at_flat(row * 4 + k));
        }
    }
}

// ---- step functions, Mod, casts to integers, integer division --------------------------------

// Floor, Ceil, Round, Sign and Mod (fmod 1) of computed floats, ArgMax, ArgMin and TopK; a
// float cast to int64 (truncated) and, of those integers, Div (truncating), Mod (fmod 0: the
// divisor's sign) and CumSum, cast back to float: against the C library's functions and integer
// arithmetic in the test, and ONNX Runtime for every output. d/dX of the sum of all: 1 from
// Mod's a, 1 more where TopK picked, 0 through the step functions, the casts and ArgMax/ArgMin.
BOOST_AUTO_TEST_CASE(step_functions_mod_picks_integer_casts_and_division_match_c_and_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 4});
    add_init(g, "B", {4}, {0.7f, -0.7f, 2, -3});
    add_init_i64(g, "J", {2, -2, 3, -3});
    add_init_i64(g, "ax1", {1});
    for (const char* op : {"Floor", "Ceil", "Round", "Sign"}) add_node(g, op, {"X"}, {op});
    attr_int(add_node(g, "Mod", {"X", "B"}, {"FMOD"}), "fmod", 1);
    attr_int(add_node(g, "Cast", {"X"}, {"I"}), "to", TP::INT64);
    add_node(g, "Div", {"I", "J"}, {"IDIV"});
    add_node(g, "Mod", {"I", "J"}, {"IMOD"});
    add_node(g, "CumSum", {"I", "ax1"}, {"ICUM"});
    attr_int(add_node(g, "ArgMax", {"X"}, {"AMAX"}), "axis", 1);
    auto* amin = add_node(g, "ArgMin", {"X"}, {"AMIN"});
    attr_int(amin, "axis", -1);
    attr_int(amin, "keepdims", 0);
    add_init_i64(g, "two", {2});
    add_node(g, "TopK", {"X", "two"}, {"TOPV", "TOPI"});
    const std::vector<std::string> ints = {"I", "IDIV", "IMOD", "ICUM", "AMAX", "AMIN", "TOPI"};
    for (const auto& i : ints) attr_int(add_node(g, "Cast", {i}, {i + "F"}), "to", TP::FLOAT);
    const std::vector<std::string> outs = {"Floor", "Ceil",  "Round", "Sign",  "FMOD", "IF",   "IDIVF",
                                           "IMODF", "ICUMF", "AMAXF", "AMINF", "TOPV", "TOPIF"};
    for (const auto& o : outs) add_output(g, o);
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "steps.onnx");
    const std::vector<float> x = {2.5f, -2.5f, 0.5f, -7.25f, 7.9f, -0.4f, 3.0f, -3.5f};
    const double b[4] = {0.7f, -0.7f, 2, -3};
    const std::int64_t j[4] = {2, -2, 3, -3};
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{x[0], x[1], x[2], x[3]}, {x[4], x[5], x[6], x[7]}})));
    const CliResult r = run_cli("run steps.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    std::int64_t running[2] = {0, 0};
    for (std::size_t e = 0; e < 8; ++e) {
        const double v = x[e];
        const std::int64_t i = static_cast<std::int64_t>(v), d = j[e % 4];  // C's cast truncates
        running[e / 4] += i;
        const std::int64_t rem = i % d;  // C's % takes the dividend's sign; ONNX's fmod 0 the divisor's
        const std::map<std::string, double> want = {
            {"Floor", std::floor(v)},
            {"Ceil", std::ceil(v)},
            {"Round", std::nearbyint(v)},  // halves to even: 2.5 -> 2, -2.5 -> -2, 0.5 -> 0
            {"Sign", v > 0   ? 1.0
                     : v < 0 ? -1.0
                             : 0.0},
            {"FMOD", std::fmod(double(float(v)), double(float(b[e % 4])))},
            {"IF", double(i)},
            {"IDIVF", double(i / d)},  // C's / truncates
            {"IMODF", double(rem != 0 && (rem < 0) != (d < 0) ? rem + d : rem)},
            {"ICUMF", double(running[e / 4])}};
        for (const auto& [name, w] : want) {
            const Tensor t = load_npy(tmp.path / "t" / (name + ".npy"));
            BOOST_TEST(std::fabs(t.at_flat(e) - w) <= 1e-6 * std::max(1.0, std::fabs(w)),
                       name << "[" << e << "] = " << t.at_flat(e) << ", want " << w);
        }
    }
    // the rows' largest, 2.5 and 7.9, at 0; their smallest, -7.25 and -3.5, at 3
    for (const auto& [name, want] : std::map<std::string, std::vector<double>>{{"AMAXF", {0, 0}}, {"AMINF", {3, 3}}}) {
        const Tensor t = load_npy(tmp.path / "t" / (name + ".npy"));
        BOOST_TEST_REQUIRE(t.size() == 2u, name);
        for (std::size_t row = 0; row < 2; ++row) BOOST_TEST(t.at_flat(row) == want[row], name << "[" << row << "]");
    }
    BOOST_TEST((load_npy(tmp.path / "t" / "AMAXF.npy").shape() == Shape{2, 1}));
    // the two largest of each row: 2.5, 0.5 at 0, 2; 7.9, 3 at 0, 2
    const Tensor topv = load_npy(tmp.path / "t" / "TOPV.npy"), topi = load_npy(tmp.path / "t" / "TOPIF.npy");
    const std::vector<double> top_values = {2.5, 0.5, 7.9f, 3}, top_positions = {0, 2, 0, 2};
    BOOST_TEST_REQUIRE((topv.size() == 4u && topi.size() == 4u));
    for (std::size_t i = 0; i < 4; ++i) {
        BOOST_TEST(topv.at_flat(i) == top_values[i], i);
        BOOST_TEST(topi.at_flat(i) == top_positions[i], i);
    }
    const OrtCheck ort = ort_check(tmp.path / "steps.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == static_cast<long>(outs.size()), ort.report);
    const CliResult d = run_cli("grad steps.onnx --input X=X.npy --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(d.code == 0, d.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X"));
    for (std::size_t e = 0; e < 8; ++e) {
        const double want = e % 4 == 0 || e % 4 == 2 ? 2.0 : 1.0;  // TopK's picks get TOPV's 1 too
        BOOST_TEST(dx.at_flat(e) == want, e << ": " << dx.at_flat(e));
    }
}

// ScatterElements with computed indices (a float input cast to int64, as positions given at
// run time) and with constant ones, ScatterND with constant tuples: against the positions in
// the test and ONNX Runtime; the gradient of the sum of all three: data gets 1 per output that
// left the element alone, each update 1 per output it landed in
BOOST_AUTO_TEST_CASE(scatter_elements_and_scatter_nd_match_positions_onnx_runtime_and_their_gradients) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "D", {2, 6});
    add_input(g, "U", {2, 2});
    add_input(g, "P", {2, 2});
    add_input(g, "W", {2});
    attr_int(add_node(g, "Cast", {"P"}, {"Pi"}), "to", TP::INT64);
    attr_int(add_node(g, "ScatterElements", {"D", "Pi", "U"}, {"SE"}), "axis", 1);
    auto* ci = g.add_initializer();  // (2, 2) int64: columns 1, 3 of row 0; 3, 4 of row 1
    ci->set_name("cols");
    ci->set_data_type(TP::INT64);
    for (auto d : {2, 2}) ci->add_dims(d);
    for (auto v : {1, 3, 3, 4}) ci->add_int64_data(v);
    attr_int(add_node(g, "ScatterElements", {"D", "cols", "U"}, {"SEC"}), "axis", -1);
    auto* ti = g.add_initializer();  // (2, 2) int64 tuples: (1, 4), (0, -1)
    ti->set_name("tuples");
    ti->set_data_type(TP::INT64);
    for (auto d : {2, 2}) ti->add_dims(d);
    for (auto v : {1, 4, 0, -1}) ti->add_int64_data(v);
    add_node(g, "ScatterND", {"D", "tuples", "W"}, {"SN"});
    for (const char* o : {"SE", "SEC", "SN"}) add_output(g, o);
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "scatter.onnx");
    std::vector<float> d(12);
    for (std::size_t i = 0; i < 12; ++i) d[i] = 0.5f * float(i) - 2;
    const std::vector<float> u = {10, 11, 12, 13}, p = {5, 0, 2, -1}, w = {-7, -8};
    save_npy(tmp.path / "D.npy",
             Tensor(Array<float>({{d[0], d[1], d[2], d[3], d[4], d[5]}, {d[6], d[7], d[8], d[9], d[10], d[11]}})));
    save_npy(tmp.path / "U.npy", Tensor(Array<float>({{u[0], u[1]}, {u[2], u[3]}})));
    save_npy(tmp.path / "P.npy", Tensor(Array<float>({{p[0], p[1]}, {p[2], p[3]}})));
    save_npy(tmp.path / "W.npy", Tensor(Array<float>({w[0], w[1]})));
    const std::string inputs = " --input D=D.npy --input U=U.npy --input P=P.npy --input W=W.npy";
    const CliResult r = run_cli("run scatter.onnx" + inputs + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    // the positions each output writes: (row, column) <- the value
    const std::map<std::string, std::vector<std::tuple<int, int, float>>> writes = {
        {"SE", {{0, 5, u[0]}, {0, 0, u[1]}, {1, 2, u[2]}, {1, 5, u[3]}}},
        {"SEC", {{0, 1, u[0]}, {0, 3, u[1]}, {1, 3, u[2]}, {1, 4, u[3]}}},
        {"SN", {{1, 4, w[0]}, {0, 5, w[1]}}}};
    std::vector<double> data_grad(12, 0);
    for (const auto& [name, list] : writes) {
        std::vector<double> want(d.begin(), d.end()), untouched(12, 1);
        for (const auto& [row, col, v] : list) {
            want[static_cast<std::size_t>(row * 6 + col)] = v;
            untouched[static_cast<std::size_t>(row * 6 + col)] = 0;
        }
        for (std::size_t i = 0; i < 12; ++i) data_grad[i] += untouched[i];
        const Tensor y = load_npy(tmp.path / "t" / (name + ".npy"));
        BOOST_TEST_REQUIRE(y.size() == 12u, name);
        for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(y.at_flat(i) == want[i], name << "[" << i << "]");
    }
    const OrtCheck ort = ort_check(tmp.path / "scatter.onnx", tmp.path / "t", "0");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 3, ort.report);
    const CliResult gr = run_cli("grad scatter.onnx" + inputs + " --wrt D --wrt U --wrt W --trace g", tmp.path);
    BOOST_TEST_REQUIRE(gr.code == 0, gr.err);
    const Tensor dd = load_npy(grad_file(tmp.path / "g", "D")), du = load_npy(grad_file(tmp.path / "g", "U")),
                 dw = load_npy(grad_file(tmp.path / "g", "W"));
    for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(dd.at_flat(i) == data_grad[i], "dD[" << i << "]");
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(du.at_flat(i) == 2.0, "dU[" << i << "]");
    for (std::size_t i = 0; i < 2; ++i) BOOST_TEST(dw.at_flat(i) == 1.0, "dW[" << i << "]");
    // a computed position out of range: one error line naming the node, at run time
    save_npy(tmp.path / "bad.npy", Tensor(Array<float>({{6, 0}, {2, -1}})));
    const CliResult bad =
        run_cli("run scatter.onnx --input D=D.npy --input U=U.npy --input P=bad.npy --input W=W.npy", tmp.path);
    BOOST_TEST(bad.code != 0);
    BOOST_TEST(std::count(bad.err.begin(), bad.err.end(), '\n') == 1, bad.err);
    BOOST_TEST(bad.err.find("SE") != std::string::npos, bad.err);
    BOOST_TEST(bad.err.find("index 6 at flat position 0 of indices (2x2) is out of range for axis 1 of size 6") !=
                   std::string::npos,
               bad.err);
    // an unknown reduction, and updates that do not fit: one line each, at import
    const auto model = [&](const std::string& file, auto&& build) {
        onnx::GraphProto b;
        add_input(b, "D", {2, 6});
        add_input(b, "U", {2, 2});
        b.add_initializer()->CopyFrom(*ci);
        b.add_initializer()->CopyFrom(*ti);
        build(b);
        add_output(b, "Y");
        onnx::ModelProto mb = model_of(b);
        mb.mutable_opset_import(0)->set_version(18);
        write(mb, tmp.path / file);
    };
    model("sum.onnx", [](onnx::GraphProto& b) {
        attr_string(add_node(b, "ScatterElements", {"D", "cols", "U"}, {"Y"}, "/se"), "reduction", "sum");
    });
    expect_one_error(
        tmp, "check sum.onnx",
        "sum.onnx: node '/se' (ScatterElements): unknown reduction 'sum' (known: none, add, mul, max, min)");
    model("fit.onnx", [](onnx::GraphProto& b) { add_node(b, "ScatterND", {"D", "tuples", "U"}, {"Y"}, "/sn"); });
    expect_one_error(tmp, "check fit.onnx",
                     "fit.onnx: node '/sn' (ScatterND): updates (2x2) must be (2) for data (2x6) and indices (2x2); "
                     "shapes (2x6), (2x2), (2x2)");
}

// ScatterElements and ScatterND with each reduction (opset 18), positions computed at run time
// and repeated: against a plain loop in f32 (the writes combined in index order) and ONNX
// Runtime; folded when everything is constant. Gradients: tests/test_op_scatter_*.cpp and
// test_onnx_torch (scatter_add, index_add, index_put with accumulate, against PyTorch).
BOOST_AUTO_TEST_CASE(scatter_reductions_match_a_plain_loop_and_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "D", {3, 4});
    add_input(g, "U", {4, 4});
    add_input(g, "P", {4, 4});
    add_input(g, "W", {3, 4});
    attr_int(add_node(g, "Cast", {"P"}, {"Pi"}), "to", TP::INT64);
    auto* ti = g.add_initializer();  // (3, 1) int64 tuples: rows 2, 0, -1 (row 2 twice)
    ti->set_name("rows");
    ti->set_data_type(TP::INT64);
    for (auto d : {3, 1}) ti->add_dims(d);
    for (auto v : {2, 0, -1}) ti->add_int64_data(v);
    const std::vector<std::string> reductions = {"add", "mul", "max", "min"};
    for (const auto& r : reductions) {
        attr_string(add_node(g, "ScatterElements", {"D", "Pi", "U"}, {"SE_" + r}), "reduction", r);
        attr_string(add_node(g, "ScatterND", {"D", "rows", "W"}, {"SN_" + r}), "reduction", r);
        add_output(g, "SE_" + r);
        add_output(g, "SN_" + r);
    }
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "reduce.onnx");
    const std::vector<float> d = {0.5f, -1.25f, 2, 0.75f, 1.5f, -0.5f, 3, -2, 0.25f, 1, -1.5f, 2.5f},
                             u = {1.5f, -2, 0.5f, 3, -0.75f, 2, 1.25f, -1, 2.5f, 0.5f, -3, 1.75f, -0.25f, 1, 2, -1.5f},
                             p = {0, 1, 2, 0, 2, 2, -1, 1, 0, 0, 0, -3, 1, -2, 2, 2},
                             w = {2, -1, 0.5f, 1.5f, -0.5f, 3, 1, -2, 1.25f, 0.75f, -1, 2};
    const auto matrix = [](const std::vector<float>& v, std::size_t rows) {
        Array<float> a = Array<float>::from_shape({rows, 4});
        std::copy(v.begin(), v.end(), a.data());
        return Tensor(a);
    };
    save_npy(tmp.path / "D.npy", matrix(d, 3));
    save_npy(tmp.path / "U.npy", matrix(u, 4));
    save_npy(tmp.path / "P.npy", matrix(p, 4));
    save_npy(tmp.path / "W.npy", matrix(w, 3));
    const CliResult run =
        run_cli("run reduce.onnx --input D=D.npy --input U=U.npy --input P=P.npy --input W=W.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(run.code == 0, run.err);
    const auto combine = [](const std::string& r, float y, float v) {
        return r == "add" ? y + v : r == "mul" ? y * v : r == "max" ? std::max(y, v) : std::min(y, v);
    };
    for (const auto& r : reductions) {
        std::vector<float> se = d, sn = d;
        for (std::size_t e = 0; e < 16; ++e) {  // along axis 0: row p[e] (negative from the end), column e % 4
            const auto row = static_cast<std::size_t>(p[e] + 3) % 3;
            se[row * 4 + e % 4] = combine(r, se[row * 4 + e % 4], u[e]);
        }
        const std::size_t rows[3] = {2, 0, 2};
        for (std::size_t t = 0; t < 3; ++t)
            for (std::size_t c = 0; c < 4; ++c) sn[rows[t] * 4 + c] = combine(r, sn[rows[t] * 4 + c], w[t * 4 + c]);
        const Tensor a = load_npy(tmp.path / "t" / ("SE_" + r + ".npy")),
                     b = load_npy(tmp.path / "t" / ("SN_" + r + ".npy"));
        for (std::size_t i = 0; i < 12; ++i) {
            BOOST_TEST(a.at_flat(i) == se[i], "SE_" << r << "[" << i << "]");
            BOOST_TEST(b.at_flat(i) == sn[i], "SN_" << r << "[" << i << "]");
        }
    }
    const OrtCheck ort = ort_check(tmp.path / "reduce.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 8, ort.report);
    // every input a constant: the scatters fold at import, to the same numbers
    onnx::GraphProto c;
    for (const auto& [name, values, rows] : {std::tuple{"D", d, 3}, std::tuple{"U", u, 4}, std::tuple{"W", w, 3}}) {
        auto* t = c.add_initializer();
        t->set_name(name);
        t->set_data_type(TP::FLOAT);
        for (auto dim : {rows, 4}) t->add_dims(dim);
        for (float v : values) t->add_float_data(v);
    }
    c.add_initializer()->CopyFrom(*ti);
    attr_string(add_node(c, "ScatterND", {"D", "rows", "W"}, {"F"}), "reduction", "mul");
    add_output(c, "F");
    onnx::ModelProto mc = model_of(c);
    mc.mutable_opset_import(0)->set_version(18);
    write(mc, tmp.path / "folded.onnx");
    const CliResult folded = run_cli("run folded.onnx --trace f", tmp.path);
    BOOST_TEST_REQUIRE(folded.code == 0, folded.err);
    std::vector<float> want = d;
    for (std::size_t t = 0; t < 3; ++t)
        for (std::size_t col = 0; col < 4; ++col) want[(t == 1 ? 0 : 2) * 4 + col] *= w[t * 4 + col];
    const Tensor f = load_npy(tmp.path / "f" / "F.npy");
    BOOST_TEST_REQUIRE(f.size() == 12u);
    for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(f.at_flat(i) == want[i], "F[" << i << "]");
    BOOST_TEST(slurp(tmp.path / "f" / "manifest.json").find("\"ScatterND\"") == std::string::npos);
}

// Conv as torch and other exporters write it: 2-D with groups, strides, dilations and uneven
// pads (weights as initializers), 1-D with auto_pad SAME_UPPER and SAME_LOWER (uneven: the
// odd pad at the end or the start) and W a graph input, 3-D with VALID and kernel_shape: against
// ONNX Runtime. Bad attributes: one error line each. (Numbers by the definition:
// tests/test_op_conv.cpp; gradients against PyTorch: test_onnx_torch.)
BOOST_AUTO_TEST_CASE(conv_in_one_to_three_dimensions_matches_onnx_runtime) {
    TempDir tmp;
    const auto values = [](std::size_t n, float scale, float shift) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) - shift;
        return v;
    };
    onnx::GraphProto g;
    add_input(g, "X", {1, 4, 7, 6});
    add_input(g, "X1", {2, 3, 10});
    add_input(g, "W1", {2, 3, 4});
    add_input(g, "X3", {1, 2, 4, 4, 3});
    add_init(g, "W", {6, 2, 3, 2}, values(72, 0.25f, 1.0f));
    add_init(g, "B", {6}, values(6, 0.5f, 2.0f));
    add_init(g, "W3", {2, 2, 2, 2, 2}, values(32, 0.125f, 0.5f));
    auto* c2 = add_node(g, "Conv", {"X", "W", "B"}, {"C2"});
    attr_int(c2, "group", 2);
    attr_ints(c2, "strides", {2, 1});
    attr_ints(c2, "pads", {1, 0, 2, 1});
    attr_ints(c2, "dilations", {2, 1});
    attr_ints(add_node(g, "Conv", {"X1", "W1"}, {"UP"}), "strides", {3});
    attr_string(g.mutable_node(1), "auto_pad", "SAME_UPPER");
    attr_ints(add_node(g, "Conv", {"X1", "W1"}, {"LO"}), "strides", {3});
    attr_string(g.mutable_node(2), "auto_pad", "SAME_LOWER");
    auto* c3 = add_node(g, "Conv", {"X3", "W3"}, {"C3"});
    attr_string(c3, "auto_pad", "VALID");
    attr_ints(c3, "kernel_shape", {2, 2, 2});
    for (const char* o : {"C2", "UP", "LO", "C3"}) add_output(g, o);
    write(model_of(g), tmp.path / "conv.onnx");
    const auto save = [&](const std::string& name, const Shape& shape, float scale, float shift) {
        Array<float> a = Array<float>::from_shape(shape);
        const std::vector<float> v = values(a.size(), scale, shift);
        std::copy(v.begin(), v.end(), a.data());
        save_npy(tmp.path / (name + ".npy"), Tensor(a));
    };
    save("X", {1, 4, 7, 6}, 0.5f, 2.5f);
    save("X1", {2, 3, 10}, 0.25f, 1.0f);
    save("W1", {2, 3, 4}, 0.75f, 3.0f);
    save("X3", {1, 2, 4, 4, 3}, 0.5f, 2.0f);
    const CliResult r = run_cli(
        "run conv.onnx --input X=X.npy --input X1=X1.npy --input W1=W1.npy --input X3=X3.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    // the shapes: (7 + 3 - 5) / 2 + 1 = 3 rows, (6 + 1 - 2) + 1 = 6 columns; ceil(10 / 3) = 4
    const std::map<std::string, Shape> shapes = {
        {"C2", {1, 6, 3, 6}}, {"UP", {2, 2, 4}}, {"LO", {2, 2, 4}}, {"C3", {1, 2, 3, 3, 2}}};
    for (const auto& [name, shape] : shapes)
        BOOST_TEST((load_npy(tmp.path / "t" / (name + ".npy")).shape() == shape), name);
    const OrtCheck ort = ort_check(tmp.path / "conv.onnx", tmp.path / "t", "1e-5");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 4, ort.report);
    // SAME_UPPER and SAME_LOWER pad 3 in all: (1, 2) and (2, 1), so the outputs differ
    BOOST_TEST(slurp(tmp.path / "t" / "UP.npy") != slurp(tmp.path / "t" / "LO.npy"));

    const auto model = [&](const std::string& file, auto&& build) {
        onnx::GraphProto b;
        add_input(b, "X1", {2, 3, 10});
        add_input(b, "W1", {2, 3, 4});
        build(add_node(b, "Conv", {"X1", "W1"}, {"Y"}, "/conv"));
        add_output(b, "Y");
        write(model_of(b), tmp.path / file);
    };
    model("kernel.onnx", [](onnx::NodeProto* n) { attr_ints(n, "kernel_shape", {3}); });
    expect_one_error(tmp, "check kernel.onnx",
                     "kernel.onnx: node '/conv' (Conv): kernel_shape does not match W's spatial axes");
    model("pad.onnx", [](onnx::NodeProto* n) { attr_string(n, "auto_pad", "SAME"); });
    expect_one_error(tmp, "check pad.onnx",
                     "pad.onnx: node '/conv' (Conv): auto_pad 'SAME' is not one of NOTSET, SAME_UPPER, SAME_LOWER, "
                     "VALID; shapes (2x3x10), (2x3x4)");
    model("group.onnx", [](onnx::NodeProto* n) { attr_int(n, "group", 2); });
    expect_one_error(
        tmp, "check group.onnx",
        "group.onnx: node '/conv' (Conv): group 2 does not divide x's channels 3 and W's output channels 2");
    model("strides.onnx", [](onnx::NodeProto* n) { attr_ints(n, "strides", {1, 1}); });
    expect_one_error(tmp, "check strides.onnx",
                     "strides.onnx: node '/conv' (Conv): strides has 2 entries, 1 needed for 1 spatial axes");
}

// BatchNormalization (inference: constant statistics, 4-D x, an epsilon of its own) and
// InstanceNormalization (3-D x, scale a graph input: reshaped per channel at run time, B a
// constant): against ONNX Runtime, and the batch norm's gradient, a per-channel constant
// scale / √(var + ε), by hand. Training mode and computed statistics: one error line each.
BOOST_AUTO_TEST_CASE(batch_and_instance_normalization_match_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3, 4, 5});
    add_input(g, "Xi", {2, 3, 7});
    add_input(g, "S", {3});
    const std::vector<float> scale = {0.5f, 1.5f, -2}, bias = {0.25f, -1, 0.5f}, mean = {0.1f, -0.3f, 2},
                             var = {0.8f, 1.7f, 0.05f};
    add_init(g, "scale", {3}, scale);
    add_init(g, "bias", {3}, bias);
    add_init(g, "mean", {3}, mean);
    add_init(g, "var", {3}, var);
    attr_float(add_node(g, "BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"BN"}), "epsilon", 1e-3f);
    attr_float(add_node(g, "InstanceNormalization", {"Xi", "S", "bias"}, {"IN"}), "epsilon", 1e-4f);
    add_output(g, "BN");
    add_output(g, "IN");
    write(model_of(g), tmp.path / "norms.onnx");
    Array<float> x = Array<float>::from_shape({2, 3, 4, 5}), xi = Array<float>::from_shape({2, 3, 7});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = 0.125f * static_cast<float>((i * 5) % 17) - 1;
    for (std::size_t i = 0; i < xi.size(); ++i) xi.data()[i] = 0.25f * static_cast<float>((i * 3) % 13) - 1.5f;
    save_npy(tmp.path / "X.npy", Tensor(x));
    save_npy(tmp.path / "Xi.npy", Tensor(xi));
    save_npy(tmp.path / "S.npy", Tensor(Array<float>({0.75f, -1.25f, 2})));
    const std::string inputs = " --input X=X.npy --input Xi=Xi.npy --input S=S.npy";
    const CliResult r = run_cli("run norms.onnx" + inputs + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const OrtCheck ort = ort_check(tmp.path / "norms.onnx", tmp.path / "t", "1e-5");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 2, ort.report);
    const CliResult gr = run_cli("grad norms.onnx" + inputs + " --wrt X --trace g", tmp.path);
    BOOST_TEST_REQUIRE(gr.code == 0, gr.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X"));
    for (std::size_t i = 0; i < x.size(); ++i) {
        const std::size_t c = (i / 20) % 3;
        const double want = double(scale[c]) / std::sqrt(double(var[c]) + double(1e-3f));
        BOOST_TEST(std::abs(dx.at_flat(i) - want) <= 1e-6 * std::abs(want), "dX[" << i << "]");
    }

    const auto model = [&](const std::string& file, auto&& build) {
        onnx::GraphProto b;
        add_input(b, "X", {2, 3, 4});
        add_input(b, "M", {3});
        add_init(b, "scale", {3}, scale);
        add_init(b, "bias", {3}, bias);
        add_init(b, "mean", {3}, mean);
        add_init(b, "var", {3}, var);
        build(b);
        add_output(b, "Y");
        write(model_of(b), tmp.path / file);
    };
    model("train.onnx", [](onnx::GraphProto& b) {
        attr_int(add_node(b, "BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"Y"}, "/bn"),
                 "training_mode", 1);
    });
    expect_one_error(tmp, "check train.onnx",
                     "train.onnx: node '/bn' (BatchNormalization): training_mode 1 (batch statistics) is not "
                     "supported, only inference; shapes (2x3x4), (3), (3), (3), (3)");
    model("computed.onnx", [](onnx::GraphProto& b) {
        add_node(b, "BatchNormalization", {"X", "scale", "bias", "M", "var"}, {"Y"}, "/bn");
    });
    expect_one_error(tmp, "check computed.onnx",
                     "computed.onnx: node '/bn' (BatchNormalization): input_mean 'M' is computed from the graph's "
                     "inputs: only constant statistics and weights are supported (inference mode)");
}

// GroupNormalization at opset 18 (scale and bias per group: scale a constant, bias a graph
// input, reshaped at run time) and at opset 21 (per channel: the other way round; 3-D x, an
// epsilon of its own): against a plain loop in double (statistics per sample and group over
// the group's channels and positions) and against ONNX Runtime. A missing num_groups, one
// that does not divide the channels, and opset 18's scale given per channel: one line each.
BOOST_AUTO_TEST_CASE(group_normalization_matches_a_plain_loop_and_onnx_runtime) {
    TempDir tmp;
    struct Case {
        std::string file;
        std::int64_t opset;
        std::vector<std::int64_t> x_dims;
        std::int64_t groups;
        float epsilon;
    };
    const std::vector<Case> cases = {{"gn18.onnx", 18, {2, 6, 3, 4}, 3, 1e-5f}, {"gn21.onnx", 21, {2, 6, 5}, 2, 1e-3f}};
    for (const Case& c : cases) {
        const std::size_t channels = 6, affine = c.opset < 21 ? static_cast<std::size_t>(c.groups) : channels;
        std::vector<float> constant(affine), given(affine);
        for (std::size_t i = 0; i < affine; ++i) {
            constant[i] = 0.5f + 0.25f * static_cast<float>(i);
            given[i] = -0.75f + 0.5f * static_cast<float>(i % 3);
        }
        onnx::GraphProto g;
        add_input(g, "X", c.x_dims);
        add_input(g, "P", {static_cast<std::int64_t>(affine)});
        add_init(g, "K", {static_cast<std::int64_t>(affine)}, constant);
        // opset 18: scale K (constant), bias P; opset 21: scale P, bias K
        auto* n = add_node(
            g, "GroupNormalization",
            c.opset < 21 ? std::vector<std::string>{"X", "K", "P"} : std::vector<std::string>{"X", "P", "K"}, {"Y"});
        attr_int(n, "num_groups", c.groups);
        attr_float(n, "epsilon", c.epsilon);
        add_output(g, "Y");
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(c.opset);
        write(m, tmp.path / c.file);

        std::vector<std::size_t> shape(c.x_dims.begin(), c.x_dims.end());
        Array<float> x = Array<float>::from_shape(shape);
        for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = 0.2f * static_cast<float>((i * 7) % 11) - 1;
        save_npy(tmp.path / "X.npy", Tensor(x));
        Array<float> p = Array<float>::from_shape({affine});
        std::copy(given.begin(), given.end(), p.data());
        save_npy(tmp.path / "P.npy", Tensor(p));
        const std::string trace = "t" + std::to_string(c.opset);
        const CliResult r = run_cli("run " + c.file + " --input X=X.npy --input P=P.npy --trace " + trace, tmp.path);
        BOOST_TEST_REQUIRE(r.code == 0, r.err);
        const Tensor y = load_npy(tmp.path / trace / "Y.npy");
        BOOST_TEST_REQUIRE(y.size() == x.size());

        const std::size_t batch = shape[0], per_channel = x.size() / (batch * channels),
                          per_group = channels / static_cast<std::size_t>(c.groups);
        const std::vector<float>& scale = c.opset < 21 ? constant : given;
        const std::vector<float>& bias = c.opset < 21 ? given : constant;
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t gr = 0; gr < static_cast<std::size_t>(c.groups); ++gr) {
                const std::size_t first = (b * channels + gr * per_group) * per_channel,
                                  count = per_group * per_channel;
                double mean = 0, var = 0;
                for (std::size_t i = 0; i < count; ++i) mean += x.data()[first + i];
                mean /= static_cast<double>(count);
                for (std::size_t i = 0; i < count; ++i)
                    var += (x.data()[first + i] - mean) * (x.data()[first + i] - mean);
                var /= static_cast<double>(count);
                for (std::size_t i = 0; i < count; ++i) {
                    const std::size_t channel = gr * per_group + i / per_channel,
                                      k = c.opset < 21 ? gr : channel;  // which scale and bias
                    const double want =
                        (x.data()[first + i] - mean) / std::sqrt(var + double(c.epsilon)) * scale[k] + bias[k];
                    BOOST_TEST(std::abs(y.at_flat(first + i) - want) <= 2e-6 * std::max(1.0, std::abs(want)),
                               c.file << " Y[" << first + i << "] = " << y.at_flat(first + i) << ", want " << want);
                }
            }
        const OrtCheck ort = ort_check(tmp.path / c.file, tmp.path / trace, "1e-5");
        BOOST_TEST(ort.status == 0, c.file << ": " << ort.report);
        BOOST_TEST(ort.lines() == 1, c.file << ": " << ort.report);
    }

    const auto model = [&](const std::string& file, std::int64_t opset, std::size_t affine, auto&& attrs) {
        onnx::GraphProto b;
        add_input(b, "X", {2, 6, 4});
        add_init(b, "S", {static_cast<std::int64_t>(affine)}, std::vector<float>(affine, 1.0f));
        attrs(add_node(b, "GroupNormalization", {"X", "S", "S"}, {"Y"}, "/gn"));
        add_output(b, "Y");
        onnx::ModelProto m = model_of(b);
        m.mutable_opset_import(0)->set_version(opset);
        write(m, tmp.path / file);
    };
    model("no_groups.onnx", 21, 6, [](onnx::NodeProto*) {});
    expect_one_error(tmp, "check no_groups.onnx",
                     "no_groups.onnx: node '/gn' (GroupNormalization): the attribute num_groups is required; shapes "
                     "(2x6x4), (6), (6)");
    model("four.onnx", 21, 6, [](onnx::NodeProto* n) { attr_int(n, "num_groups", 4); });
    expect_one_error(tmp, "check four.onnx",
                     "four.onnx: node '/gn' (GroupNormalization): num_groups 4 does not divide x's channels 6");
    model("per_channel_18.onnx", 18, 6, [](onnx::NodeProto* n) { attr_int(n, "num_groups", 3); });
    expect_one_error(tmp, "check per_channel_18.onnx",
                     "per_channel_18.onnx: node '/gn' (GroupNormalization): scale must be (3), num_groups (opset 18; "
                     "per channel from 21); shapes (2x6x4), (6), (6)");
}

// GlobalAveragePool (4-D x) and GlobalMaxPool (3-D x): each (n, c)'s mean and maximum over its
// positions, by a plain loop, and against ONNX Runtime; the gradient of the sum of both
// outputs reaches every position by 1/positions and the maximum (distinct values) by 1 more.
// x without spatial axes: one line.
BOOST_AUTO_TEST_CASE(global_pools_match_a_plain_loop_and_onnx_runtime) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {2, 3, 4, 5});
    add_input(g, "Z", {2, 3, 7});
    add_node(g, "GlobalAveragePool", {"X"}, {"A"});
    add_node(g, "GlobalMaxPool", {"Z"}, {"M"});
    add_output(g, "A");
    add_output(g, "M");
    write(model_of(g), tmp.path / "pools.onnx");
    Array<float> x = Array<float>::from_shape({2, 3, 4, 5}), z = Array<float>::from_shape({2, 3, 7});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = 0.125f * static_cast<float>((i * 7) % 23) - 1;
    for (std::size_t i = 0; i < z.size(); ++i) z.data()[i] = 0.5f * static_cast<float>((i * 5) % 42) - 3;
    save_npy(tmp.path / "X.npy", Tensor(x));
    save_npy(tmp.path / "Z.npy", Tensor(z));
    const std::string inputs = " --input X=X.npy --input Z=Z.npy";
    const CliResult r = run_cli("run pools.onnx" + inputs + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor a = load_npy(tmp.path / "t" / "A.npy"), m = load_npy(tmp.path / "t" / "M.npy");
    BOOST_TEST((a.shape() == std::vector<std::size_t>{2, 3, 1, 1}));
    BOOST_TEST((m.shape() == std::vector<std::size_t>{2, 3, 1}));
    std::vector<std::size_t> argmax(6);
    for (std::size_t nc = 0; nc < 6; ++nc) {
        double sum = 0;
        for (std::size_t i = 0; i < 20; ++i) sum += x.data()[nc * 20 + i];
        BOOST_TEST(std::abs(a.at_flat(nc) - sum / 20) <= 1e-6, "A[" << nc << "]");
        argmax[nc] = nc * 7;
        for (std::size_t i = 1; i < 7; ++i)
            if (z.data()[nc * 7 + i] > z.data()[argmax[nc]]) argmax[nc] = nc * 7 + i;
        BOOST_TEST(m.at_flat(nc) == z.data()[argmax[nc]], "M[" << nc << "]");
    }
    const OrtCheck ort = ort_check(tmp.path / "pools.onnx", tmp.path / "t", "1e-6");
    BOOST_TEST(ort.status == 0, ort.report);
    BOOST_TEST(ort.lines() == 2, ort.report);
    const CliResult gr = run_cli("grad pools.onnx" + inputs + " --wrt X,Z --trace g", tmp.path);
    BOOST_TEST_REQUIRE(gr.code == 0, gr.err);
    const Tensor dx = load_npy(grad_file(tmp.path / "g", "X")), dz = load_npy(grad_file(tmp.path / "g", "Z"));
    for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(dx.at_flat(i) == double(1.0f / 20), "dX[" << i << "]");
    for (std::size_t i = 0; i < z.size(); ++i)
        BOOST_TEST(dz.at_flat(i) == (i == argmax[i / 7] ? 1.0 : 0.0), "dZ[" << i << "]");

    onnx::GraphProto flat;
    add_input(flat, "X", {2, 3});
    add_node(flat, "GlobalMaxPool", {"X"}, {"Y"}, "/pool");
    add_output(flat, "Y");
    write(model_of(flat), tmp.path / "flat.onnx");
    expect_one_error(
        tmp, "check flat.onnx",
        "flat.onnx: node '/pool' (GlobalMaxPool): x must be (N, C, D1, ...), with spatial axes; shapes (2x3)");
}

// AveragePool, 2-D with uneven pads left out of the count, 1-D with the pads counted, 2-D
// auto_pad SAME_UPPER, and ceil_mode where it adds no window: against a plain loop (each
// window's taps inside x summed, divided by those taps or by the whole window), ONNX Runtime,
// and d sum(Y) / dx, each x element's 1/divisor summed over the windows that hold it. A
// ceil_mode that adds a partial window and a missing kernel_shape: one line each.
BOOST_AUTO_TEST_CASE(average_pool_matches_a_plain_loop_and_onnx_runtime) {
    TempDir tmp;
    struct Case {
        std::string name;
        std::vector<std::int64_t> x_dims, kernel, strides, pads;  // pads: begins, then ends
        std::string auto_pad;                                     // "" or SAME_UPPER (then pads are derived)
        bool count_include_pad, ceil_mode;
    };
    const std::vector<Case> cases = {
        {"uneven", {1, 3, 6, 7}, {3, 2}, {2, 1}, {1, 0, 1, 1}, "", false, false},
        {"counted", {2, 4, 9}, {3}, {2}, {1, 1}, "", true, false},
        {"same", {1, 2, 5, 4}, {3, 3}, {2, 1}, {1, 1, 1, 1}, "SAME_UPPER", false, false},
        {"ceil", {1, 2, 7}, {3}, {2}, {0, 0}, "", false, true},
    };
    for (const Case& c : cases) {
        onnx::GraphProto g;
        add_input(g, "X", c.x_dims);
        auto* n = add_node(g, "AveragePool", {"X"}, {"Y"});
        attr_ints(n, "kernel_shape", c.kernel);
        attr_ints(n, "strides", c.strides);
        if (c.auto_pad.empty())
            attr_ints(n, "pads", c.pads);
        else
            attr_string(n, "auto_pad", c.auto_pad);
        attr_int(n, "count_include_pad", c.count_include_pad ? 1 : 0);
        if (c.ceil_mode) attr_int(n, "ceil_mode", 1);
        add_output(g, "Y");
        write(model_of(g), tmp.path / (c.name + ".onnx"));
        std::vector<std::size_t> shape(c.x_dims.begin(), c.x_dims.end());
        Array<float> x = Array<float>::from_shape(shape);
        for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = 0.25f * static_cast<float>((i * 7) % 19) - 2;
        save_npy(tmp.path / "X.npy", Tensor(x));
        const CliResult r = run_cli("run " + c.name + ".onnx --input X=X.npy --trace t_" + c.name, tmp.path);
        BOOST_TEST_REQUIRE(r.code == 0, c.name << ": " << r.err);
        const CliResult gr = run_cli("grad " + c.name + ".onnx --input X=X.npy --wrt X --trace g_" + c.name, tmp.path);
        BOOST_TEST_REQUIRE(gr.code == 0, c.name << ": " << gr.err);
        const Tensor y = load_npy(tmp.path / ("t_" + c.name) / "Y.npy");
        const Tensor dx = load_npy(grad_file(tmp.path / ("g_" + c.name), "X"));

        // the plain loop over every output position
        const std::size_t k = shape.size() - 2, planes = shape[0] * shape[1];
        std::vector<std::size_t> out(k);
        std::size_t in_size = 1, out_size = 1;
        for (std::size_t d = 0; d < k; ++d) {
            out[d] = (shape[d + 2] + c.pads[d] + c.pads[d + k] - c.kernel[d]) / c.strides[d] + 1;
            in_size *= shape[d + 2];
            out_size *= out[d];
        }
        BOOST_TEST_REQUIRE(y.size() == planes * out_size, c.name);
        std::vector<double> want_dx(x.size(), 0.0);
        for (std::size_t p = 0; p < planes; ++p)
            for (std::size_t o = 0; o < out_size; ++o) {
                std::vector<long> start(k);
                for (std::size_t d = k, rest = o; d-- > 0; rest /= out[d])
                    start[d] = static_cast<long>(rest % out[d]) * c.strides[d] - c.pads[d];
                std::size_t taps = 1;
                for (auto w : c.kernel) taps *= static_cast<std::size_t>(w);
                double sum = 0;
                std::size_t inside = 0;
                std::vector<std::size_t> held;
                for (std::size_t t = 0; t < taps; ++t) {
                    long flat = 0;
                    bool in = true;
                    for (std::size_t d = 0, rest = t, stride = taps; d < k; ++d) {
                        stride /= static_cast<std::size_t>(c.kernel[d]);
                        const long pos = start[d] + static_cast<long>(rest / stride);
                        rest %= stride;
                        in = in && pos >= 0 && pos < static_cast<long>(shape[d + 2]);
                        flat = flat * static_cast<long>(shape[d + 2]) + pos;
                    }
                    if (!in) continue;
                    held.push_back(p * in_size + static_cast<std::size_t>(flat));
                    sum += x.data()[held.back()];
                    ++inside;
                }
                const double divisor = static_cast<double>(c.count_include_pad ? taps : inside);
                BOOST_TEST(std::abs(y.at_flat(p * out_size + o) - sum / divisor) <= 1e-6,
                           c.name << " Y[" << p * out_size + o << "] = " << y.at_flat(p * out_size + o) << ", want "
                                  << sum / divisor);
                for (std::size_t i : held) want_dx[i] += 1 / divisor;
            }
        for (std::size_t i = 0; i < x.size(); ++i)
            BOOST_TEST(std::abs(dx.at_flat(i) - want_dx[i]) <= 1e-6, c.name << " dX[" << i << "]");
        const OrtCheck ort = ort_check(tmp.path / (c.name + ".onnx"), tmp.path / ("t_" + c.name), "1e-6");
        BOOST_TEST(ort.status == 0, c.name << ": " << ort.report);
        BOOST_TEST(ort.lines() == 1, c.name << ": " << ort.report);
    }

    const auto model = [&](const std::string& file, auto&& attrs) {
        onnx::GraphProto b;
        add_input(b, "X", {1, 2, 8});
        attrs(add_node(b, "AveragePool", {"X"}, {"Y"}, "/pool"));
        add_output(b, "Y");
        write(model_of(b), tmp.path / file);
    };
    model("partial.onnx", [](onnx::NodeProto* n) {
        attr_ints(n, "kernel_shape", {3});
        attr_ints(n, "strides", {2});
        attr_int(n, "ceil_mode", 1);
    });
    expect_one_error(tmp, "check partial.onnx",
                     "partial.onnx: node '/pool' (AveragePool): ceil_mode 1 adds a partial window at the end of "
                     "spatial axis 0, which is not supported; shapes (1x2x8)");
    model("no_kernel.onnx", [](onnx::NodeProto*) {});
    expect_one_error(tmp, "check no_kernel.onnx",
                     "no_kernel.onnx: node '/pool' (AveragePool): the attribute kernel_shape is required; shapes "
                     "(1x2x8)");
}

// A graph output that is another value under a new name (Identity, a Cast that needs no node)
// is a node of its own name: `run` prints it and the trace holds it under the model's name,
// with the value it passes on
BOOST_AUTO_TEST_CASE(an_output_that_is_another_value_is_traced_under_its_own_name) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {3});
    add_node(g, "Relu", {"X"}, {"R"});
    add_node(g, "Identity", {"R"}, {"Y"});
    attr_int(add_node(g, "Cast", {"X"}, {"Z"}), "to", TP::DOUBLE);
    add_output(g, "R");
    add_output(g, "Y");
    add_output(g, "Z");
    write(model_of(g), tmp.path / "alias.onnx");
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({-1.5f, 2.0f, 0.25f})));
    const CliResult r = run_cli("run alias.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    BOOST_TEST(r.out.find("Y") != std::string::npos, r.out);
    const std::vector<double> relu = {0, 2, 0.25}, x = {-1.5, 2, 0.25};
    for (const auto& [name, want] : std::map<std::string, std::vector<double>>{{"R", relu}, {"Y", relu}, {"Z", x}}) {
        const Tensor t = load_npy(tmp.path / "t" / (name + ".npy"));
        BOOST_TEST_REQUIRE(t.size() == 3u, name);
        for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(t.at_flat(i) == want[i], name << "[" << i << "]");
    }
}

// ReduceLogSumExp with infinities: torch.logsumexp's values (a +inf gives inf, a row of −inf
// gives −inf; max − max would be NaN in both), and a row of finite values as before
BOOST_AUTO_TEST_CASE(log_sum_exp_of_infinities_is_torchs) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {3, 3});
    add_init_i64(g, "ax1", {1});
    attr_int(add_node(g, "ReduceLogSumExp", {"X", "ax1"}, {"LSE"}), "keepdims", 0);
    add_output(g, "LSE");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(18);
    write(m, tmp.path / "lse.onnx");
    const float inf = std::numeric_limits<float>::infinity();
    save_npy(tmp.path / "X.npy", Tensor(Array<float>({{1, inf, 2}, {-inf, -inf, -inf}, {1, 2, -inf}})));
    const CliResult r = run_cli("run lse.onnx --input X=X.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "LSE.npy");
    BOOST_TEST(y.at_flat(0) == double(inf));
    BOOST_TEST(y.at_flat(1) == -double(inf));
    BOOST_TEST(std::fabs(y.at_flat(2) - (2 + std::log1p(std::exp(-1.0)))) <= 1e-6);
}

// CumSum of constants folds at import (position ids from a constant mask), summed in order
BOOST_AUTO_TEST_CASE(cumsum_of_constants_folds) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "X", {4});
    add_init_i64(g, "mask", {1, 1, 0, 1});
    add_init_i64(g, "zero", {0});
    add_node(g, "CumSum", {"mask", "zero"}, {"pos"});
    attr_int(add_node(g, "Cast", {"pos"}, {"posf"}), "to", TP::FLOAT);
    add_node(g, "Add", {"X", "posf"}, {"Y"});
    add_output(g, "Y");
    write(model_of(g), tmp.path / "pos.onnx");
    const CliResult r = run_cli("run pos.onnx --trace t", tmp.path);  // X holds zeros
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "Y.npy");
    const std::vector<double> want = {1, 2, 2, 3};
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(y.at_flat(i) == want[i], i);
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "t" / "manifest.json"));
    for (const auto& e : manifest["entries"]) BOOST_TEST(e.value("op", std::string()) != "MatMul");
}

BOOST_AUTO_TEST_CASE(bad_tile_pad_cumsum_prelu_nodes_give_one_error_line) {
    TempDir tmp;
    const auto model = [&](const std::string& file, auto&& build, std::int64_t opset = 18) {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        add_init_i64(g, "one", {1});
        add_init_i64(g, "pads", {0, -1, 0, 2});
        add_init(g, "pair", {2}, {0.5f, 1.0f});
        build(g);
        add_output(g, "Y");
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(opset);
        write(m, tmp.path / file);
    };
    model("wrap.onnx", [](onnx::GraphProto& g) {
        attr_string(add_node(g, "Pad", {"X", "pads"}, {"Y"}, "/pad"), "mode", "wrap");
    });
    expect_one_error(
        tmp, "check wrap.onnx",
        "wrap.onnx: node '/pad' (Pad): mode 'wrap' is not one of constant, edge, reflect; shapes (2x3), (4)");
    model("reflect.onnx", [](onnx::GraphProto& g) {
        attr_string(add_node(g, "Pad", {"X", "pads"}, {"Y"}, "/pad"), "mode", "reflect");
    });
    expect_one_error(tmp, "check reflect.onnx",
                     "reflect.onnx: node '/pad' (Pad): pads -1, 2 on axis 1 both crop and pad in mode 'reflect', "
                     "which runtimes read differently; shapes (2x3), (4)");
    // an empty axis (an empty Slice of X) has nothing to pad with in edge mode
    model("empty.onnx", [](onnx::GraphProto& g) {
        add_init_i64(g, "zero", {0});
        add_init_i64(g, "edges", {0, 1, 0, 1});
        add_node(g, "Slice", {"X", "zero", "zero", "one"}, {"E"}, "/slice");
        attr_string(add_node(g, "Pad", {"E", "edges"}, {"Y"}, "/pad"), "mode", "edge");
    });
    expect_one_error(tmp, "check empty.onnx",
                     "empty.onnx: node '/pad' (Pad): axis 1 is empty: there is nothing to pad it with in mode 'edge'; "
                     "shapes (2x0), (4)");
    model("tile.onnx", [](onnx::GraphProto& g) { add_node(g, "Tile", {"X", "one"}, {"Y"}, "/tile"); });
    expect_one_error(tmp, "check tile.onnx",
                     "tile.onnx: node '/tile' (Tile): 1 repeats for rank 2 (one per axis); shapes (2x3), (1)");
    // an output that grows is checked against the memory limit before anything is allocated
    model("huge.onnx", [](onnx::GraphProto& g) {
        add_init_i64(g, "many", {1 << 20, 1 << 20});
        add_node(g, "Tile", {"X", "many"}, {"Y"}, "/tile");
    });
    expect_one_error(tmp, "check huge.onnx",
                     "huge.onnx: node '/tile' (Tile): the output of shape (1048576x2x1048576x3) has 6597069766656 "
                     "elements, over the limit of ");  // (the limit depends on the machine's memory)
    model("prelu.onnx", [](onnx::GraphProto& g) { add_node(g, "PRelu", {"X", "pair"}, {"Y"}, "/act"); });
    expect_one_error(tmp, "check prelu.onnx",
                     "prelu.onnx: node '/act' (PRelu): slope does not broadcast to x's shape (PRelu's slope "
                     "stretches to x, one way); shapes (2x3), (2)");
    // a NaN where an integer is expected, in a computed node and in a folded one (a cast to
    // int64 of NaN is undefined behaviour)
    model("nan_axis.onnx", [](onnx::GraphProto& g) {
        add_init(g, "nan", {}, {std::numeric_limits<float>::quiet_NaN()});
        add_node(g, "CumSum", {"X", "nan"}, {"Y"}, "/cs");
    });
    expect_one_error(tmp, "check nan_axis.onnx",
                     "nan_axis.onnx: node '/cs' (CumSum): axis 'nan' holds NaN where an integer is expected; shapes "
                     "(2x3), ()");
    model("nan_fold.onnx", [](onnx::GraphProto& g) {
        add_init(g, "nan", {}, {std::numeric_limits<float>::quiet_NaN()});
        add_node(g, "CumSum", {"pair", "nan"}, {"C"}, "/cs");
        add_node(g, "Add", {"X", "C"}, {"Y"});
    });
    expect_one_error(tmp, "check nan_fold.onnx",
                     "nan_fold.onnx: node '/cs' (CumSum): a NaN where an integer is expected");
    model("cumsum.onnx", [](onnx::GraphProto& g) { add_node(g, "CumSum", {"X", "X"}, {"Y"}, "/cs"); });
    expect_one_error(tmp, "check cumsum.onnx",
                     "cumsum.onnx: node '/cs' (CumSum): axis 'X' is computed from the graph's inputs, not a "
                     "constant: its value cannot be resolved statically; shapes (2x3), (2x3)");
}

// numpy's einsum by plain loops over every assignment of the letters. `eq` is explicit
// ("ab,bc->ac", no "..."); a letter's size is the largest an operand gives it, and an axis of
// size 1 is read at 0 (broadcast); a letter repeated within a term reads one index twice (a
// diagonal).
std::vector<double> einsum_reference(const std::string& eq, const std::vector<Tensor>& ops, Shape* out_shape) {
    const auto arrow = eq.find("->");
    std::vector<std::string> terms;
    for (std::size_t b = 0;;) {
        const auto e = eq.find(',', b);
        terms.push_back(eq.substr(b, std::min(e, arrow) - b));
        if (e == std::string::npos || e > arrow) break;
        b = e + 1;
    }
    const std::string out = eq.substr(arrow + 2);
    std::map<char, std::size_t> size;
    for (std::size_t k = 0; k < ops.size(); ++k)
        for (std::size_t a = 0; a < terms[k].size(); ++a)
            size[terms[k][a]] = std::max(size[terms[k][a]], ops[k].shape()[a]);
    out_shape->clear();
    for (char c : out) out_shape->push_back(size[c]);
    std::vector<double> y(element_count(*out_shape), 0.0);
    std::vector<char> letters;
    for (const auto& [c, n] : size) letters.push_back(c);
    std::map<char, std::size_t> at;
    for (char c : letters) at[c] = 0;
    auto offset = [&](const std::string& term, const Shape& shape) {
        std::size_t o = 0;
        for (std::size_t a = 0; a < term.size(); ++a) o = o * shape[a] + (shape[a] == 1 ? 0 : at[term[a]]);
        return o;
    };
    for (;;) {
        double p = 1;
        for (std::size_t k = 0; k < ops.size(); ++k) p *= ops[k].at_flat(offset(terms[k], ops[k].shape()));
        y[offset(out, *out_shape)] += p;
        std::size_t i = letters.size();  // the odometer's next step
        while (i > 0 && ++at[letters[i - 1]] == size[letters[i - 1]]) at[letters[--i]] = 0;
        if (i == 0) break;
    }
    return y;
}

struct EinsumCase {
    std::string equation;   // as the model writes it
    std::string reference;  // the same, explicit and without "...", for einsum_reference
    std::vector<Shape> shapes;
    std::vector<std::string> ops;  // ops the lowering must use (traced), beside Reshape
    bool ort = true;               // in the ONNX Runtime comparison: its shape inference refuses "..." over
                                   // different ranks or sizes, which numpy broadcasts, and its kernel an
                                   // implicit output with capitals ("only lower-cased letters (a-z) and
                                   // upper-cased letters (A-Z)"), which numpy puts first
};

// ONNX's own node tests of Einsum (onnx/backend/test/case/node/einsum.py: transpose, sum,
// batch_diagonal, inner_prod, batch_matmul, scalar) and attention's einsums: scores and
// weights·values per head, a projection against a 2-D and a 3-D weight, keys shared by the
// heads (multi-query), three operands, an outer and an elementwise product, an implicit
// output (capitals sort first), "..." broadcasting (2x1 against 5), a triple diagonal
const std::vector<EinsumCase>& einsum_cases() {
    static const std::vector<EinsumCase> cases = {
        {"ij->ji", "ij->ji", {{3, 4}}, {"Transpose"}},
        {"ij->i", "ij->i", {{3, 4}}, {"ReduceSum"}},
        {"...ii ->...i", "aii->ai", {{3, 5, 5}}, {"Gather"}},
        {"i,i", "i,i->", {{5}, {5}}, {"MatMul"}},
        {"bij, bjk -> bik", "bij,bjk->bik", {{5, 2, 3}, {5, 3, 4}}, {"MatMul"}},
        {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}, {"Transpose", "MatMul"}},
        {"bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", {{2, 3, 4, 6}, {2, 3, 6, 5}}, {"MatMul"}},
        {"bsd,de->bse", "bsd,de->bse", {{2, 3, 4}, {4, 5}}, {"MatMul"}},
        {"bnd,dhe->bhne", "bnd,dhe->bhne", {{2, 3, 4}, {4, 2, 5}}, {"MatMul", "Transpose"}},
        {"bhqd,bkd->bhqk", "bhqd,bkd->bhqk", {{2, 3, 4, 5}, {2, 6, 5}}, {"MatMul"}},
        {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, {"MatMul"}},
        {"i,j->ij", "i,j->ij", {{3}, {4}}, {"Mul"}},
        {"ij,ij->ij", "ij,ij->ij", {{3, 4}, {3, 4}}, {"Mul"}},
        {"bi,bi->b", "bi,bi->b", {{3, 4}, {3, 4}}, {"MatMul"}},
        {"Ba,a", "Ba,a->B", {{3, 4}, {4}}, {"MatMul"}, false},
        {"ab,Bb", "ab,Bb->Ba", {{3, 4}, {2, 4}}, {"MatMul"}, false},
        {"ab,Bb->Ba", "ab,Bb->Ba", {{3, 4}, {2, 4}}, {"MatMul"}},
        {"...ij,...jk->...ik", "abij,abjk->abik", {{2, 5, 3, 4}, {2, 5, 4, 6}}, {"MatMul"}},
        {"...ij,...jk->...ik", "abij,bjk->abik", {{2, 5, 3, 4}, {5, 4, 6}}, {"MatMul"}, false},
        {"...ij,...jk->...ik", "abij,bjk->abik", {{2, 1, 3, 4}, {5, 4, 6}}, {"MatMul"}, false},
        {"ij,jk->ik", "ij,jk->ik", {{2, 1}, {3, 4}}, {"MatMul", "ReduceSum"}, false},
        {"iii->i", "iii->i", {{3, 3, 3}}, {"Gather"}},
        {"iij->j", "iij->j", {{3, 3, 4}}, {"Gather", "ReduceSum"}},
        {"ij->", "ij->", {{3, 4}}, {"ReduceSum"}},
    };
    return cases;
}

// Every case in one model (`ort_only`: the cases ONNX Runtime takes): inputs c<k>_<j>, outputs y<k>
onnx::ModelProto einsum_model(const std::vector<EinsumCase>& cases, bool ort_only = false) {
    onnx::GraphProto g;
    for (std::size_t k = 0; k < cases.size(); ++k) {
        if (ort_only && !cases[k].ort) continue;
        std::vector<std::string> in;
        for (std::size_t j = 0; j < cases[k].shapes.size(); ++j) {
            in.push_back("c" + std::to_string(k) + "_" + std::to_string(j));
            add_input(g, in.back(), std::vector<std::int64_t>(cases[k].shapes[j].begin(), cases[k].shapes[j].end()));
        }
        const std::string y = "y" + std::to_string(k);
        attr_string(add_node(g, "Einsum", in, {y}, "/einsum/" + std::to_string(k)), "equation", cases[k].equation);
        add_output(g, y);
    }
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(12);
    return m;
}

// Each case's input files (values from a fixed recurrence, in [-1, 1)), as --input arguments
std::string einsum_inputs(const TempDir& tmp, const std::vector<EinsumCase>& cases, bool ort_only = false) {
    std::string args;
    std::uint32_t state = 12345;
    for (std::size_t k = 0; k < cases.size(); ++k)
        for (std::size_t j = 0; j < (ort_only && !cases[k].ort ? 0 : cases[k].shapes.size()); ++j) {
            Tensor t = zeros(DType::f32, cases[k].shapes[j]);
            float* p = t.as<float>().data();
            for (std::size_t i = 0; i < t.size(); ++i) {
                state = state * 1664525u + 1013904223u;
                p[i] = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
            }
            const std::string name = "c" + std::to_string(k) + "_" + std::to_string(j);
            save_npy(tmp.path / (name + ".npy"), t);
            args += " --input " + name + "=" + name + ".npy";
        }
    return args;
}

// Runs every case in one model (inputs from einsum_inputs, every node traced to tmp/t) and
// checks each output against einsum_reference within `tolerance` (relative, absolute below 1);
// returns the trace's manifest
nlohmann::json run_einsums_against_the_plain_loops(const TempDir& tmp, const std::vector<EinsumCase>& cases,
                                                   double tolerance) {
    write(einsum_model(cases), tmp.path / "einsum.onnx");
    const CliResult r = run_cli("run einsum.onnx" + einsum_inputs(tmp, cases) + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    for (std::size_t k = 0; k < cases.size(); ++k) {
        std::vector<Tensor> ops;
        for (std::size_t j = 0; j < cases[k].shapes.size(); ++j)
            ops.push_back(load_npy(tmp.path / ("c" + std::to_string(k) + "_" + std::to_string(j) + ".npy")));
        Shape shape;
        const std::vector<double> want = einsum_reference(cases[k].reference, ops, &shape);
        const Tensor y = load_npy(tmp.path / "t" / ("y" + std::to_string(k) + ".npy"));
        BOOST_TEST_REQUIRE((y.shape() == shape), cases[k].equation << ": shape (" << shape_str(y.shape()) << ")");
        for (std::size_t i = 0; i < want.size(); ++i)
            BOOST_TEST(std::fabs(y.at_flat(i) - want[i]) <= tolerance * std::max(1.0, std::fabs(want[i])),
                       cases[k].equation << " [" << i << "] = " << y.at_flat(i) << ", want " << want[i]);
    }
    return nlohmann::json::parse(slurp(tmp.path / "t" / "manifest.json"));
}

BOOST_AUTO_TEST_CASE(einsum_imports_with_numpys_values) {
    TempDir tmp;
    const auto& cases = einsum_cases();
    const nlohmann::json manifest = run_einsums_against_the_plain_loops(tmp, cases, 1e-6);
    for (std::size_t k = 0; k < cases.size(); ++k) {
        // the ops the lowering is meant to use, among the case's traced nodes (y<k> and y<k>.*)
        std::set<std::string> used;
        const std::string y_name = "y" + std::to_string(k);
        for (const auto& e : manifest["entries"]) {
            const std::string n = e.value("name", std::string());
            if (n == y_name || n.rfind(y_name + ".", 0) == 0) used.insert(e.value("op", std::string()));
        }
        for (const auto& op : cases[k].ops) BOOST_TEST(used.count(op) == 1u, cases[k].equation << " uses no " << op);
    }
}

// 80 random equations against the plain loops: one to three operands of rank 0 to 3 over the
// letters a-e (sizes 1 to 3), letters repeated within an operand (diagonals), axes of size 1
// broadcasting against a letter's size, explicit outputs of any subset in any order
BOOST_AUTO_TEST_CASE(random_einsums_match_the_plain_loops) {
    std::uint32_t state = 2024;
    auto next = [&](std::uint32_t n) {
        state = state * 1664525u + 1013904223u;
        return (state >> 8) % n;
    };
    std::vector<EinsumCase> cases;
    while (cases.size() < 80) {
        const std::string pool = "abcde";
        std::map<char, std::size_t> size;
        for (char c : pool) size[c] = 1 + next(3);
        EinsumCase c;
        std::string used;
        for (std::uint32_t k = 0, n = 1 + next(3); k < n; ++k) {
            std::string term;
            for (std::uint32_t a = 0, rank = next(4); a < rank; ++a) term += pool[next(5)];
            Shape shape;
            for (char l : term) {
                // size 1 broadcasts; a repeated letter (a diagonal) keeps its size
                const bool once = std::count(term.begin(), term.end(), l) == 1;
                shape.push_back(once && next(6) == 0 ? 1 : size[l]);
                if (used.find(l) == std::string::npos) used += l;
            }
            c.equation += (k ? "," : "") + term;
            c.shapes.push_back(shape);
        }
        std::string out;
        for (char l : used)
            if (next(2)) out.insert(out.begin() + next(static_cast<std::uint32_t>(out.size() + 1)), l);
        c.equation += "->" + out;
        c.reference = c.equation;
        cases.push_back(c);
    }
    TempDir tmp;
    run_einsums_against_the_plain_loops(tmp, cases, 1e-5);
}

// The same model run by ONNX Runtime (npm onnxruntime-node): every output within 1e-5
BOOST_AUTO_TEST_CASE(einsum_matches_onnx_runtime) {
    TempDir tmp;
    const auto& cases = einsum_cases();
    write(einsum_model(cases, true), tmp.path / "einsum.onnx");
    const CliResult r = run_cli("run einsum.onnx" + einsum_inputs(tmp, cases, true) + " --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const OrtCheck ort = ort_check(tmp.path / "einsum.onnx", tmp.path / "t", "1e-5");
    BOOST_TEST(ort.status == 0, ort.report);
    const auto compared = std::count_if(cases.begin(), cases.end(), [](const EinsumCase& c) { return c.ort; });
    BOOST_TEST(ort.lines() == compared, ort.report);
}

// d sum(Y·W) / dA and dB of an attention-score einsum against the plain loops' derivative:
// dA[b,h,q,d] = sum_k W[b,h,q,k]·B[b,h,k,d], dB[b,h,k,d] = sum_q W[b,h,q,k]·A[b,h,q,d]
BOOST_AUTO_TEST_CASE(einsum_differentiates) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "A", {1, 2, 3, 4});
    add_input(g, "B", {1, 2, 5, 4});
    add_input(g, "W", {1, 2, 3, 5});
    attr_string(add_node(g, "Einsum", {"A", "B"}, {"S"}, "/scores"), "equation", "bhqd,bhkd->bhqk");
    add_node(g, "Mul", {"S", "W"}, {"Y"});
    add_output(g, "Y");
    write(model_of(g), tmp.path / "scores.onnx");
    std::vector<EinsumCase> shapes = {{"", "", {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 3, 5}}, {}}};
    einsum_inputs(tmp, shapes);
    const CliResult r = run_cli(
        "grad scores.onnx --input A=c0_0.npy --input B=c0_1.npy --input W=c0_2.npy --wrt A,B --trace g", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor a = load_npy(tmp.path / "c0_0.npy"), b = load_npy(tmp.path / "c0_1.npy"),
                 w = load_npy(tmp.path / "c0_2.npy");
    const auto manifest = nlohmann::json::parse(slurp(tmp.path / "g" / "manifest.json"));
    std::map<std::string, Tensor> grads;
    for (const auto& e : manifest["entries"])
        if (e.contains("grad")) grads[e["name"]] = load_npy(tmp.path / "g" / e["grad"].get<std::string>());
    BOOST_TEST_REQUIRE(grads.count("A") == 1u);
    BOOST_TEST_REQUIRE(grads.count("B") == 1u);
    for (std::size_t h = 0; h < 2; ++h) {
        for (std::size_t q = 0; q < 3; ++q)
            for (std::size_t d = 0; d < 4; ++d) {
                double want = 0;
                for (std::size_t k = 0; k < 5; ++k)
                    want += w.at_flat((h * 3 + q) * 5 + k) * b.at_flat((h * 5 + k) * 4 + d);
                BOOST_TEST(std::fabs(grads["A"].at_flat((h * 3 + q) * 4 + d) - want) <= 1e-6);
            }
        for (std::size_t k = 0; k < 5; ++k)
            for (std::size_t d = 0; d < 4; ++d) {
                double want = 0;
                for (std::size_t q = 0; q < 3; ++q)
                    want += w.at_flat((h * 3 + q) * 5 + k) * a.at_flat((h * 3 + q) * 4 + d);
                BOOST_TEST(std::fabs(grads["B"].at_flat((h * 5 + k) * 4 + d) - want) <= 1e-6);
            }
    }
}

// softmax(Q·Kᵀ / 2)·V written with two Einsums is one fused attention step in the run plan (the
// lowering gives Transpose + MatMul, the pattern engine/optimize.cpp folds), with the values of
// a plain-loop attention
BOOST_AUTO_TEST_CASE(attention_written_with_einsum_runs_fused) {
    TempDir tmp;
    onnx::GraphProto g;
    for (const char* in : {"Q", "K", "V"}) add_input(g, in, {1, 2, 6, 4});
    add_init(g, "half", {}, {0.5f});
    attr_string(add_node(g, "Einsum", {"Q", "K"}, {"S_raw"}, "/attn/scores"), "equation", "bhqd,bhkd->bhqk");
    add_node(g, "Mul", {"S_raw", "half"}, {"S"});
    attr_int(add_node(g, "Softmax", {"S"}, {"A"}), "axis", -1);
    attr_string(add_node(g, "Einsum", {"A", "V"}, {"O"}, "/attn/values"), "equation", "bhqk,bhkd->bhqd");
    add_output(g, "O");
    write(model_of(g), tmp.path / "attn.onnx");
    Graph graph = to_graph(import_onnx(tmp.path / "attn.onnx"), tmp.path / "attn.onnx");
    std::vector<bool> keep(graph.values().size(), false);
    for (int id : graph.outputs()) keep[static_cast<std::size_t>(id)] = true;
    const Plan plan = make_plan(graph, keep);
    BOOST_TEST(std::count_if(plan.steps.begin(), plan.steps.end(),
                             [](const Step& s) { return s.kind == StepKind::attention; }) == 1,
               plan.describe(graph));
    std::vector<EinsumCase> shapes = {{"", "", {{1, 2, 6, 4}, {1, 2, 6, 4}, {1, 2, 6, 4}}, {}}};
    einsum_inputs(tmp, shapes);
    const CliResult r =
        run_cli("run attn.onnx --input Q=c0_0.npy --input K=c0_1.npy --input V=c0_2.npy --trace t --only O", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor q = load_npy(tmp.path / "c0_0.npy"), k = load_npy(tmp.path / "c0_1.npy"),
                 v = load_npy(tmp.path / "c0_2.npy"), o = load_npy(tmp.path / "t" / "O.npy");
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 6; ++i) {
            std::vector<double> a(6);
            double sum = 0;
            for (std::size_t j = 0; j < 6; ++j) {
                double dot = 0;
                for (std::size_t d = 0; d < 4; ++d)
                    dot += q.at_flat((h * 6 + i) * 4 + d) * k.at_flat((h * 6 + j) * 4 + d);
                sum += a[j] = std::exp(dot / 2);
            }
            for (std::size_t d = 0; d < 4; ++d) {
                double want = 0;
                for (std::size_t j = 0; j < 6; ++j) want += a[j] / sum * v.at_flat((h * 6 + j) * 4 + d);
                BOOST_TEST(std::fabs(o.at_flat((h * 6 + i) * 4 + d) - want) <= 1e-6);
            }
        }
}

BOOST_AUTO_TEST_CASE(bad_einsum_nodes_give_one_error_line) {
    TempDir tmp;
    const auto model = [&](const std::string& file, const std::string& equation, std::vector<std::string> in) {
        onnx::GraphProto g;
        add_input(g, "X", {2, 3});
        add_input(g, "Z", {4, 4, 5});
        auto* n = add_node(g, "Einsum", in, {"Y"}, "/attn/Einsum");
        if (!equation.empty()) attr_string(n, "equation", equation);
        add_output(g, "Y");
        onnx::ModelProto m = model_of(g);
        m.mutable_opset_import(0)->set_version(12);
        write(m, tmp.path / file);
    };
    const std::string node = ": node '/attn/Einsum' (Einsum): ";
    model("count.onnx", "ij,jk->ik", {"X"});
    expect_one_error(
        tmp, "check count.onnx",
        "count.onnx" + node + "the equation 'ij,jk->ik' has 2 operand(s), the node 1 input(s); shapes (2x3)");
    model("rank.onnx", "ijk->i", {"X"});
    expect_one_error(tmp, "check rank.onnx",
                     "rank.onnx" + node + "operand 0 of shape (2x3) has 2 axes, its term 'ijk' names 3; shapes (2x3)");
    model("char.onnx", "i_j->i", {"X"});
    expect_one_error(tmp, "check char.onnx",
                     "char.onnx" + node +
                         "the term 'i_j' holds '_': an einsum term is letters a-z, A-Z and at most "
                         "one '...'; shapes (2x3)");
    model("unknown.onnx", "ij->k", {"X"});
    expect_one_error(tmp, "check unknown.onnx",
                     "unknown.onnx" + node + "the output 'k' names 'k', which no operand has; shapes (2x3)");
    model("sizes.onnx", "ij,jk->ik", {"X", "X"});
    expect_one_error(tmp, "check sizes.onnx",
                     "sizes.onnx" + node +
                         "'j' is 3 in operand 0 of shape (2x3) and 2 in operand 1 of shape (2x3); shapes (2x3), (2x3)");
    model("diag.onnx", "ijj->i", {"Z"});
    expect_one_error(tmp, "check diag.onnx",
                     "diag.onnx" + node +
                         "operand 0 of shape (4x4x5) repeats 'j' over axes of 4 and 5: a diagonal "
                         "needs equal sizes; shapes (4x4x5)");
    model("ellipsis.onnx", "...j->j", {"Z"});
    expect_one_error(tmp, "check ellipsis.onnx",
                     "ellipsis.onnx" + node +
                         "the operands' '...' covers 2 axes, which the output 'j' leaves out "
                         "(write '...' in it); shapes (4x4x5)");
    model("twice.onnx", "ij->ii", {"X"});
    expect_one_error(tmp, "check twice.onnx", "twice.onnx" + node + "the output 'ii' names 'i' twice");
    model("none.onnx", "", {"X"});
    expect_one_error(tmp, "check none.onnx",
                     "none.onnx" + node + "the attribute 'equation' (a string) is missing; shapes (2x3)");
}

BOOST_AUTO_TEST_SUITE_END()

// An imported Attention node expands into the named steps of ops/attention.cpp (<node>.S_raw,
// <node>.A, ...), each traced; Y maps to the last step. Values: Q = K (one head, two rows),
// V = identity, so Y = softmax(Q·Qᵀ / √2) row by row (hand computation).
BOOST_AUTO_TEST_CASE(an_imported_attention_expands_into_traced_steps) {
    TempDir tmp;
    onnx::GraphProto g;
    add_input(g, "Q", {1, 1, 2, 2});
    add_init(g, "K", {1, 1, 2, 2}, {1, 0, 0, 1});
    add_init(g, "V", {1, 1, 2, 2}, {1, 0, 0, 1});
    add_node(g, "Attention", {"Q", "K", "V"}, {"Y"}, "/layer/attn");
    add_output(g, "Y");
    onnx::ModelProto m = model_of(g);
    m.mutable_opset_import(0)->set_version(23);
    write(m, tmp.path / "attn.onnx");
    save_npy(tmp.path / "q.npy", Tensor(Array<float>({{{{1.0f, 0.0f}, {0.0f, 1.0f}}}})));
    const CliResult r = run_cli("run attn.onnx --input Q=q.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    for (const char* step : {"layer.attn.KT", "layer.attn.S_raw", "layer.attn.S", "layer.attn.A", "layer.attn.O"})
        BOOST_TEST(fs::exists(tmp.path / "t" / (std::string(step) + ".npy")), step);
    const Tensor y = load_npy(tmp.path / "t" / "layer.attn.O.npy");
    const double e = std::exp(1 / std::sqrt(2.0)), big = e / (e + 1), small = 1 / (e + 1);
    BOOST_TEST(std::fabs(y.at_flat(0) - big) < 1e-6);
    BOOST_TEST(std::fabs(y.at_flat(1) - small) < 1e-6);
    BOOST_TEST(std::fabs(y.at_flat(2) - small) < 1e-6);
    BOOST_TEST(std::fabs(y.at_flat(3) - big) < 1e-6);
    const CliResult c = run_cli("check attn.onnx", tmp.path);
    BOOST_TEST(c.out.find("  Y -> layer.attn.O\n") != std::string::npos, c.out);
}

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_import
