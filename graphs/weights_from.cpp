#include "graphs/weights_from.hpp"

#include <map>

#include "engine/error.hpp"
#include "engine/safetensors.hpp"

namespace attngraph::graphs {

namespace {

/// Columns side by side: (rows, c1) | (rows, c2) | ...
Tensor hconcat(const std::vector<Tensor>& parts, DType dtype) {
    const std::size_t rows = parts.front().shape()[0];
    std::size_t cols = 0;
    for (const auto& p : parts) cols += p.shape()[1];
    Tensor out = zeros(dtype, {rows, cols});
    std::size_t at = 0;
    for (const auto& p : parts) {
        const std::size_t c = p.shape()[1];
        out.visit([&](auto& o) {
            for (std::size_t i = 0; i < rows; ++i)
                for (std::size_t j = 0; j < c; ++j)
                    o.data()[i * cols + at + j] =
                        static_cast<typename std::decay_t<decltype(o)>::value_type>(p.at_flat(i * c + j));
        });
        at += c;
    }
    return out;
}

}  // namespace

Graph with_weights_from(const Graph& graph, const std::filesystem::path& file, const std::string& prefix) {
    const SafetensorsFile st(file);
    const DType dt = graph.dtype();
    const bool cross = graph.find("Wkv") >= 0;
    const std::string w_in = cross ? "Wq" : "Wqkv";
    if (graph.find(w_in) < 0 || graph.find("Wo") < 0)
        throw GraphError("--weights-from: graph '" + graph.name() +
                         "' has no Wqkv/Wo tensors (use a batched variant such as mha-batched or gqa)");
    // weight of projection p, (in, out); its bias as (1, out), zeros when the file has none
    auto weight = [&](const std::string& p) { return st.load(prefix + p + ".weight", dt, true); };
    auto bias = [&](const std::string& p, std::size_t out) {
        if (!st.find(prefix + p + ".bias")) return zeros(dt, {1, out});
        Tensor b = st.load(prefix + p + ".bias", dt);
        if (b.shape().size() != 1 || b.shape()[0] != out)
            throw ShapeError(file.string() + ": key '" + prefix + p + ".bias' is " + shape_str(b.shape()) +
                             ", the variant needs " + std::to_string(out));
        Tensor r = zeros(dt, {1, out});
        r.visit([&](auto& a) {
            for (std::size_t i = 0; i < out; ++i)
                a.data()[i] = static_cast<typename std::decay_t<decltype(a)>::value_type>(b.at_flat(i));
        });
        return r;
    };
    auto expect = [&](const Tensor& t, const std::string& key, const Shape& want) {
        if (t.shape() != want)
            throw ShapeError(file.string() + ": key '" + prefix + key + ".weight' is " +
                             shape_str({t.shape()[1], t.shape()[0]}) + " (out x in), the variant's " + graph.name() +
                             " needs " + shape_str({want[1], want[0]}));
    };
    const Shape win = graph.value(graph.at(w_in)).shape, wo = graph.value(graph.at("Wo")).shape;
    const std::size_t d = wo[0];
    std::map<std::string, Tensor> repl;
    Tensor q = weight("q_proj"), k = weight("k_proj"), v = weight("v_proj"), o = weight("o_proj");
    expect(q, "q_proj", {win[0], d});
    const std::size_t kv = cross ? graph.value(graph.at("Wkv")).shape[1] / 2 : (win[1] - d) / 2;
    const std::size_t kv_in = cross ? graph.value(graph.at("Wkv")).shape[0] : win[0];
    expect(k, "k_proj", {kv_in, kv});
    expect(v, "v_proj", {kv_in, kv});
    expect(o, "o_proj", wo);
    auto reshape_bias = [&](const std::string& name, const Tensor& b) {
        Tensor r = b;
        const Shape want = graph.value(graph.at(name)).shape;
        if (want.size() == 1) {
            Tensor flat = zeros(dt, want);
            flat.visit([&](auto& a) {
                for (std::size_t i = 0; i < a.size(); ++i)
                    a.data()[i] = static_cast<typename std::decay_t<decltype(a)>::value_type>(b.at_flat(i));
            });
            r = flat;
        }
        repl[name] = r;
    };
    if (cross) {
        repl["Wq"] = q;
        repl["Wkv"] = hconcat({k, v}, dt);
        reshape_bias("bq", bias("q_proj", d));
        reshape_bias("bkv", hconcat({bias("k_proj", kv), bias("v_proj", kv)}, dt));
    } else {
        repl["Wqkv"] = hconcat({q, k, v}, dt);
        reshape_bias("bqkv", hconcat({bias("q_proj", d), bias("k_proj", kv), bias("v_proj", kv)}, dt));
    }
    repl["Wo"] = o;
    reshape_bias("bo", bias("o_proj", d));
    return graph.with_tensors(repl);
}

}  // namespace attngraph::graphs
