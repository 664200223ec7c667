#include "graphs/mha.hpp"

#include <cmath>
#include <random>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "ops/ops.hpp"

namespace attngraph::graphs {

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, double scale) {
    std::mt19937_64 rng(seed);
    Tensor t = zeros(dtype, shape);
    t.visit([&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        for (auto& v : a) v = static_cast<T>(scale * (2.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53 - 1.0));
    });
    return t;
}

static Tensor matrix(const std::vector<std::vector<double>>& rows) {
    Array<double> a = Array<double>::from_shape({rows.size(), rows.empty() ? 0 : rows[0].size()});
    for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t j = 0; j < rows[i].size(); ++j) a(i, j) = rows[i][j];
    return a;
}

MhaWeights random_mha_weights(const MhaConfig& c) {
    if (c.heads == 0 || c.d_model % c.heads != 0)
        throw GraphError("d_model " + std::to_string(c.d_model) + " is not a multiple of heads " +
                         std::to_string(c.heads));
    const std::size_t dk = c.d_model / c.heads;
    const double w = 1.0 / std::sqrt(static_cast<double>(c.d_model));
    std::uint64_t s = c.seed * 1000003;
    MhaWeights m;
    m.x = c.batch ? random_tensor({c.batch, c.seq, c.d_model}, c.dtype, ++s) : random_tensor({c.seq, c.d_model}, c.dtype, ++s);
    for (std::size_t h = 0; h < c.heads; ++h) {
        m.wq.push_back(random_tensor({c.d_model, dk}, c.dtype, ++s, w));
        m.bq.push_back(random_tensor({1, dk}, c.dtype, ++s, w));
        m.wk.push_back(random_tensor({c.d_model, dk}, c.dtype, ++s, w));
        m.bk.push_back(random_tensor({1, dk}, c.dtype, ++s, w));
        m.wv.push_back(random_tensor({c.d_model, dk}, c.dtype, ++s, w));
        m.bv.push_back(random_tensor({1, dk}, c.dtype, ++s, w));
    }
    m.wo = random_tensor({c.d_model, c.d_model}, c.dtype, ++s, w);
    m.bo = random_tensor({1, c.d_model}, c.dtype, ++s, w);
    return m;
}

MhaConfig seed_mha_config() {
    MhaConfig c;
    c.seq = 3;
    c.d_model = 4;
    c.heads = 2;
    c.tokens = {"外送", "晚到", "補償"};
    c.name = "seed_mha";
    return c;
}

MhaWeights seed_mha_weights() {
    const double r = 0.707107, s = 1.414214, t = 2.121321;
    MhaWeights m;
    m.x = matrix({{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}});
    const Tensor eye_top = matrix({{1, 0}, {0, 1}, {0, 0}, {0, 0}});
    const Tensor zero_row = matrix({{0, 0}});
    m.wq = {eye_top, eye_top};
    m.bq = {zero_row, zero_row};
    m.wk = {matrix({{-r, -r}, {r, r}, {0, 0}, {0, 0}}), matrix({{-r, -r}, {-s, -s}, {0, 0}, {0, 0}})};
    m.bk = {matrix({{r, r}}), matrix({{t, t}})};
    m.wv = {eye_top, matrix({{0, 0}, {0, 0}, {1, 0}, {0, 1}})};
    m.bv = {zero_row, zero_row};
    m.wo = matrix({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}});
    m.bo = matrix({{0, 0, 0, 0}});
    return m;
}

Graph build_mha(const MhaConfig& c, const MhaWeights& w) {
    if (c.heads == 0 || w.wq.size() != c.heads)
        throw GraphError("build_mha: " + std::to_string(w.wq.size()) + " heads of weights for heads = " +
                         std::to_string(c.heads));
    const double dk = static_cast<double>(w.wq[0].shape().at(1));
    GraphBuilder g(c.name, c.dtype);
    g.set_tokens(c.tokens);
    Value x = g.input("X", w.x.cast(c.dtype));
    std::vector<Value> heads;
    for (std::size_t i = 0; i < c.heads; ++i) {
        const std::string h = "head" + std::to_string(i + 1) + ".";
        Value wq = g.param(h + "Wq", w.wq[i]), bq = g.param(h + "bq", w.bq[i]);
        Value wk = g.param(h + "Wk", w.wk[i]), bk = g.param(h + "bk", w.bk[i]);
        Value wv = g.param(h + "Wv", w.wv[i]), bv = g.param(h + "bv", w.bv[i]);
        Value q = linear(x, wq, bq).as(h + "Q");
        Value k = linear(x, wk, bk).as(h + "K");
        Value v = linear(x, wv, bv).as(h + "V");
        Value kt = transpose(k).as(h + "KT");
        Value s_raw = matmul(q, kt).as(h + "S_raw");
        Value s = scale(s_raw, std::sqrt(1.0 / dk)).as(h + "S");  // sqrt(0.5) is the double nearest 1/sqrt(2)
        Value a = softmax(s).as(h + "A");
        heads.push_back(matmul(a, v).as(h + "O"));
    }
    Value o = concat(heads, -1).as("O_concat");
    Value wo = g.param("Wo", w.wo), bo = g.param("bo", w.bo);  // in this order (not two call arguments)
    Value y = linear(o, wo, bo).as("Y");
    g.output(y);
    return g.build();
}

}  // namespace attngraph::graphs
