// attngraph grad GRAPH.json [--input NAME=FILE.npy]... [--output-grad [NAME=]FILE.npy]...
//                           [--wrt NAME,NAME...] [--trace DIR] [--threads N] [--dtype f32|f64] [--force]
//                           [--full] [--patch NODE=FILE.npy]...
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/common.hpp"
#include "cli/progress.hpp"
#include "engine/autodiff.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/npy.hpp"
#include "engine/patch.hpp"
#include "engine/stats.hpp"
#include "engine/trace.hpp"

namespace attngraph::cli {

namespace {

struct GradArgs {
    GraphArgs graph;
    std::vector<std::string> output_grads;  // FILE.npy or NAME=FILE.npy
    std::vector<std::string> wrt;
    std::string trace_dir;
    bool force = false;
    bool check_finite = false;
    bool full = false;
    std::vector<std::string> patches;  // NODE=FILE.npy
};

struct OutputGrads {
    std::map<std::string, Tensor> tensors;
    std::string description;  // "Y: ones", "Y: g.npy"
};

OutputGrads read_output_grads(const Graph& graph, const GradArgs& args) {
    std::string outputs;
    for (int id : graph.outputs()) outputs += (outputs.empty() ? "" : ", ") + graph.value(id).name;
    OutputGrads r;
    std::map<std::string, std::string> files;
    for (const auto& spec : args.output_grads) {
        const auto eq = spec.find('=');
        std::string name, file = spec;
        if (eq != std::string::npos && !std::filesystem::exists(spec)) {
            name = spec.substr(0, eq);
            file = spec.substr(eq + 1);
            const int id = graph.find(name);
            bool is_output = false;
            for (int o : graph.outputs()) is_output = is_output || o == id;
            if (!is_output)
                throw GraphError("--output-grad " + spec + ": '" + name + "' is not an output of graph '" +
                                 graph.name() + "' (outputs: " + outputs + ")");
        } else {
            if (graph.outputs().size() != 1)
                throw GraphError("--output-grad " + spec + ": graph '" + graph.name() + "' has " +
                                 std::to_string(graph.outputs().size()) + " outputs (" + outputs +
                                 "): give one --output-grad NAME=FILE.npy per output");
            name = graph.value(graph.outputs()[0]).name;
        }
        if (files.count(name)) throw Error("--output-grad: two gradients given for output '" + name + "'");
        Tensor g;
        try {
            g = load_npy(file, std::size_t(1) << 32, graph.dtype());
        } catch (const IoError& e) {
            throw IoError("--output-grad " + spec + ": " + e.what());
        }
        const Shape& want = graph.value(graph.at(name)).shape;
        if (g.shape() != want)
            throw ShapeError("--output-grad " + spec + ": gradient of output '" + name + "' is " +
                             shape_str(g.shape()) + " but the output is " + shape_str(want));
        files[name] = file;
        r.tensors[name] = std::move(g);
    }
    for (int id : graph.outputs()) {
        const std::string& name = graph.value(id).name;
        r.description += (r.description.empty() ? "" : ", ") + name + ": " + (files.count(name) ? files[name] : "ones");
    }
    return r;
}

}  // namespace

void add_grad_command(CLI::App& app) {
    auto args = std::make_shared<GradArgs>();
    CLI::App* cmd = app.add_subcommand(
        "grad", "Run a graph forward and backward; print gradients of L = sum(G ⊙ output), optionally trace them");
    add_graph_args(*cmd, args->graph);
    cmd->add_option("--output-grad", args->output_grads,
                    "G for the output: FILE.npy, or NAME=FILE.npy once per output (default: all ones)");
    cmd->add_option("--wrt", args->wrt,
                    "Print the gradients of these tensors or nodes (comma-separated; default: every param, or every "
                    "input without params)");
    cmd->add_option(
        "--trace", args->trace_dir,
        "Write the forward trace and the gradient of every node and tensor (grad/<name>.npy) to this directory")
        ->check(NonEmpty);
    cmd->add_flag("--force", args->force, "Replace an existing non-empty trace directory");
    cmd->add_flag("--check-finite", args->check_finite,
                  "Stop at the first node whose output holds NaN or Inf (the partial forward trace is kept, marked "
                  "incomplete); after the backward pass, name the first value whose gradient does");
    cmd->add_flag("--full", args->full,
                  "Print every value of every gradient (by default one of more than 1000 values is summarised)");
    cmd->add_option("--patch", args->patches,
                    "Replace a node's output with a .npy file's values, a constant for the gradients: no gradient "
                    "flows through it to the node's inputs (NODE=FILE.npy, repeatable)")
        ->check(NameEqualsFile);
    cmd->callback([args] {
        if (!args->trace_dir.empty()) check_output_dir(args->trace_dir, args->force);
        const Graph loaded = load_with_inputs(args->graph);
        // a patched value is frozen: the graph is differentiated with it as a param tensor
        RunOptions patched;
        add_patches(loaded, patched, args->patches, max_memory_bytes(args->graph) / 4);
        const std::set<std::string> patched_set = patched_names(loaded, patched);
        std::map<std::string, Tensor> frozen;
        for (const auto& [id, value] : patched.patches) frozen[loaded.value(id).name] = *value;
        const Graph graph = frozen.empty() ? loaded : freeze_values(loaded, frozen);
        std::vector<std::string> wrt = split_globs(args->wrt);
        for (const auto& name : wrt)
            if (graph.find(name) < 0)
                throw GraphError("--wrt " + name + ": graph '" + graph.name() + "' (" + args->graph.graph +
                                 ") has no tensor or node named '" + name + "'");
        for (ValueKind kind : {ValueKind::param, ValueKind::input}) {  // every param, else every input
            if (!wrt.empty()) break;
            for (const auto& v : loaded.values())
                if (v.kind == kind) wrt.push_back(v.name);
        }
        const OutputGrads output_grads = read_output_grads(graph, *args);

        RunOptions run_options;
        run_options.threads = args->graph.threads;
        // a trace keeps every value; else the forward keeps what the backward reads (the
        // attention weights are recomputed there, with the same bits)
        run_options.keep_all = !args->trace_dir.empty();
        run_options.keep_for_backward = true;
        run_options.check_finite = args->check_finite;
        Progress progress("grad");
        run_options.progress = progress.callback("forward", "nodes");
        const RunResult forward = run_graph(args->graph, graph, run_options);
        if (!forward.complete) {
            if (!args->trace_dir.empty()) {
                Trace partial = make_trace(graph, forward);
                mark_patched(partial, patched_set);
                write_trace(partial, args->trace_dir, TraceFormat::npy, args->force);
            }
            const Node* bad = nullptr;
            for (const auto& n : graph.nodes())
                if (n.name == forward.stopped_at) bad = &n;
            throw Error(
                args->graph.graph + ": node '" + forward.stopped_at + "' (" + (bad ? bad->op->name : "?") +
                ") output has " + forward.stop_reason +
                (args->trace_dir.empty() ? "" : "; partial trace in " + args->trace_dir + " (marked incomplete)"));
        }
        BackwardOptions options;
        options.threads = args->graph.threads;
        if (args->trace_dir.empty()) options.wrt = wrt;  // with a trace: every value
        options.progress = progress.callback("backward", "nodes");
        const Gradients grads = backward(graph, forward, output_grads.tensors, options);
        progress.finish();

        const std::string loss = "L = sum(G ⊙ output), G per output: " + output_grads.description;
        if (!args->trace_dir.empty()) {
            Trace trace = make_trace(graph, forward);
            mark_patched(trace, patched_set);
            write_grad_trace(trace, grads, loss, args->trace_dir, args->force);
        }
        if (args->check_finite) {  // the first gradient that went bad: nodes in backward order, then tensors
            std::vector<std::pair<std::string, std::string>> order;  // name, what
            for (auto n = graph.nodes().rbegin(); n != graph.nodes().rend(); ++n)
                for (int id : n->outputs)
                    order.emplace_back(graph.value(id).name, "node '" + n->name + "' (" + n->op->name + ")");
            for (const auto& name : grads.names())
                if (graph.value(graph.at(name)).producer < 0) order.emplace_back(name, "tensor '" + name + "'");
            for (const auto& [name, what] : order) {
                if (!grads.contains(name)) continue;
                const TensorStats st = tensor_stats(grads.at(name));
                if (st.nonfinite)
                    throw Error(args->graph.graph + ": the gradient of " + what + " holds " +
                                std::to_string(st.nonfinite) + " non-finite values" +
                                (args->trace_dir.empty() ? "" : "; gradients written to " + args->trace_dir));
            }
        }

        std::cout << "# " << loss << "\n";
        Trace sequence, plain;  // rows labelled with the tokens, or not (params)
        sequence.tokens = graph.tokens();
        for (const auto& name : wrt) {
            const ValueInfo& v = graph.value(graph.at(name));
            TraceEntry e;
            e.name = "dL/d" + name;
            e.kind = "gradient";
            e.shape = v.shape;
            e.data = std::make_shared<const Tensor>(grads.at(name));
            const Trace& labels = v.kind == ValueKind::param ? plain : sequence;
            std::cout << (args->full ? entry_text(labels, e) : entry_summary_text(labels, e));
        }
        if (!args->trace_dir.empty()) std::cout << "trace written to " << args->trace_dir << "\n";
    });
}

}  // namespace attngraph::cli
