// Teaching head 1 of the seed graph to look elsewhere. In the seed document, head 1 ties the
// query token 補償 (compensation) to its cause 晚到 (arrived late). Here the target output
// is what Y would be if head 1 looked at 外送 (delivery) instead: its output row for 補償
// becomes head1.V's row for 外送. A few steps of gradient descent on the weights, with
//   loss = 0.5 · ||Y - target||²,  output gradient dL/dY = Y - target,
// move the attention row of 補償 from 晚到 to 外送. By default only the query and key
// weights (Wq, bq, Wk, bk of both heads) are trained, so the only way to the target is to
// change where the heads look. --all trains every weight (default lr 0.1): gradient descent
// then takes the easier way through Wv and Wo, and head 1's attention barely moves.
//
//   gradient_descent [GRAPH.json] [--steps N] [--lr RATE] [--all] [--threads N]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"

using namespace attngraph;

namespace {

void print_row(const Graph& graph, const RunResult& r, const std::string& name, std::size_t row) {
    const Tensor& a = r.at(graph, name);
    const std::size_t n = a.shape()[1];
    std::printf("  %-8s %s ->", name.c_str(), graph.tokens()[row].c_str());
    for (std::size_t j = 0; j < n; ++j) std::printf("  %s %.6f", graph.tokens()[j].c_str(), a.at_flat(row * n + j));
    std::printf("\n");
}

double loss_of(const Array<double>& y, const Array<double>& target, Array<double>& dy) {
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
        dy.data()[i] = y.data()[i] - target.data()[i];
        l += 0.5 * dy.data()[i] * dy.data()[i];
    }
    return l;
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(ATTNGRAPH_SOURCE_DIR) + "/graphs/seed_mha.json";
    int steps = 60, threads = 1;
    double lr = 0;
    bool all = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--lr") == 0 && i + 1 < argc)
            lr = std::atof(argv[++i]);
        else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--all") == 0)
            all = true;
        else
            path = argv[i];
    }
    if (lr <= 0) lr = all ? 0.1 : 0.5;
    try {
        LoadOptions lo;
        lo.dtype = DType::f64;
        Graph graph = load_graph(path, lo);
        RunOptions keep;
        keep.keep_all = true;
        keep.threads = threads;
        const RunResult before = run(graph, keep);
        const std::size_t query = graph.tokens().size() - 1, look = 0;  // 補償 should look at 外送

        // target: Y with head 1's output row for 補償 replaced by head1.V's row for 外送
        const Array<double>& y0 = before.at(graph, "Y").as<double>();
        const Array<double>& o1 = before.at(graph, "head1.O").as<double>();
        const Array<double>& v1 = before.at(graph, "head1.V").as<double>();
        const Array<double>& wo = before.at(graph, "Wo").as<double>();
        const std::size_t dk = o1.shape()[1], d = y0.shape()[1];
        Array<double> target = y0;
        for (std::size_t j = 0; j < d; ++j)
            for (std::size_t k = 0; k < dk; ++k) target(query, j) += (v1(look, k) - o1(query, k)) * wo(k, j);

        std::vector<std::string> trained;
        for (const auto& v : graph.values()) {
            if (v.kind != ValueKind::param) continue;
            const std::string leaf = v.name.substr(v.name.find('.') + 1);
            if (all || leaf == "Wq" || leaf == "bq" || leaf == "Wk" || leaf == "bk") trained.push_back(v.name);
        }
        std::printf("attention of %s before:\n", graph.tokens()[query].c_str());
        print_row(graph, before, "head1.A", query);
        print_row(graph, before, "head2.A", query);
        std::printf("training %zu weights (%s), lr %g, %d steps\n", trained.size(), all ? "all" : "queries and keys",
                    lr, steps);

        BackwardOptions bo;
        bo.wrt = trained;
        bo.threads = threads;
        Array<double> dy = y0;
        RunResult r = before;
        for (int step = 0; step <= steps; ++step) {
            const double loss = loss_of(r.at(graph, "Y").as<double>(), target, dy);
            if (step % 10 == 0 || step == steps) std::printf("step %3d  loss %.6f\n", step, loss);
            if (step == steps) break;
            const Gradients grads = backward(graph, r, {{"Y", Tensor(dy)}}, bo);
            std::map<std::string, Tensor> updated;
            for (const auto& name : trained) {
                Array<double> w = graph.value(graph.at(name)).data->as<double>();
                w -= lr * grads.at(name).as<double>();
                updated[name] = Tensor(std::move(w));
            }
            graph = graph.with_tensors(updated);
            r = run(graph, keep);
        }
        std::printf("attention of %s after:\n", graph.tokens()[query].c_str());
        print_row(graph, r, "head1.A", query);
        print_row(graph, r, "head2.A", query);
    } catch (const Error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
