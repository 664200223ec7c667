// The C++ API in one program: every snippet of docs/cpp-api.md is cut from this file (the
// test test_docs_cpp_api checks that they still are), so each one compiles.
//
//   cpp_api [TRACE_DIR]     prints what each part computes; writes a trace when given a folder
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "engine/expr.hpp"
#include "engine/graph_file.hpp"
#include "engine/trace.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"

using namespace attngraph;

namespace {

void print(const char* what, const Tensor& t) {
    std::printf("%-28s (%s):", what, shape_str(t.shape()).c_str());
    for (std::size_t i = 0; i < std::min<std::size_t>(t.size(), 6); ++i) std::printf(" %.6f", t.at_flat(i));
    std::printf("%s\n", t.size() > 6 ? " ..." : "");
}

// [expression]
// One attention head as an expression. Nothing is computed until evaluate/to_graph/gradients.
Tensor attention_head(const Tensor& x, const Tensor& wq, const Tensor& bq, const Tensor& wk, const Tensor& bk,
                      const Tensor& wv, const Tensor& bv) {
    namespace ex = attngraph::expr;
    const double dk = static_cast<double>(wq.shape()[1]);
    auto X = ex::input("X", x);  // refers to x: keep it alive while the expression is used
    auto q = ex::linear(X, ex::param("Wq", wq), ex::param("bq", bq)).named("Q");
    auto k = ex::linear(X, ex::param("Wk", wk), ex::param("bk", bk)).named("K");
    auto v = ex::linear(X, ex::param("Wv", wv), ex::param("bv", bv)).named("V");
    auto A = ex::softmax(ex::scale(ex::matmul(q, ex::transpose(k)), 1 / std::sqrt(dk))).named("A");
    auto O = ex::matmul(A, v).named("O");

    Tensor y = ex::evaluate(O);              // direct: the fused attention kernel, no Graph
    Graph g = ex::to_graph(O, "attention");  // the graph IR: run, trace, save, CLI tools
    auto d = ex::gradients(O, {X, q});       // d[0] = dL/dX, d[1] = dL/dQ for L = sum(O)
    // [expression]
    print("evaluate(O)", y);
    print("run(to_graph(O)).O", run(g).at(g, "O"));
    print("gradients: dL/dX", d[0]);
    print("gradients: dL/dQ", d[1]);
    return y;
}

// [elementwise]
// Scale and Add are elementwise: evaluate() runs a chain of them as one loop (an xtensor
// expression), without a temporary per op; the mask then runs its op's forward.
Tensor biased_scores(const Tensor& s, const Tensor& bias) {
    namespace ex = attngraph::expr;
    auto scores = ex::input("S", s);
    auto alibi = ex::param("alibi", bias);
    return ex::evaluate(ex::mask_causal(ex::add(ex::scale(scores, 0.5), alibi)));
}
// [elementwise]

// [dynamic]
// Structure chosen at run time: a variable of type ex::Dynamic holds any expression.
attngraph::Graph masked_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, int window) {
    namespace ex = attngraph::expr;
    auto Q = ex::input("Q", q);
    auto K = ex::input("K", k);
    auto V = ex::input("V", v);
    ex::Dynamic s = ex::scale(ex::matmul(Q, ex::transpose(K)), 0.5).named("S");
    if (causal) s = ex::mask_causal(s).named("S_masked");
    if (window > 0) s = ex::mask_window(s, window).named("S_window");
    auto O = ex::matmul(ex::softmax(s).named("A"), V).named("O");
    return ex::to_graph(O, "masked", {.dtype = DType::f64, .tokens = {}});
}
// [dynamic]

