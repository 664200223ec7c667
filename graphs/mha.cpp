#include "graphs/mha.hpp"

#include <cmath>
#include <random>

#include "engine/error.hpp"
#include "engine/expr.hpp"

namespace attngraph::graphs {

namespace {
thread_local TensorBudget* current_budget = nullptr;
}

TensorBudget::TensorBudget(std::size_t max_bytes, std::string limit)
    : m_max(max_bytes),
      m_limit(limit.empty() ? "the memory limit of " + std::to_string(max_bytes) + " bytes" : std::move(limit)),
      m_outer(current_budget) {
    current_budget = this;
}
TensorBudget::~TensorBudget() {
    current_budget = m_outer;
}

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, double scale) {
    if (TensorBudget* b = current_budget) {
        const std::size_t word = dtype == DType::f32 ? 4 : 8, count = element_count_capped(shape);
        const std::size_t bytes = count > SIZE_MAX / word ? SIZE_MAX : count * word;
        if (bytes > b->m_max || b->m_used > b->m_max - bytes)
            throw ShapeError("a tensor of shape (" + shape_str(shape) + ") " + to_string(dtype) + " needs " +
                             (bytes == SIZE_MAX ? "more than " + std::to_string(SIZE_MAX) : std::to_string(bytes)) +
                             " bytes" +
                             (b->m_used ? " after " + std::to_string(b->m_used) + " bytes of the others" : "") +
                             ", over " + b->m_limit);
        b->m_used += bytes;
    }
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
    m.x = c.batch ? random_tensor({c.batch, c.seq, c.d_model}, c.dtype, ++s)
                  : random_tensor({c.seq, c.d_model}, c.dtype, ++s);
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
    namespace ex = expr;
    if (c.heads == 0 || w.wq.size() != c.heads)
        throw GraphError("build_mha: " + std::to_string(w.wq.size()) +
                         " heads of weights for heads = " + std::to_string(c.heads));
    const double dk = static_cast<double>(w.wq[0].shape().at(1));
    auto x = ex::input("X", w.x.cast(c.dtype));
    // leaves and nodes are listed in the graph in the order they are made: one statement each
    auto head = [&](std::size_t i) {
        const std::string h = "head" + std::to_string(i + 1) + ".";
        auto wq = ex::param(h + "Wq", w.wq[i]);
        auto bq = ex::param(h + "bq", w.bq[i]);
        auto wk = ex::param(h + "Wk", w.wk[i]);
        auto bk = ex::param(h + "bk", w.bk[i]);
        auto wv = ex::param(h + "Wv", w.wv[i]);
        auto bv = ex::param(h + "bv", w.bv[i]);
        auto q = ex::linear(x, wq, bq).named(h + "Q");
        auto k = ex::linear(x, wk, bk).named(h + "K");
        auto v = ex::linear(x, wv, bv).named(h + "V");
        auto kt = ex::transpose(k).named(h + "KT");
        auto s_raw = ex::matmul(q, kt).named(h + "S_raw");
        auto s = ex::scale(s_raw, std::sqrt(1.0 / dk)).named(h + "S");  // sqrt(0.5) is the double nearest 1/sqrt(2)
        auto a = ex::softmax(s).named(h + "A");
        return ex::matmul(a, v).named(h + "O");
    };
    std::vector<decltype(head(0))> heads;
    for (std::size_t i = 0; i < c.heads; ++i) heads.push_back(head(i));
    auto o = ex::concat(heads, -1).named("O_concat");
    auto wo = ex::param("Wo", w.wo);
    auto bo = ex::param("bo", w.bo);
    auto y = ex::linear(o, wo, bo).named("Y");
    return ex::to_graph(y, c.name, {c.dtype, c.tokens});
}

}  // namespace attngraph::graphs
