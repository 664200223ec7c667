// Uses engine/expr.hpp exactly as the README's C++ example, against an installed attngraph:
// evaluate() must agree with a run of the lowered graph, gradients() must give dL/dX, dL/dQ.
#include <cmath>
#include <cstdio>

#include "engine/executor.hpp"
#include "engine/expr.hpp"

using namespace attngraph;

int main() {
    const double dk = 2;
    Tensor x = Array<double>{{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}};
    Tensor wq = Array<double>{{1, 0}, {0, 1}, {0, 0}, {0, 0}}, bq = Array<double>{{0, 0}};
    Tensor wk = Array<double>{{-0.5, 0.25}, {0.5, 0.5}, {0, 1}, {0, 0}}, bk = Array<double>{{0.5, 0.5}};
    Tensor wv = Array<double>{{0, 0}, {0, 0}, {1, 0}, {0, 1}}, bv = Array<double>{{0, 0}};

    namespace ex = attngraph::expr;
    auto X = ex::input("X", x);
    auto q = ex::linear(X, ex::param("Wq", wq), ex::param("bq", bq)).named("Q");
    auto k = ex::linear(X, ex::param("Wk", wk), ex::param("bk", bk)).named("K");
    auto v = ex::linear(X, ex::param("Wv", wv), ex::param("bv", bv)).named("V");
    auto A = ex::softmax(ex::scale(ex::matmul(q, ex::transpose(k)), 1 / std::sqrt(dk))).named("A");
    auto O = ex::matmul(A, v).named("O");

    Tensor y = ex::evaluate(O);
    Graph g = ex::to_graph(O, "attention");
    auto d = ex::gradients(O, {X, q});

    const Tensor ran = run(g).at(g, "O");
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y.at_flat(i) - ran.at_flat(i)));
    const bool ok = y.shape() == Shape{3, 2} && worst < 1e-12 && g.nodes().size() == 8 && d.size() == 2 &&
                    d[0].shape() == Shape{3, 4} && d[1].shape() == Shape{3, 2};
    std::printf("O (3x2) = [%g %g; %g %g; %g %g], |evaluate - run| = %g, %zu nodes: %s\n", y.at_flat(0), y.at_flat(1),
                y.at_flat(2), y.at_flat(3), y.at_flat(4), y.at_flat(5), worst, g.nodes().size(), ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
