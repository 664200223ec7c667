// A user op brought by the caller, typed like the built-in ones: Square, y = gain · x², added
// to the op set with OpRegistry::add_list and then used everywhere a built-in op is: graph
// files (load, save), runs, traces, explain, backward and gradcheck. Reference numbers come
// from plain loops in this file.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "engine/trace.hpp"
#include "inspect/explain.hpp"
#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace user {
struct SquareAttrs {
    double gain = 1.0;
};
}  // namespace user
BOOST_HANA_ADAPT_STRUCT(user::SquareAttrs, gain);

namespace user {
using namespace attngraph;

// Square: y = gain · x², elementwise. x and y have any shape, the same.
struct Square {
    static constexpr const char* name = "Square";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SquareAttrs;

    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return in[0]; }
    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        return ops::format_number(a.gain) + " × " + v[0] + "²";
    }
    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        for (std::size_t i = 0; i < in[0]->size(); ++i)
            out[0]->data()[i] = static_cast<T>(a.gain) * in[0]->data()[i] * in[0]->data()[i];
    }
    // in the forward pass this was: y = gain · x²
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        for (std::size_t i = 0; i < in[0]->size(); ++i)
            din[0]->data()[i] += T(2) * static_cast<T>(a.gain) * in[0]->data()[i] * dout[0]->data()[i];
    }
};

struct SquarePlusAttrs {
    double gain = 1.0;
};
}  // namespace user
BOOST_HANA_ADAPT_STRUCT(user::SquarePlusAttrs, gain);

namespace user {
// SquarePlus: y = gain · x² + x, a composite op: its node becomes the nodes "<name>.sq"
// (Square) and "<name>.out" (Add), which run, trace and differentiate as any other nodes.
struct SquarePlus {
    static constexpr const char* name = "SquarePlus";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SquarePlusAttrs;

    template <class E>
    static typename E::Value expand(const Attrs& a, E& e, const std::vector<typename E::Value>& in) {
        auto sq = e.template node<Square>({in[0]}, {a.gain}, "sq");
        return e.template node<ops::Add>({sq, in[0]}, {}, "out");
    }
};
}  // namespace user

using namespace attngraph;

namespace {

void use_square() {
    static const bool once = [] {
        OpRegistry::instance().add_list(boost::hana::tuple_t<user::Square, user::SquarePlus>);
        return true;
    }();
    (void)once;
}

const char* graph_text = R"({
  "name": "squares", "dtype": "float64",
  "tensors": {
    "X": {"kind": "input", "shape": [2, 3], "data": [[1, -2, 0.5], [3, 0, -1.5]]},
    "W": {"kind": "param", "shape": [3, 2], "data": [[1, 0], [0.5, -1], [2, 0.25]]}
  },
  "nodes": [
    {"name": "sq", "op": "Square", "inputs": ["X"], "attrs": {"gain": 2.0}},
    {"name": "y", "op": "MatMul", "inputs": ["sq", "W"]}
  ],
  "outputs": ["y"]
})";

const std::vector<double> x = {1, -2, 0.5, 3, 0, -1.5}, w = {1, 0, 0.5, -1, 2, 0.25};

// y = (2 x²) · W by plain loops
std::vector<double> reference_y() {
    std::vector<double> y(4, 0.0);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            for (int k = 0; k < 3; ++k) y[i * 2 + j] += 2 * x[i * 3 + k] * x[i * 3 + k] * w[k * 2 + j];
    return y;
}

}  // namespace

BOOST_AUTO_TEST_CASE(graph_file_load_and_save) {
    use_square();
    const Graph g = parse_graph(graph_text, ".", "squares.json");
    BOOST_TEST(g.nodes()[0].op->name == "Square");
    BOOST_TEST(g.nodes()[0].is<user::Square>());
    BOOST_TEST(g.nodes()[0].attrs_if<user::Square>()->gain == 2.0);
    BOOST_TEST(!g.nodes()[0].is<ops::Scale>());
    const nlohmann::json saved = graph_to_json(g);
    BOOST_TEST(saved["nodes"][0]["op"] == "Square");
    BOOST_TEST(saved["nodes"][0]["attrs"] == nlohmann::json({{"gain", 2.0}}));
    BOOST_TEST(graph_to_json(parse_graph(saved.dump(), ".", "saved.json")) == saved);
    // its attributes are checked like a built-in op's
    const std::string bad = std::string(graph_text).replace(std::string(graph_text).find("\"gain\""), 6, "\"gian\"");
    BOOST_CHECK_THROW(parse_graph(bad, ".", "bad.json"), GraphError);
}

