// The backward pass over whole graphs: the seed graph and random multi-head graphs against
// finite differences, gradients of nodes against plain loops, bit-identical gradients at 1,
// 2, 4 and 8 threads, skipped branches, several outputs, and the errors.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "graphs/mha.hpp"
#include "ops/common.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_autodiff)

using namespace attngraph;
namespace bdata = boost::unit_test::data;

namespace {

RunResult forward(const Graph& g, int threads = 1) {
    RunOptions o;
    o.keep_all = true;
    o.threads = threads;
    return run(g, o);
}

Graph seed_f64() {
    LoadOptions lo;
    lo.dtype = DType::f64;
    return load_graph(test::seed_graph(), lo);
}

std::vector<std::string> tensor_names(const Graph& g) {
    std::vector<std::string> names;
    for (const auto& v : g.values())
        if (v.data) names.push_back(v.name);
    return names;
}

}  // namespace

// ---- against finite differences ------------------------------------------------------------

BOOST_DATA_TEST_CASE(seed_graph_gradcheck, bdata::make({0, 1}), ones) {
    const Graph g = seed_f64();
    GradcheckOptions o;
    if (ones) o.output_grads["Y"] = Tensor(Array<double>({3, 4}, 1.0));
    const GradcheckResult r = gradcheck(g, o);
    BOOST_TEST(r.entries.size() == 15u);  // X and the 14 weights
    for (const auto& name : tensor_names(g)) BOOST_TEST_CONTEXT(name) {
            BOOST_TEST(r.at(name).rel_error <= 1e-6, r.report());
        }
}

BOOST_AUTO_TEST_CASE(every_graph_file_gradchecks) {
    // every graphs/*.json and graphs/flex/*.json (attention variants and FlexAttention's
    // examples), with respect to all its tensors
    std::size_t checked = 0;
    std::vector<std::filesystem::directory_entry> entries;
    for (const auto& dir : {test::source_dir() / "graphs", test::source_dir() / "graphs" / "flex"})
        for (const auto& entry : std::filesystem::directory_iterator(dir)) entries.push_back(entry);
    for (const auto& entry : entries) {
        if (entry.path().extension() != ".json") continue;
        BOOST_TEST_CONTEXT(entry.path().filename().string()) {
            LoadOptions lo;
            lo.dtype = DType::f64;
            const Graph g = load_graph(entry.path(), lo);
            const GradcheckResult r = gradcheck(g);
            BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
            ++checked;
        }
    }
    BOOST_TEST(checked >= 23u);  // the seed, the fifteen variants, the seven FlexAttention examples
}

BOOST_DATA_TEST_CASE(random_mha_gradcheck,
                     bdata::make({std::size_t{1}, std::size_t{2}, std::size_t{4}}) ^
                         bdata::make({std::size_t{4}, std::size_t{5}, std::size_t{3}}) ^
                         bdata::make({std::size_t{0}, std::size_t{2}, std::size_t{0}}) ^ bdata::make({11, 12, 13}),
                     heads, seq, batch, seed) {
    graphs::MhaConfig c;
    c.heads = heads;
    c.d_model = heads == 1 ? 4 : 8;
    c.seq = seq;
    c.batch = batch;
    c.dtype = DType::f64;
    c.seed = static_cast<std::uint64_t>(seed);
    const Graph g = graphs::build_mha(c);
    const GradcheckResult r = gradcheck(g);
    BOOST_TEST(r.entries.size() == 1 + 6 * heads + 2);
    BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
}

BOOST_AUTO_TEST_CASE(shared_inputs_and_several_outputs) {
    // x feeds four nodes (twice into one MatMul); y1 is both an output and an operand of y2
    GraphBuilder g("fanout", DType::f64);
    Value x = g.input("x", graphs::random_tensor({3, 3}, DType::f64, 1));
    Value w = g.param("w", graphs::random_tensor({3, 3}, DType::f64, 2));
    Value y1 = softmax(matmul(x, x)).named("y1");
    Value y2 = matmul(y1, linear(x, w)).named("y2");
    Value y3 = concat({scale(x, 0.5), transpose(x), y2}, 0).named("y3");
    g.output(y1);
    g.output(y3);
    const GradcheckResult r = gradcheck(g.build());
    BOOST_TEST(r.max_rel_error <= 1e-6, r.report());
}