// [heads]
// Heads as branches: each head has the same expression type, so they go into one vector;
// split gives a node several outputs, taken with [k].
attngraph::Graph two_heads(const Tensor& x, const Tensor& wqkv) {
    namespace ex = attngraph::expr;
    auto X = ex::input("X", x);
    auto W = ex::param("Wqkv", wqkv);  // (d, 6·dk): Q, K, V of two heads side by side
    auto parts = ex::split(ex::linear(X, W), 6).named("QKV_split");
    auto head = [&](int i) {
        auto A = ex::softmax(ex::matmul(parts[i], ex::transpose(parts[2 + i])));
        return ex::matmul(A, parts[4 + i]).named("head" + std::to_string(i + 1) + ".O");
    };
    std::vector<decltype(head(0))> heads = {head(0), head(1)};
    auto Y = ex::concat(heads).named("Y");
    return ex::to_graph(Y, "two_heads");
}
// [heads]

}  // namespace

int main(int argc, char** argv) try {
    const graphs::MhaWeights w = graphs::seed_mha_weights();
    attention_head(w.x, w.wq[0], w.bq[0], w.wk[0], w.bk[0], w.wv[0], w.bv[0]);
    print("mask_causal(0.5 S + alibi)",
          biased_scores(graphs::random_tensor({3, 3}, DType::f64, 1), graphs::random_tensor({3, 3}, DType::f64, 2)));
    const Graph masked =
        masked_attention(graphs::random_tensor({4, 2}, DType::f64, 3), graphs::random_tensor({4, 2}, DType::f64, 4),
                         graphs::random_tensor({4, 2}, DType::f64, 5), true, 2);
    std::printf("masked_attention: %zu nodes, last %s\n", masked.nodes().size(), masked.nodes().back().name.c_str());
    const Graph heads =
        two_heads(graphs::random_tensor({3, 4}, DType::f32, 6), graphs::random_tensor({4, 12}, DType::f32, 7));
    std::printf("two_heads: %zu nodes\n", heads.nodes().size());

    // [builder]
    // The runtime builder: the same graph, one node per call, shapes checked as nodes are added.
    GraphBuilder b("attention", DType::f64);
    Value x = b.input("X", w.x);
    Value q = linear(x, b.param("Wq", w.wq[0]), b.param("bq", w.bq[0])).named("Q");
    Value k = linear(x, b.param("Wk", w.wk[0]), b.param("bk", w.bk[0])).named("K");
    Value v = linear(x, b.param("Wv", w.wv[0]), b.param("bv", w.bv[0])).named("V");
    Value a = softmax(scale(matmul(q, transpose(k)), std::sqrt(0.5))).named("A");
    b.output(matmul(a, v).named("O"));
    Graph graph = b.build();
    // [builder]

    // [run]
    // Run on oneTBB (bit-identical for any thread count), keeping every value for a trace.
    RunOptions options;
    options.threads = 4;
    options.trace = true;
    RunResult result = run(graph, options);
    const Tensor& o = result.at(graph, "O");
    Trace trace = make_trace(graph, result);
    std::printf("%s", entry_text(trace, *trace.find("A")).c_str());
    if (argc > 1) write_trace(trace, argv[1], TraceFormat::npy, /*force=*/false);
    // [run]
    print("builder, run: O", o);

    // [gradients]
    // Reverse mode over a run that kept what the backward reads: dL/dv for L = sum(G ⊙ O),
    // G = ones here.
    RunOptions keep;
    keep.keep_for_backward = true;
    const RunResult forward = run(graph, keep);
    BackwardOptions wrt;
    wrt.wrt = {"X", "Wq", "A"};
    Gradients grads = backward(graph, forward, {}, wrt);
    const Tensor& dwq = grads.at("Wq");
    // [gradients]
    print("backward: dL/dWq", dwq);

    // [file]
    // Graph files: what `attngraph run` reads and `attngraph new` writes.
    const std::string text = graph_to_json(graph).dump(2);
    Graph again = parse_graph(text, ".", "<memory>");
    // [file]
    std::printf("graph file: %zu bytes, %zu nodes again\n", text.size(), again.nodes().size());
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