BOOST_AUTO_TEST_CASE(run_trace_and_explain) {
    use_square();
    const Graph g = parse_graph(graph_text, ".", "squares.json");
    RunOptions o;
    o.trace = true;
    o.keep_all = true;
    const RunResult r = run(g, o);
    const Tensor& y = *r.values[static_cast<std::size_t>(g.at("y"))];
    const std::vector<double> want = reference_y();
    for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(y.at_flat(i) == want[i], boost::test_tools::tolerance(1e-12));
    const Tensor& sq = *r.values[static_cast<std::size_t>(g.at("sq"))];
    for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(sq.at_flat(i) == 2 * x[i] * x[i]);

    const Trace t = make_trace(g, r);
    const TraceEntry* e = t.find("sq");
    BOOST_REQUIRE(e);
    BOOST_TEST(e->op == "Square");
    BOOST_TEST(e->formula == "2 × X (2x3)²");
    BOOST_TEST(trace_text(t).find("[Square, ") != std::string::npos);

    const std::string md = inspect::explain_markdown(g, r);
    BOOST_TEST(md.find("` = Square") != std::string::npos);
    BOOST_TEST(md.find("\\mathrm{Square}\\left(") != std::string::npos);  // the default LaTeX
    BOOST_TEST(md.find("\\text{{\"gain\":2.0}}") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(backward_and_gradcheck) {
    use_square();
    const Graph g = parse_graph(graph_text, ".", "squares.json");
    RunOptions o;
    o.keep_all = true;
    // L = sum(G ⊙ y); dL/dsq = G·Wᵀ, dL/dX = 4 x ⊙ dL/dsq
    const std::vector<double> G = {1, -1, 0.5, 2};
    Tensor gt = zeros(DType::f64, {2, 2});
    for (std::size_t i = 0; i < 4; ++i) gt.as<double>().data()[i] = G[i];
    const Gradients grads = backward(g, run(g, o), {{"y", gt}});
    const Tensor& dx = grads.at("X");
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 3; ++k) {
            double dsq = 0;
            for (int j = 0; j < 2; ++j) dsq += G[i * 2 + j] * w[k * 2 + j];
            BOOST_TEST(dx.at_flat(i * 3 + k) == 4 * x[i * 3 + k] * dsq, boost::test_tools::tolerance(1e-12));
        }
    const GradcheckResult whole = gradcheck(g);
    BOOST_TEST(whole.max_rel_error <= 1e-6, whole.report());
    const GradcheckResult one = gradcheck_op("Square", {{"gain", -0.5}}, {g.value(g.at("X")).data->cast(DType::f64)});
    BOOST_TEST(one.max_rel_error <= 1e-6, one.report());
}

BOOST_AUTO_TEST_CASE(cpp_builder) {
    GraphBuilder b("cpp", DType::f64);
    Value in = b.input("X", Tensor(zeros(DType::f64, {2, 3})));
    Value sq = b.node<user::Square>({in}, {3.0}, "sq");
    b.output(sq);
    const Graph g = b.build();
    BOOST_TEST(g.nodes()[0].attrs_if<user::Square>()->gain == 3.0);
    BOOST_TEST(g.formula(g.nodes()[0]) == "3 × X (2x3)²");
}

BOOST_AUTO_TEST_CASE(composite_op_expansion) {
    use_square();
    // from C++: the nodes of the expansion, named after the composite's node
    GraphBuilder b("composite", DType::f64);
    Tensor xt = zeros(DType::f64, {2, 3});
    for (std::size_t i = 0; i < x.size(); ++i) xt.as<double>().data()[i] = x[i];
    Value in = b.input("X", xt);
    Value y = b.node<user::SquarePlus>({in}, {0.5}, "sp");
    BOOST_TEST(y.name() == "sp.out");
    b.output(scale(y, 2.0).named("z"));
    const Graph g = b.build();
    BOOST_TEST(g.nodes().size() == 3u);
    BOOST_TEST(g.nodes()[0].name == "sp.sq");
    BOOST_TEST(g.nodes()[0].is<user::Square>());
    BOOST_TEST(g.nodes()[1].name == "sp.out");
    BOOST_TEST(g.nodes()[1].is<ops::Add>());

    // from a graph file: other nodes and the outputs name the composite's node
    const char* text = R"({
      "name": "composite", "dtype": "float64",
      "tensors": {"X": {"kind": "input", "shape": [2, 3], "data": [[1, -2, 0.5], [3, 0, -1.5]]}},
      "nodes": [
        {"name": "z", "op": "Scale", "inputs": ["sp"], "attrs": {"factor": 2}},
        {"name": "sp", "op": "SquarePlus", "inputs": ["X"], "attrs": {"gain": 0.5}}
      ],
      "outputs": ["z", "sp"]
    })";
    const Graph f = parse_graph(text, ".", "composite.json");
    BOOST_TEST(f.nodes().size() == 3u);
    BOOST_TEST(f.value(f.outputs()[1]).name == "sp.out");
    BOOST_TEST(graph_to_json(f)["nodes"] == graph_to_json(g)["nodes"]);

    RunOptions o;
    o.keep_all = true;
    o.trace = true;
    const RunResult r = run(f, o);
    const Trace t = make_trace(f, r);
    BOOST_REQUIRE(t.find("sp.sq"));
    BOOST_REQUIRE(t.find("sp.out"));
    const Tensor& z = *r.values[static_cast<std::size_t>(f.at("z"))];
    for (std::size_t i = 0; i < x.size(); ++i)
        BOOST_TEST(z.at_flat(i) == 2 * (0.5 * x[i] * x[i] + x[i]), boost::test_tools::tolerance(1e-12));
    // dz/dX = 2 (x + 1) for G = ones
    Tensor ones = zeros(DType::f64, {2, 3});
    for (std::size_t i = 0; i < x.size(); ++i) ones.as<double>().data()[i] = 1;
    BackwardOptions bo;
    bo.wrt = {"X"};
    const Gradients grads = backward(f, r, {{"z", ones}, {"sp.out", zeros(DType::f64, {2, 3})}}, bo);
    for (std::size_t i = 0; i < x.size(); ++i)
        BOOST_TEST(grads.at("X").at_flat(i) == 2 * (x[i] + 1), boost::test_tools::tolerance(1e-12));
    const GradcheckResult c = gradcheck_op("SquarePlus", {{"gain", 3}}, {xt});
    BOOST_TEST(c.max_rel_error <= 1e-6, c.report());
}