// A two-output op (a stand-in for Split): the top and bottom halves of x's rows.
namespace {
struct HalvesAttrs {};
}  // namespace
BOOST_AUTO_TEST_SUITE_END()  // Hana adapts structs in the global namespace only
BOOST_HANA_ADAPT_STRUCT(test_autodiff::HalvesAttrs);
BOOST_AUTO_TEST_SUITE(test_autodiff)
namespace {
struct Halves {
    static constexpr const char* name = "HalvesTestOp";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = HalvesAttrs;
    static std::vector<Shape> infer_shape(const Attrs&, const std::vector<Shape>& in) {
        Shape h = in[0];
        h[0] /= 2;
        return {h, h};
    }
    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "halves(" + v[0] + ")"; }
    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        const std::size_t half = out[0]->size();
        std::copy(in[0]->data(), in[0]->data() + half, out[0]->data());
        std::copy(in[0]->data() + half, in[0]->data() + 2 * half, out[1]->data());
    }
    template <class T>
    static void backward(const Attrs&, In<T>, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        const std::size_t half = dout[0]->size();
        for (std::size_t i = 0; i < half; ++i) {
            din[0]->data()[i] += dout[0]->data()[i];
            din[0]->data()[half + i] += dout[1]->data()[i];
        }
    }
};
}  // namespace

BOOST_AUTO_TEST_CASE(multi_output_nodes) {
    OpRegistry::instance().add<Halves>();
    GraphBuilder g("halves", DType::f64);
    Value x = g.input("x", graphs::random_tensor({4, 3}, DType::f64, 1));
    Value w = g.param("w", graphs::random_tensor({3, 3}, DType::f64, 2));
    Value h = g.node<Halves>({linear(x, w)}, {}, "h");
    g.output(softmax(matmul(h[0], transpose(h[1]))).named("y"));  // both outputs reach y
    g.output(scale(h[0], 2.0).named("z"));                        // h:0 feeds two nodes
    const GradcheckResult both = gradcheck(g.build());
    BOOST_TEST(both.max_rel_error <= 1e-6, both.report());

    GraphBuilder g1("half_used", DType::f64);
    Value x1 = g1.input("x", graphs::random_tensor({4, 3}, DType::f64, 1));
    Value h1 = g1.node<Halves>({x1}, {}, "h");
    g1.output(scale(h1[1], -3.0).named("y"));  // h:0 reaches nothing: its gradient is zero
    const Graph graph = g1.build();
    const Gradients grads = backward(graph, forward(graph));
    for (std::size_t i = 0; i < 6; ++i) {
        BOOST_TEST(grads.at("x").at_flat(i) == 0.0);
        BOOST_TEST(grads.at("x").at_flat(6 + i) == -3.0);
        BOOST_TEST(grads.at("h:0").at_flat(i) == 0.0);
        BOOST_TEST(grads.at("h:1").at_flat(i) == -3.0);
    }
}

// ---- gradients of nodes, by plain loops ----------------------------------------------------

BOOST_AUTO_TEST_CASE(node_gradients_by_plain_loops) {
    // Y = O_concat·Wo + bo, so dL/dO_concat = G·Woᵀ; head1.O is its first two columns, and
    // dL/dhead1.V = head1.Aᵀ · dL/dhead1.O.
    const Graph g = seed_f64();
    const RunResult fwd = forward(g);
    Tensor gy = graphs::random_tensor({3, 4}, DType::f64, 5);
    const Gradients grads = backward(g, fwd, {{"Y", gy}});
    const Tensor& wo = fwd.at(g, "Wo");
    const Tensor& a1 = fwd.at(g, "head1.A");
    double do_concat[3][4] = {}, do1[3][2] = {};
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) {
            for (int k = 0; k < 4; ++k) do_concat[i][j] += gy.at_flat(i * 4 + k) * wo.at_flat(j * 4 + k);
            BOOST_TEST(std::abs(grads.at("O_concat").at_flat(i * 4 + j) - do_concat[i][j]) <= 1e-14);
            if (j < 2) do1[i][j] = do_concat[i][j];
        }
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j) {
            BOOST_TEST(std::abs(grads.at("head1.O").at_flat(i * 2 + j) - do1[i][j]) <= 1e-14);
            double dv = 0;
            for (int r = 0; r < 3; ++r) dv += a1.at_flat(r * 3 + i) * do1[r][j];
            BOOST_TEST(std::abs(grads.at("head1.V").at_flat(i * 2 + j) - dv) <= 1e-14);
        }
    BOOST_TEST((grads.at("Y") == gy));                      // dL/dY is G
    BOOST_TEST(grads.names().size() == g.values().size());  // every tensor and node by default
}

