#pragma once
// The attention backward tests' shared pieces (test_attention_backward.cpp,
// test_attention_backward_masked.cpp): the graphs they differentiate, a plain-loop f64
// reference of dQ, dK, dV and the parameters' gradients (no engine code), and a runner of the
// fused (untraced or traced) and the plain per-node backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/executor.hpp"
#include "graphs/mha.hpp"
#include "helpers.hpp"
#include "ops/attention.hpp"
#include "ops/ops.hpp"

namespace attngraph::test::attention_backward {

using test::values_of;  // (support/helpers.hpp) for the suites that use this namespace

// Q (batch..., n, dk), K (kbatch..., m, dk), V (vbatch..., m, dv); Y = A·V with
// A = softmax(c · Q·Kᵀ) (c = 1/sqrt(dk), or no Scale node when !scaled), output Y.
struct Case {
    Shape q, k, v;
    bool scaled = true;
};

inline double factor_of(const Case& c) {
    return 1.0 / std::sqrt(static_cast<double>(c.q.back()));
}

inline Graph attention_graph(const Case& c, DType dtype) {
    GraphBuilder g("attention", dtype);
    Value q = g.input("Q", graphs::random_tensor(c.q, dtype, 1, 2.0));
    Value k = g.input("K", graphs::random_tensor(c.k, dtype, 2, 2.0));
    Value v = g.input("V", graphs::random_tensor(c.v, dtype, 3));
    Value s = matmul(q, transpose(k)).named("S_raw");
    if (c.scaled) s = scale(s, factor_of(c)).named("S");
    Value a = softmax(s).named("A");
    g.output(matmul(a, v).named("Y"));
    return g.build();
}

// dL/dQ, dL/dK, dL/dV of L = sum(G ⊙ Y) by plain loops in double: per batch of Q, with K's
// and V's matrix chosen by numpy broadcasting of the batch axes.
struct Reference {
    std::vector<double> dq, dk, dv;
    std::vector<double> dslopes;             // with an ALiBi bias
    std::vector<double> dsinks;              // with sinks
    std::vector<double> dlambda;             // with the Differential Transformer's lambda
    std::vector<double> dbias, dmultiplier;  // with an added bias: its operands'
};

inline std::size_t matrix_of(std::size_t b, const Shape& qbatch, const Shape& obatch) {
    std::size_t off = 0, stride = 1, rem = b;
    std::vector<std::size_t> idx(qbatch.size());
    for (std::size_t i = qbatch.size(); i-- > 0;) {
        idx[i] = rem % qbatch[i];
        rem /= qbatch[i];
    }
    for (std::size_t i = obatch.size(); i-- > 0;) {
        const std::size_t qi = idx[i + qbatch.size() - obatch.size()];
        off += (obatch[i] == 1 ? 0 : qi) * stride;
        stride *= obatch[i];
    }
    return off;
}

// keep(b, i, j): whether query i of Q's matrix b sees key j (a Mask; a row that sees none has
// A = 0); `after`: a Scale after the Mask; an ALiBi bias and then softcapping between the
// Scale and the Mask: z = c · Q·Kᵀ − slopes[b mod h]·|i + offset − j|,
// S = after · cap·tanh(z / cap) (S = after · z without a cap). `sinks`: gpt-oss's sink logit
// of head b mod h as one more column of each row's softmax, its weight dropped. `lambda`: the
// Differential Transformer, Q's matrices 2o and 2o + 1 (the maps) giving O's matrix o =
// (A_2o − lambda[o mod size]·A_2o+1)·V, so that map 2o + 1's dA is −lambda·dO·Vᵀ and its
// share of dV −lambda·Aᵀ·dO; dlambda sums −dO·Vᵀ ⊙ A_2o+1. `added`: a bias added to z after the
// ALiBi bias (before the cap), whose operands' gradients it gives from dz. `a_seed`: dL/dA
// from outside (A also an output of the graph), added to dO·Vᵀ.
struct AddedBias {
    std::function<double(std::size_t b, std::size_t i, std::size_t j)> value;  // empty: none
    // adds dz at (b, i, j) into the operands' gradients
    std::function<void(std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r)> grad;
    std::size_t sizes[2] = {0, 0};  // the operands' elements
};
using Keep = std::function<bool(std::size_t b, std::size_t i, std::size_t j)>;
struct AlibiBias {
    std::vector<double> slopes;  // empty: no bias
    long offset = 0;
    double distance(std::size_t i, std::size_t j) const {
        return std::abs(static_cast<double>(static_cast<long>(i) + offset - static_cast<long>(j)));
    }
};

inline Reference reference(const Case& c, const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& gt,
                           const Keep& keep = {}, double after = 1.0, const AlibiBias& alibi = {}, double cap = 0,
                           const std::vector<double>& sinks = {}, const std::vector<double>& lambda = {},
                           const AddedBias& added = {},
                           const std::function<double(std::size_t b, std::size_t i, std::size_t j)>& a_seed = {}) {
    const std::size_t n = c.q.end()[-2], dk = c.q.back(), m = c.k.end()[-2], dv = c.v.back();
    const Shape qb(c.q.begin(), c.q.end() - 2), kb(c.k.begin(), c.k.end() - 2), vb(c.v.begin(), c.v.end() - 2);
    const std::size_t batches = element_count(qb);
    // the operands are f64 (the callers cast them); read in place, as at_flat costs a visit
    const double *qd = qt.as<double>().data(), *kd = kt.as<double>().data(), *vd = vt.as<double>().data(),
                 *gd = gt.as<double>().data();
    const double f = c.scaled ? factor_of(c) : 1.0;
    // S = after · capped(z) and dS/dz
    auto capped = [&](double z) { return after * (cap > 0 ? cap * std::tanh(z / cap) : z); };
    auto slope = [&](double z) {
        const double t = cap > 0 ? std::tanh(z / cap) : 0.0;
        return after * (1.0 - t * t);
    };
    Reference r;
    r.dq.assign(qt.size(), 0.0);
    r.dk.assign(kt.size(), 0.0);
    r.dv.assign(vt.size(), 0.0);
    r.dslopes.assign(alibi.slopes.size(), 0.0);
    r.dsinks.assign(sinks.size(), 0.0);
    r.dlambda.assign(lambda.size(), 0.0);
    r.dbias.assign(added.sizes[0], 0.0);
    r.dmultiplier.assign(added.sizes[1], 0.0);
    // Every element is read through a plain pointer and each row's scratch is reused: under
    // ThreadSanitizer and at the tests' -O0, a call per element (an accessor lambda, a vector's
    // operator[], the keep function three times a key) cost most of the attention backward
    // tests' time there. The arithmetic, and its order, is as before.
    std::vector<double> zs(m), ss(m), as(m), das(m);
    std::vector<char> seens(m);  // the keys the row sees (a masked key adds nothing)
    double *z = zs.data(), *s = ss.data(), *a = as.data(), *da = das.data();
    char* seen = seens.data();
    double *dq = r.dq.data(), *dkr = r.dk.data(), *dvr = r.dv.data();
    for (std::size_t b = 0; b < batches; ++b) {
        // the map's O matrix and its weight in O: 1, or −lambda for the second map
        const std::size_t o = lambda.empty() ? b : b / 2, l = lambda.empty() ? 0 : o % lambda.size();
        const bool second = !lambda.empty() && b % 2 == 1;
        const double coef = second ? -lambda[l] : 1.0;
        const std::size_t h = alibi.slopes.empty() ? 0 : b % alibi.slopes.size();
        const double slope_h = alibi.slopes.empty() ? 0.0 : alibi.slopes[h];
        const std::size_t kj = matrix_of(b, qb, kb), vj = matrix_of(b, qb, vb);
        const double *K = kd + kj * m * dk, *V = vd + vj * m * dv;  // row j at K + j·dk, V + j·dv
        double *dK = dkr + kj * m * dk, *dV = dvr + vj * m * dv;
        for (std::size_t i = 0; i < n; ++i) {
            const double *Q = qd + (b * n + i) * dk, *G = gd + (o * n + i) * dv;
            double* dQ = dq + (b * n + i) * dk;
            double mx = -INFINITY, sum = 0;
            for (std::size_t j = 0; j < m; ++j) {
                seen[j] = !keep || keep(b, i, j);
                if (!seen[j]) continue;
                const double* Kj = K + j * dk;
                double dot = 0;
                for (std::size_t d = 0; d < dk; ++d) dot += Q[d] * Kj[d];
                z[j] = f * dot - (alibi.slopes.empty() ? 0.0 : slope_h * alibi.distance(i, j)) +
                       (added.value ? added.value(b, i, j) : 0.0);
                s[j] = capped(z[j]);
                mx = std::max(mx, s[j]);
            }
            if (mx == -INFINITY) continue;  // no key: A = 0, O = 0 (a sink takes all the weight)
            const double sink = sinks.empty() ? 0.0 : sinks[b % sinks.size()];
            if (!sinks.empty()) mx = std::max(mx, sink);
            for (std::size_t j = 0; j < m; ++j) sum += a[j] = seen[j] ? std::exp(s[j] - mx) : 0.0;
            if (!sinks.empty()) sum += std::exp(sink - mx);
            double rowdot = 0;
            for (std::size_t j = 0; j < m; ++j) {
                if (!seen[j]) continue;
                a[j] /= sum;
                const double* Vj = V + j * dv;
                double* dVj = dV + j * dv;
                double d_a = 0;
                for (std::size_t d = 0; d < dv; ++d) {
                    d_a += G[d] * Vj[d];
                    dVj[d] += coef * a[j] * G[d];
                }
                if (second) r.dlambda[l] -= d_a * a[j];
                da[j] = coef * d_a + (a_seed ? a_seed(b, i, j) : 0.0);
                rowdot += a[j] * da[j];
            }
            if (!sinks.empty()) r.dsinks[b % sinks.size()] += std::exp(sink - mx) / sum * (0.0 - rowdot);
            for (std::size_t j = 0; j < m; ++j) {
                if (!seen[j]) continue;
                const double dz = slope(z[j]) * a[j] * (da[j] - rowdot), ds = f * dz;
                if (!alibi.slopes.empty()) r.dslopes[h] -= dz * alibi.distance(i, j);
                if (added.grad) added.grad(b, i, j, dz, r);
                const double* Kj = K + j * dk;
                double* dKj = dK + j * dk;
                for (std::size_t d = 0; d < dk; ++d) {
                    dQ[d] += ds * Kj[d];
                    dKj[d] += ds * Q[d];
                }
            }
        }
    }
    return r;
}

// Largest |got - want| / max|want|: the error relative to the gradient's scale.
inline double rel_error(const Tensor& got, const std::vector<double>& want) {
    const std::vector<double> values = values_of(got);
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, std::abs(values[i] - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    return err / scale;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    const std::size_t bytes = a.size() * (a.dtype() == DType::f32 ? 4 : 8);
    const void* pa = a.dtype() == DType::f32 ? static_cast<const void*>(a.as<float>().data())
                                             : static_cast<const void*>(a.as<double>().data());
    const void* pb = b.dtype() == DType::f32 ? static_cast<const void*>(b.as<float>().data())
                                             : static_cast<const void*>(b.as<double>().data());
    return std::memcmp(pa, pb, bytes) == 0;
}

struct Run {
    RunResult forward;
    Gradients grads;
};

enum class Mode { untraced, traced, plain };

// dL/dY of the graph's output Y
inline Tensor grad_of_y(const Graph& g, DType dtype) {
    return graphs::random_tensor(g.value(g.at("Y")).shape, dtype, 4);
}

inline Run run_backward(const Graph& g, Mode mode, int threads, std::vector<std::string> wrt = {"Q", "K", "V"}) {
    Executor ex(threads);
    RunOptions o;
    o.keep_for_backward = mode == Mode::untraced;
    o.keep_all = mode != Mode::untraced;
    Run r{ex.run(g, o), {}};
    const Tensor grad_y = grad_of_y(g, g.dtype());
    r.grads = ex.backward(g, r.forward, {{"Y", grad_y}}, wrt, {}, mode != Mode::plain);
    return r;
}

// ---- masked chains: Scale, maybe ALiBi, maybe softcapping, then Mask (a pattern and/or a boolean
// tensor), maybe a Scale after, maybe gpt-oss's sink column in the softmax

struct MaskCase {
    Case c;
    std::string pattern{};  // "", causal, window, padding
    int offset = 0;         // causal/window: keys before query 0
    bool from_end = false;  // causal: offset m - n
    int window = 0;
    bool window_causal = false;
    std::vector<int> lengths{};   // padding: keys per sequence (axis 0)
    Shape keep{};                 // a boolean mask tensor of this shape (broadcast to the scores); empty: none
    double after = 1.0;           // a Scale after the Mask (1: none)
    std::vector<double> alibi{};  // an ALiBi bias's slopes, one per head (axis -3), between Scale and Mask
    int alibi_offset = 0;
    double softcap = 0;           // > 0: Gemma 2's cap·tanh(S / cap) after the ALiBi bias, before the Mask
    std::vector<double> sinks{};  // gpt-oss's sink logits, one per head (axis -3), as the sinks variant
    // the Differential Transformer (the diff variant): Q and K (..., 2, n, d) hold the two maps,
    // V (..., 1, m, dv); lambda one (shape (1)) or one per head (axis -4: shape (h, 1, 1, 1))
    std::vector<double> lambda{};
    // a bias added after the Scale (and the ALiBi bias), before the cap and the Mask, as
    // FlexAttention's score_mods: "tensor" a (h, n, m) parameter (broadcast over axis 0);
    // "gather" T5's relative positions, Gather(table (h, n + m - 1), i - j + m - 1) along the
    // table's last axis (every other index written negative, counted from the table's end); "mul" attention-gym's
    // ALiBi, Mul(slopes (h, 1, 1), j - i (n, m))
    std::string bias{};
    bool additive = false;  // the keep tensor as an additive mask: 0 where kept, -inf where dropped
    // values written into Q's, K's or V's random data: {name, flat index, value} (NaN, ±inf)
    struct Poke {
        std::string input;
        std::size_t at = 0;
        double value = 0;
    };
    std::vector<Poke> pokes{};
};

// the added bias's operands, as masked_graph makes them (f64)
struct BiasOperands {
    Tensor first, second;  // the tensor, the table or the slopes; the Gather's indices or j - i
};

inline BiasOperands bias_operands(const MaskCase& mc) {
    const std::size_t h = mc.c.q.end()[-3], n = mc.c.q.end()[-2], m = mc.c.k.end()[-2];
    BiasOperands o;
    if (mc.bias == "tensor") o.first = graphs::random_tensor({h, n, m}, DType::f64, 7, 0.5);
    if (mc.bias == "gather") o.first = graphs::random_tensor({h, n + m - 1}, DType::f64, 8, 0.5);
    if (mc.bias == "mul") {
        o.first = zeros(DType::f64, {h, 1, 1});
        for (std::size_t k = 0; k < h; ++k) o.first.as<double>().data()[k] = 0.25 / static_cast<double>(k + 1);
    }
    if (mc.bias == "gather" || mc.bias == "mul") {
        o.second = zeros(DType::f64, {n, m});
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j)
                o.second.as<double>().data()[i * m + j] =
                    mc.bias == "mul"   ? static_cast<double>(j) - static_cast<double>(i)
                    : (i + j) % 2 == 0 ? static_cast<double>(i + m - 1 - j)
                                       : static_cast<double>(i + m - 1 - j) - static_cast<double>(n + m - 1);
    }
    return o;
}

// the tensor's keep value at (i, j) of its last two axes: about 7 keys in 10, and none for
// query row 3 (a fully masked row) when the tensor has query rows; with an axis -3 (the
// Differential Transformer's maps), its matrix 1 keeps no key past 3/5 of the row (the two
// maps' key spans differ)
inline bool keep_value(const Shape& keep, std::size_t lead, std::size_t i, std::size_t j) {
    if (keep.end()[-2] > 1 && i == 3) return false;
    if (lead == 1 && j * 5 >= keep.back() * 3) return false;
    return (i * 7 + j * 13) % 10 < 7;
}

// the index along the keep tensor's axis -3 of element e, or of Q's matrix b (0: no such axis)
inline std::size_t keep_lead(const Shape& keep, std::size_t matrix) {
    return keep.size() >= 3 && keep.end()[-3] > 1 ? matrix % keep.end()[-3] : 0;
}

inline Tensor keep_tensor(const Shape& shape, DType dtype) {
    Tensor t = zeros(DType::f64, shape);
    const std::size_t rows = shape.end()[-2], cols = shape.back();
    for (std::size_t e = 0; e < t.size(); ++e)
        if (keep_value(shape, keep_lead(shape, e / (rows * cols)), rows > 1 ? (e / cols) % rows : 0, e % cols))
            t.as<double>().data()[e] = 1.0;
    return t.cast(dtype);
}

inline Graph masked_graph(const MaskCase& mc, DType dtype) {
    const Case& c = mc.c;
    GraphBuilder g("masked_attention", dtype);
    Tensor qt = graphs::random_tensor(c.q, dtype, 1, 2.0), kt = graphs::random_tensor(c.k, dtype, 2, 2.0),
           vt = graphs::random_tensor(c.v, dtype, 3);
    for (const MaskCase::Poke& p : mc.pokes) {
        Tensor& t = p.input == "Q" ? qt : p.input == "K" ? kt : vt;
        if (dtype == DType::f64)
            t.as<double>().data()[p.at] = p.value;
        else
            t.as<float>().data()[p.at] = static_cast<float>(p.value);
    }
    Value q = g.input("Q", qt), k = g.input("K", kt), v = g.input("V", vt);
    const Value s_raw = matmul(q, transpose(k)).named("S_raw");
    Value s = scale(s_raw, factor_of(c)).named("S");
    if (!mc.alibi.empty()) {
        Tensor slopes = zeros(DType::f64, {mc.alibi.size()});
        for (std::size_t h = 0; h < mc.alibi.size(); ++h) slopes.as<double>()(h) = mc.alibi[h];
        s = alibi(s, g.param("alibi_slopes", slopes.cast(dtype)), mc.alibi_offset).named("S_alibi");
    }
    if (!mc.bias.empty()) {
        const BiasOperands o = bias_operands(mc);
        Value bias;
        if (mc.bias == "tensor") bias = g.param("bias", o.first.cast(dtype));
        if (mc.bias == "gather")
            bias = gather(g.param("rel_table", o.first.cast(dtype)), g.input("rel_index", o.second.cast(dtype)), -1);
        if (mc.bias == "mul")
            bias = mul(g.param("bias_slopes", o.first.cast(dtype)), g.input("distance", o.second.cast(dtype)));
        if (mc.bias != "tensor") bias = bias.named("bias_value");
        s = add(s, bias).named("S_bias");
    }
    if (mc.softcap > 0)  // as graphs/flex_mods.hpp's softcap
        s = scale(tanh(scale(s, 1.0 / mc.softcap).named("S_div")).named("S_tanh"), mc.softcap).named("S_capped");
    if (!mc.keep.empty()) {
        Tensor t = keep_tensor(mc.keep, DType::f64);
        if (mc.additive)
            for (double& x : t.as<double>()) x = x != 0.0 ? 0.0 : -INFINITY;
        Value keep = g.input("keep", t.cast(dtype));
        s = mask_tensor(s, keep, mc.additive, mc.pattern == "causal", mc.from_end ? causal_from_end : mc.offset);
    } else if (mc.pattern == "causal") {
        s = mask_causal(s, mc.from_end ? causal_from_end : mc.offset);
    } else if (mc.pattern == "window") {
        s = mask_window(s, mc.window, mc.window_causal);
    } else {
        s = mask_padding(s, mc.lengths);
    }
    s = s.named("S_masked");
    if (mc.after != 1.0) s = scale(s, mc.after).named("S_after");
    Value a;
    if (!mc.sinks.empty()) {  // as graphs/variants.cpp builds it
        Tensor logits = zeros(DType::f64, {mc.sinks.size()});
        for (std::size_t h = 0; h < mc.sinks.size(); ++h) logits.as<double>()(h) = mc.sinks[h];
        Value heads = reshape(g.param("sinks", logits.cast(dtype)), {-1, 1, 1}).named("sinks_heads");
        Value first = slice(s_raw, -1, 0, 1).named("S_first");
        Value column = add(scale(first, 0.0).named("zero_column"), heads).named("S_sink");
        Value a_sinks = softmax(concat({s, column}, -1).named("S_sinks")).named("A_sinks");
        a = slice(a_sinks, -1, 0, -1).named("A");
    } else {
        a = softmax(s).named("A");
    }
    if (!mc.lambda.empty()) {  // as graphs/variants.cpp builds it
        const Shape shape = mc.lambda.size() == 1 ? Shape{1} : Shape{mc.lambda.size(), 1, 1, 1};
        Tensor lambda = zeros(DType::f64, shape);
        for (std::size_t h = 0; h < mc.lambda.size(); ++h) lambda.as<double>().data()[h] = mc.lambda[h];
        const std::vector<Value> maps = split(a, 2, -3, "A_split");
        a = sub(maps[0], mul(maps[1], g.param("lambda", lambda.cast(dtype))).named("A_2_weighted")).named("A_diff");
    }
    g.output(matmul(a, v).named("Y"));
    return g.build();
}

inline Keep keep_of(const MaskCase& mc) {
    const std::size_t n = mc.c.q.end()[-2], m = mc.c.k.end()[-2];
    const std::size_t batches = element_count(Shape(mc.c.q.begin(), mc.c.q.end() - 2));
    return [=](std::size_t b, std::size_t i, std::size_t j) {
        const long p = static_cast<long>(i) + (mc.from_end ? static_cast<long>(m) - static_cast<long>(n) : mc.offset);
        const long jj = static_cast<long>(j);
        if (!mc.keep.empty() && !keep_value(mc.keep, keep_lead(mc.keep, b), mc.keep.end()[-2] > 1 ? i : 0, j))
            return false;
        if (mc.pattern == "causal") return jj <= p;
        if (mc.pattern == "window")
            return mc.window_causal ? (p - jj >= 0 && p - jj < mc.window) : std::abs(p - jj) < mc.window;
        if (mc.pattern == "padding") return jj < mc.lengths[b / (batches / mc.c.q[0])];
        return true;
    };
}

// the gradients every masked case is checked on: Q, K, V, and the ALiBi slopes and the sink
// logits when there are
inline std::vector<std::string> grad_names(const MaskCase& mc) {
    std::vector<std::string> names{"Q", "K", "V"};
    if (!mc.alibi.empty()) names.emplace_back("alibi_slopes");
    if (!mc.sinks.empty()) names.emplace_back("sinks");
    if (!mc.lambda.empty()) names.emplace_back("lambda");
    if (mc.bias == "tensor") names.emplace_back("bias");
    if (mc.bias == "gather") names.emplace_back("rel_table");
    if (mc.bias == "mul") names.insert(names.end(), {"bias_slopes", "distance"});
    if (mc.additive) names.emplace_back("keep");
    return names;
}

// the plain loop's view of the added bias, from the graph's own operands (cast to f64)
inline AddedBias added_of(const MaskCase& mc, const Graph& g) {
    AddedBias ab;
    if (mc.additive) {  // the mask adds 0 where it keeps a key; its gradient there is dz
        const Shape k = mc.keep;
        const std::size_t rows = k.end()[-2], cols = k.back();
        ab.value = [](std::size_t, std::size_t, std::size_t) { return 0.0; };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[(keep_lead(k, b) * rows + (rows > 1 ? i : 0)) * cols + j] += dz;
        };
        ab.sizes[0] = element_count(k);
        return ab;
    }
    if (mc.bias.empty()) return ab;
    const std::size_t h = mc.c.q.end()[-3], n = mc.c.q.end()[-2], m = mc.c.k.end()[-2], len = n + m - 1;
    auto data = [&](const std::string& name) {
        return std::make_shared<Tensor>(g.values()[static_cast<std::size_t>(g.at(name))].data->cast(DType::f64));
    };
    if (mc.bias == "tensor") {
        const auto t = data("bias");
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) { return t->at_flat(((b % h) * n + i) * m + j); };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[((b % h) * n + i) * m + j] += dz;
        };
        ab.sizes[0] = h * n * m;
    } else if (mc.bias == "gather") {
        const auto t = data("rel_table");
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) {
            return t->at_flat((b % h) * len + i + m - 1 - j);
        };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[(b % h) * len + i + m - 1 - j] += dz;
        };
        ab.sizes[0] = h * len;
    } else {
        const auto slopes = data("bias_slopes");
        auto dist = [](std::size_t i, std::size_t j) { return static_cast<double>(j) - static_cast<double>(i); };
        ab.value = [=](std::size_t b, std::size_t i, std::size_t j) { return slopes->at_flat(b % h) * dist(i, j); };
        ab.grad = [=](std::size_t b, std::size_t i, std::size_t j, double dz, Reference& r) {
            r.dbias[b % h] += dz * dist(i, j);
            r.dmultiplier[i * m + j] += dz * slopes->at_flat(b % h);
        };
        ab.sizes[0] = h;
        ab.sizes[1] = n * m;
    }
    return ab;
}

}  // namespace attngraph::test::attention_backward