// ---- determinism ------------------------------------------------------------------------

namespace {
Graph big_mha(DType dtype) {
    graphs::MhaConfig c;
    c.seq = 96;
    c.d_model = 64;
    c.heads = 4;
    c.dtype = dtype;
    c.seed = 3;
    return graphs::build_mha(c);
}
Gradients big_grads(const Graph& g, int threads) {
    BackwardOptions o;
    o.threads = threads;
    return backward(g, forward(g, threads), {{"Y", graphs::random_tensor({96, 64}, g.dtype(), 9)}}, o);
}
}  // namespace

BOOST_DATA_TEST_CASE(backward_bit_identical_for_any_thread_count, bdata::make({1, 2, 4, 8}) * bdata::make({0, 1}),
                     threads, f64) {
    const Graph g = big_mha(f64 ? DType::f64 : DType::f32);
    static std::map<int, Gradients> reference;
    if (!reference.count(f64)) reference.emplace(f64, big_grads(g, 1));
    const Gradients& ref = reference.at(f64);
    const Gradients got = big_grads(g, threads);
    BOOST_TEST(got.names() == ref.names());
    for (const auto& name : ref.names()) BOOST_TEST_CONTEXT(name) {
            BOOST_TEST((got.at(name) == ref.at(name)));
        }
    // and not trivially: X's gradient (six consumers summed) is far from zero
    double largest = 0;
    for (std::size_t i = 0; i < got.at("X").size(); ++i) largest = std::max(largest, std::abs(got.at("X").at_flat(i)));
    BOOST_TEST(largest > 1e-2);
}

BOOST_DATA_TEST_CASE(an_executor_runs_forward_and_backward, bdata::make({1, 2, 4, 8}), threads) {
    // Executor::backward on the executor that ran the forward: the free function's gradients
    const Graph g = big_mha(DType::f32);
    static const Gradients reference = big_grads(g, 1);
    Executor ex(threads);
    RunOptions keep;
    keep.keep_all = true;
    const Tensor G = graphs::random_tensor({96, 64}, DType::f32, 9);
    const Gradients got = ex.backward(g, ex.run(g, keep), {{"Y", G}});
    BOOST_TEST(got.names() == reference.names());
    for (const auto& name : reference.names()) BOOST_TEST_CONTEXT(name) {
            BOOST_TEST((got.at(name) == reference.at(name)));
        }
    const Gradients wq = ex.backward(g, ex.run(g, keep), {{"Y", G}}, {"head1.Wq"});
    BOOST_TEST(wq.names() == std::vector<std::string>{"head1.Wq"});
    BOOST_TEST((wq.at("head1.Wq") == reference.at("head1.Wq")));
}

// ---- only what is needed ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(only_branches_leading_to_requested_values_run) {
    const Graph g = seed_f64();
    const RunResult fwd = forward(g);
    BackwardOptions o;
    o.wrt = {"head1.Wq"};
    const Gradients only = backward(g, fwd, {}, o);
    BOOST_TEST(only.names() == std::vector<std::string>{"head1.Wq"});
    BOOST_CHECK_THROW(only.at("head2.Wq"), GraphError);
    for (const auto& [node, s] : only.seconds()) BOOST_TEST_CONTEXT(node) {
            BOOST_TEST(node.rfind("head2.", 0) != 0);
        }
    BOOST_TEST(only.seconds().count("head1.Q") == 1u);
    BOOST_TEST(only.seconds().count("head1.K") == 0u);  // head1.Wq does not reach K
    BOOST_TEST((only.at("head1.Wq") == backward(g, fwd).at("head1.Wq")));
}

BOOST_AUTO_TEST_CASE(values_that_reach_no_output_get_zero_gradients) {
    GraphBuilder g("dangling", DType::f64);
    Value x = g.input("x", graphs::random_tensor({2, 2}, DType::f64, 1));
    Value unused = g.input("unused", graphs::random_tensor({2, 3}, DType::f64, 2));
    scale(x, 3.0).named("side");
    g.output(scale(x, 2.0).named("y"));
    const Graph graph = g.build();
    const Gradients grads = backward(graph, forward(graph));
    BOOST_TEST(grads.at("x").at_flat(3) == 2.0);
    BOOST_TEST(grads.at("unused").shape() == (Shape{2, 3}));
    BOOST_TEST(grads.at("unused").at_flat(5) == 0.0);
    BOOST_TEST(grads.at("side").at_flat(0) == 0.0);
    (void)unused;
}

// ---- errors -------------------------------------------------------------------------------

namespace {
struct NoGradAttrs {};
}  // namespace
BOOST_AUTO_TEST_SUITE_END()  // Hana adapts structs in the global namespace only
BOOST_HANA_ADAPT_STRUCT(test_autodiff::NoGradAttrs);
BOOST_AUTO_TEST_SUITE(test_autodiff)
namespace {
struct NoGrad {
    static constexpr const char* name = "NoGradTestOp";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = NoGradAttrs;
    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return in[0]; }
    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return "nograd(" + v[0] + ")"; }
    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        *out[0] = *in[0];
    }
};
}  // namespace

BOOST_AUTO_TEST_CASE(errors_are_typed_and_name_what_is_wrong) {
    const Graph g = seed_f64();
    const RunResult fwd = forward(g);
    auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    BOOST_CHECK_THROW(backward(g, fwd, {{"Y", zeros(DType::f64, {3, 3})}}), ShapeError);
    BOOST_TEST(message([&] {
                   backward(g, fwd, {{"Y", zeros(DType::f64, {3, 3})}});
               }) == "output gradient for 'Y' is 3x3 but the output is 3x4");
    BOOST_CHECK_THROW(backward(g, fwd, {{"head1.A", zeros(DType::f64, {3, 3})}}), GraphError);
    BOOST_TEST(message([&] {
                   backward(g, fwd, {{"head1.A", zeros(DType::f64, {3, 3})}});
               }).find("not an output") != std::string::npos);
    BackwardOptions o;
    o.wrt = {"head9.Wq"};
    BOOST_CHECK_THROW(backward(g, fwd, {}, o), GraphError);
    BOOST_TEST(message([&] { backward(g, fwd, {}, o); }).find("'head9.Wq'") != std::string::npos);

    BOOST_CHECK_THROW(backward(g.with_dtype(DType::f32), fwd), GraphError);  // a run in another dtype

    RunOptions plain;  // outputs only
    BOOST_CHECK_THROW(backward(g, run(g, plain)), GraphError);
    BOOST_TEST(message([&] { backward(g, run(g, plain)); }).find("keep_all") != std::string::npos);

    OpRegistry::instance().add<NoGrad>();
    GraphBuilder b("nograd", DType::f64);
    Value x = b.input("x", graphs::random_tensor({2, 2}, DType::f64, 1));
    b.output(scale(b.node<NoGrad>({scale(x, 2.0)}, {}, "opaque"), 3.0).named("y"));
    const Graph ng = b.build();
    BOOST_CHECK_THROW(backward(ng, forward(ng)), GraphError);
    BOOST_TEST(message([&] { backward(ng, forward(ng)); }) ==
               "node 'opaque' (NoGradTestOp) has no backward: graph 'nograd' cannot be differentiated through it");
    // a gradient that does not pass through it is fine
    BackwardOptions after;
    after.wrt = {"opaque"};
    BOOST_TEST(backward(ng, forward(ng), {}, after).at("opaque").at_flat(0) == 3.0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_autodiff
