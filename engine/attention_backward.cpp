// The fused attention step's backward (engine/attention_kernel.hpp): FlashAttention-2's
// backward over the forward's own query blocks, so that the n×m weights need not be kept,
// and over the keys the blocks' masks leave them only.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "engine/attention_gemm.hpp"
#include "engine/attention_kernel.hpp"
#include "engine/finite.hpp"
#include "engine/gemm.hpp"
#include "engine/parallel.hpp"
#include "engine/softmax_kernel.hpp"
#include "ops/mul.hpp"
#include "ops/sub.hpp"

namespace attngraph {

namespace {

// For each matrix of a broadcast operand (K, V, a bias's), the query batches that read it, in order.
std::vector<std::vector<std::size_t>> readers_of(const std::vector<std::size_t>& matrix_of, std::size_t matrices) {
    std::vector<std::vector<std::size_t>> r(matrices);
    for (std::size_t b = 0; b < matrix_of.size(); ++b) r[matrix_of[b]].push_back(b);
    return r;
}

// Where each query batch adds its dK (or dV, or a bias operand's): its matrix itself for the first reader, its
// own part (zeroed) for every other; after the batches, add_parts sums them in reader order.
template <class T>
class SharedGrad {
public:
    SharedGrad(T* grad, const std::vector<std::size_t>& matrix_of, std::size_t matrices, std::size_t size)
        : m_grad(grad), m_size(size), m_readers(readers_of(matrix_of, matrices)), m_target(matrix_of.size(), nullptr) {
        if (!grad) return;
        std::size_t parts = 0;
        for (const auto& r : m_readers) parts += r.empty() ? 0 : r.size() - 1;
        m_parts.assign(parts * size, T(0));
        std::size_t next = 0;
        for (std::size_t j = 0; j < m_readers.size(); ++j)
            for (std::size_t i = 0; i < m_readers[j].size(); ++i)
                m_target[m_readers[j][i]] = i == 0 ? grad + j * size : m_parts.data() + (next++) * size;
    }

    T* target(std::size_t b) const { return m_target[b]; }

    void add_parts() {
        if (m_parts.empty()) return;
        parallel_chunks(m_readers.size(), 1, [&](std::size_t j0, std::size_t j1) {
            for (std::size_t j = j0; j < j1; ++j) {
                T* g = m_grad + j * m_size;
                for (std::size_t i = 1; i < m_readers[j].size(); ++i) {
                    const T* p = m_target[m_readers[j][i]];
                    for (std::size_t e = 0; e < m_size; ++e) g[e] += p[e];
                }
            }
        });
    }

private:
    T* m_grad;
    std::size_t m_size;
    std::vector<std::vector<std::size_t>> m_readers;
    std::vector<T*> m_target;
    std::vector<T> m_parts;
};

// A step of the backward holds at most step_values values of A (and as many of dS), and
// at most step_blocks of the forward's blocks: for m above 512 one block of 128 rows, whose
// A and dS (512 KiB each at m = 1024) stay in a core's L2 through the step's five products.
// The backward with steps of 256 and 512 rows took 2 % and 6 % longer on a Zen 4
// (docs/performance.md, "Target 5: dA on the score kernel, steps of one block").
constexpr std::size_t step_values = std::size_t{1} << 17, step_blocks = 4;

void add_into(float* to, const float* from, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) to[i] += from[i];
}
void add_into(double* to, const double* from, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) to[i] += from[i];
}

// Whether rows of values (row r at p + r·ld, columns [lo, hi)) hold a NaN, or with `inf`
// also an inf.
template <class T>
bool any_nan(const T* p, std::size_t rows, std::size_t ld, std::size_t lo, std::size_t hi, bool inf) {
    if (lo >= hi) return false;
    if (ld == hi - lo) return any_not_finite(p + lo, rows * ld, !inf);  // (one span: whole rows)
    for (std::size_t r = 0; r < rows; ++r)
        if (any_not_finite(p + r * ld + lo, hi - lo, !inf)) return true;
    return false;
}

// `to` += `from` on the columns [lo, hi) of `rows` rows of m values (a traced gradient: the
// keys outside stay as they are, 0 in a fresh gradient)
template <class T>
void add_span(T* to, const T* from, std::size_t rows, std::size_t m, std::size_t lo, std::size_t hi) {
    for (std::size_t r = 0; r < rows; ++r) add_into(to + r * m + lo, from + r * m + lo, hi - lo);
}

// in the forward pass this was, per query block: S_raw = Q_blk·Kᵀ, S = chain(S_raw),
// A = softmax(S), O_blk = A·V (with the Differential Transformer, O_blk = A_diff·V from the
// blocks of two query matrices, A_diff = A_1 − A_2·lambda); a step here takes up to
// step_blocks such blocks (the _blk operands below are the step's rows) and the keys [lo, hi)
// its rows may weigh
template <class T>
void backward_blocks(const AttentionOperands<T>& op, const T* a_kept, const T* d_o, const AttentionGrads<T>& g) {
    const std::size_t n = op.n, m = op.m, dk = op.dk, dv = op.dv;
    // the Differential Transformer: two maps (query matrices) per O matrix
    const bool diff = !op.lambda_of.empty();
    const std::size_t maps = diff ? 2 : 1, outputs = op.batches / maps;
    // query rows per step: whole forward blocks, as many as keep a step's A and dS within
    // step_values each (at most step_blocks); dV and dK then sum over that many rows a GEMM
    const std::size_t fit = m ? step_values / (gemm_row_block * m) : step_blocks;  // no keys: any
    const std::size_t step_rows = gemm_row_block * std::clamp<std::size_t>(fit, 1, step_blocks);
    const std::size_t steps = (n + step_rows - 1) / step_rows;
    std::vector<std::size_t> v_of(outputs);  // V's matrix per O matrix
    for (std::size_t u = 0; u < outputs; ++u) v_of[u] = op.vb[u * maps];
    SharedGrad<T> dk_of(g.dk, op.kb, op.k_batches, m * dk), dv_of(g.dv, v_of, op.v_batches, m * dv);
    // per chain link: its Add's bias's operands' gradients (empty: none wanted)
    std::vector<std::vector<SharedGrad<T>>> bias_of(op.chain.size());
    std::vector<const BiasGrad<T>*> bias_at(op.chain.size(), nullptr);
    for (const BiasGrad<T>& bg : op.biases) {
        bias_at[bg.link] = &bg;
        bias_of[bg.link].reserve(bg.operands.size());  // (targets point into the parts: no reallocation)
        for (const auto& o : bg.operands) bias_of[bg.link].emplace_back(o.grad, o.matrix_of, o.matrices, o.size);
    }
    using Kind = typename ChainLink<T>::Kind;
    const auto wanted = [](const std::vector<T*>& ps) {
        return std::ranges::any_of(ps, [](const T* p) { return p != nullptr; });
    };
    // (S_sinks' gradient shows dS before the chain, as a value of the chain does)
    const bool chain_traced = wanted(g.chain) || g.s_sinks, slopes_wanted = wanted(g.slopes);
    // a Tanh's backward reads its output, the sink column its weights: recomputed with A (also
    // when A was kept); the Differential Transformer's maps are always recomputed (O reads A_diff)
    const bool has_tanh =
        std::ranges::any_of(op.chain, [](const ChainLink<T>& link) { return link.kind == Kind::tanh; });
    const bool sinks = !op.sink_of.empty();
    const bool recompute = !a_kept || has_tanh || sinks || diff;
    const bool sink_traced = g.s_sink || g.s_zero || g.s_first;
    const bool full_da = g.da || g.a_sinks || g.a_diff || g.a_first || g.a_second || g.a_weighted;  // whole rows
    const bool biases_wanted = std::ranges::any_of(op.biases, [](const BiasGrad<T>& bg) {
        return std::ranges::any_of(bg.operands, [](const auto& o) { return o.grad != nullptr; });
    });
    const bool need_ds = g.dq || g.dk || g.ds_raw || full_da || chain_traced || slopes_wanted || g.sink ||
                         sink_traced || g.lambda || biases_wanted;
    // the chain's first Scale from the softmax's input back, applied in the softmax backward's
    // pass when only Masks and Reshapes come before it (they pass dS as it is; an Alibi's slopes read it)
    // and no value of the chain is asked for (the same roundings either way)
    const auto first_scale = std::find_if(op.chain.begin(), op.chain.end(),
                                          [](const ChainLink<T>& link) {
                                              return link.kind != Kind::mask && link.kind != Kind::reshape;
                                          });
    // (an additive Mask's tensor reads dS before the Scale: not then)
    const bool scale_now = first_scale != op.chain.end() && first_scale->kind == Kind::scale && !chain_traced &&
                           std::all_of(bias_at.begin(), bias_at.begin() + (first_scale - op.chain.begin()),
                                       [](const BiasGrad<T>* bg) { return bg == nullptr; });
    // an Alibi's slopes: each batch's sum of dy·|i + offset − j| (in double), into the slopes
    // after the tasks, in batch order
    const std::size_t links = op.chain.size();
    std::vector<double> slope_sums(slopes_wanted ? op.batches * links : 0, 0.0);
    // the sink logits': each batch's sum of dS_sink (in double), added after the tasks in batch order
    std::vector<double> sink_sums(g.sink ? op.batches : 0, 0.0);
    // lambda's: each O matrix's sum of dA_2_weighted ⊙ A_2 (in double), added after the tasks in order
    std::vector<double> lambda_sums(g.lambda ? outputs : 0, 0.0);
    const ops::MulAttrs mul{};
    const ops::SubAttrs sub{};
    // the steps that are not finite take every key (attention_backward's comment)
    const bool nonfinite_path = !diff && m > 0;
    // (a Tanh between S_raw and a Mask: its backward at a removed key, 0·(1 − y²), is NaN where
    // the plain Tanh's y is, which the step does not compute there; dS is left as the row gives
    // it, NaN on a NaN row's removed keys as y is for a NaN query)
    bool tanh_under_mask = false;
    for (std::size_t i = 0, masks = 0; i < op.chain.size(); ++i) {
        masks += op.chain[i].kind == Kind::mask ? 1 : 0;
        tanh_under_mask = tanh_under_mask || (masks > 0 && op.chain[i].kind == Kind::tanh);
    }
    // an O matrix per task: its steps add into its dV (and its maps' dK) in step order
    parallel_chunks(outputs, 1, [&](std::size_t u0, std::size_t u1) {
        const std::size_t rows_max = std::min(n, step_rows), block = rows_max * m;
        std::vector<T> a_block(recompute ? maps * block : 0), ds_block(need_ds ? maps * block : 0),
            da_rows(full_da ? block : 0), y_block(has_tanh ? maps * block : 0), sink_block(sinks ? maps * rows_max : 0),
            w_block(diff ? block : 0);
        // one map's backward from its dA (in `ds` on [lo, hi)) to dQ and dK: b is its query matrix
        std::vector<std::size_t> row_lo(nonfinite_path ? rows_max : 0), row_hi(row_lo.size());
        auto map_backward = [&](std::size_t b, std::size_t r0, std::size_t rows, std::size_t lo, std::size_t hi,
                                const T* a, T* ds, const T* y, T* sink_w, bool nonfinite) {
            if (nonfinite) op.row_keys(b, r0, rows, row_lo.data(), row_hi.data());
            const std::size_t width = hi - lo, at = (b * n + r0) * m;
            // A = softmax(S):  dS = A ⊙ (dA − rowsum(dA ⊙ A)), as the Softmax op's backward
            // (the row sum over [lo, hi) has the whole row's bits); then the chain back to
            // S_raw, as the Scale, Alibi and Mask ops' backwards (its first Scale maybe in
            // the same pass)
            for (std::size_t r = 0; r < rows; ++r) {
                const T* ar = a + r * m + lo;
                T* dr = ds + r * m + lo;
                const T dot = softmax_backward_dot(ar, dr, width);
                // the sink column: dS_sink = a_sink·(0 − rowsum), as the Softmax op's backward, in place
                if (sinks) sink_w[r] = sink_w[r] * (T(0) - dot);
                if (scale_now) {
                    const T c = first_scale->factor;
                    for (std::size_t j = 0; j < width; ++j) dr[j] = c * (ar[j] * (dr[j] - dot));
                } else {
                    for (std::size_t j = 0; j < width; ++j) dr[j] = ar[j] * (dr[j] - dot);
                }
            }
            if (sinks) {  // dS_sink into the sink logits' sum and the traced values
                double sum = 0;
                for (std::size_t r = 0; r < rows; ++r) {
                    const T d = sink_w[r];
                    sum += static_cast<double>(d);
                    const std::size_t row = b * n + r0 + r;
                    if (g.s_sinks) {
                        add_into(g.s_sinks + row * (m + 1) + lo, ds + r * m + lo, width);
                        g.s_sinks[row * (m + 1) + m] += d;
                    }
                    if (g.s_sink) g.s_sink[row] += d;
                    if (g.s_zero) g.s_zero[row] += d;
                    if (g.s_first) g.s_first[row] += T(0) * d;  // S_zero = 0·S_first
                }
                if (g.sink) sink_sums[b] += sum;
            }
            for (std::size_t i = 0; i < links; ++i) {
                const ChainLink<T>& link = op.chain[i];
                if (i < g.chain.size() && g.chain[i]) add_span(g.chain[i] + at, ds, rows, m, lo, hi);
                if (link.kind == Kind::reshape) continue;  // the same elements: dx = dy
                if (link.kind == Kind::mask && nonfinite && !tanh_under_mask)  // dx = dy where kept, 0 where masked
                    for (std::size_t r = 0; r < rows; ++r) {
                        T* dr = ds + r * m;
                        const std::size_t from = std::clamp(row_lo[r], lo, hi), to = std::clamp(row_hi[r], from, hi);
                        std::fill(dr + lo, dr + from, T(0));
                        std::fill(dr + to, dr + hi, T(0));
                    }
                // an Add (dx = dy) or an additive Mask (dx = dy where kept): the bias's or the
                // mask's operands get theirs
                if (const BiasGrad<T>* bg = bias_at[i]) {
                    std::array<T*, 3> to{};
                    std::array<std::size_t, 3> base{};
                    for (std::size_t k = 0; k < bg->operands.size() && k < to.size(); ++k) {
                        if (!bg->operands[k].grad) continue;
                        to[k] = bias_of[i][k].target(b);
                        base[k] = bg->operands[k].matrix_of[b] * bg->operands[k].size;
                    }
                    bg->add(b, r0, rows, lo, hi, ds, to.data(), base.data());
                }
                if (link.kind == Kind::add) continue;
                if (link.kind == Kind::alibi && i < g.slopes.size() && g.slopes[i]) {
                    double sum = 0;
                    for (std::size_t r = 0; r < rows; ++r) {
                        const long p = static_cast<long>(r0 + r) + link.offset;
                        const T* dr = ds + r * m;
                        for (std::size_t j = lo; j < hi; ++j)
                            sum += static_cast<double>(dr[j]) * static_cast<double>(std::abs(p - static_cast<long>(j)));
                    }
                    slope_sums[b * links + i] += sum;
                }
                if (link.kind == Kind::tanh) {  // dx = dy · (1 − y²), as the Tanh op's backward
                    for (std::size_t r = 0; r < rows; ++r) {
                        T* dr = ds + r * m + lo;
                        const T* yr = y + r * m + lo;
                        for (std::size_t j = 0; j < width; ++j) dr[j] = dr[j] * (T(1) - yr[j] * yr[j]);
                    }
                    continue;
                }
                if (link.kind != Kind::scale || (scale_now && &link == &*first_scale)) continue;
                const T c = link.factor;
                for (std::size_t r = 0; r < rows; ++r) {
                    T* dr = ds + r * m + lo;
                    for (std::size_t j = 0; j < width; ++j) dr[j] = c * dr[j];
                }
            }
            if (g.ds_raw) add_span(g.ds_raw + at, ds, rows, m, lo, hi);
            // S_raw = Q_blk·Kᵀ:  dQ_blk += dS_raw·K,  dK += dS_rawᵀ·Q_blk
            if (g.dq)
                gemm<T>(false, false, rows, dk, width, T(1), ds + lo, m, op.k + op.kb[b] * m * dk + lo * dk, dk, T(1),
                        g.dq + (b * n + r0) * dk, dk);
            if (T* dk_b = dk_of.target(b))
                gemm<T>(true, false, width, dk, rows, T(1), ds + lo, m, op.q + (b * n + r0) * dk, dk, T(1),
                        dk_b + lo * dk, dk);
        };
        // f32: dA = dO·Vᵀ on the forward's score kernel with V packed once per O matrix, as the
        // forward packs K (V read as keys; each element one fma chain over dv in order, whatever
        // the span: the same bits on [lo, hi) and on a traced row's other keys)
        const attention_gemm::Kernels* kernels = nullptr;
        if constexpr (std::is_same_v<T, float>)
            kernels = m >= attention_gemm::panel && dv ? attention_gemm::kernels() : nullptr;
        // (not zeroed first: pack_keys writes every element)
        const auto packed_v = std::make_unique_for_overwrite<float[]>(kernels ? attention_gemm::packed_size(m, dv) : 0);
        // dA's keys [from, to) for the step's rows (row r at out[r·m + j − from])
        auto da_product = [&](const T* do_blk, std::size_t rows, const T* v, std::size_t from, std::size_t to, T* out) {
            if (from >= to) return;
            if constexpr (std::is_same_v<T, float>)
                if (kernels) {
                    kernels->scores(do_blk, rows, dv, packed_v.get(), from, to, out, m);
                    return;
                }
            gemm<T>(false, true, rows, to - from, dv, T(1), do_blk, dv, v + from * dv, dv, T(0), out, m);
        };
        for (std::size_t u = u0; u < u1; ++u) {
            const T* v = op.v + v_of[u] * m * dv;
            if constexpr (std::is_same_v<T, float>)
                if (kernels && need_ds) attention_gemm::pack_keys(v, m, dv, packed_v.get());
            T* dv_u = dv_of.target(u);
            const T lambda = diff ? op.lambda[op.lambda_of[u]] : T(0);
            // A_diff = Sub(A_1, A_2_weighted), A_2_weighted = Mul(A_2, lambda): dA_2_weighted =
            // dA_diff·to_weighted (the Sub's −1), dA_2 = dA_2_weighted·to_second (the Mul's lambda)
            const T to_weighted = ops::Sub::partial_b(sub, T(0), T(0), T(0));
            const T to_second = ops::Mul::partial_a(mul, T(0), lambda, T(0));
            // V and K (dQ = dS_raw·K: the plain product multiplies them by the 0 of every removed key)
            const bool vk_bad = nonfinite_path && (any_nan(v, 1, 0, 0, m * dv, true) ||
                                                   any_nan(op.k + op.kb[u] * m * dk, 1, 0, 0, m * dk, true));
            for (std::size_t step = 0; step < steps; ++step) {
                const std::size_t r0 = step * step_rows, rows = std::min(step_rows, n - r0);
                const T* do_blk = d_o + (u * n + r0) * dv;
                // the step's keys: A is 0 outside [lo, hi), so dV, dS, dQ and dK get nothing
                // there; with two maps the union of theirs (every key for a lambda that is not
                // finite: 0·lambda is NaN there, as the forward has it)
                // (not a structured binding: the lambdas below capture lo and hi, which clang 14 refuses)
                const auto keys = op.keys(u * maps, r0, rows);
                std::size_t lo = keys.first, hi = keys.second;
                if (diff) {
                    const auto [lo2, hi2] = op.keys(u * maps + 1, r0, rows);
                    if (lo >= hi) lo = lo2, hi = hi2;
                    else if (lo2 < hi2) lo = std::min(lo, lo2), hi = std::max(hi, hi2);
                    if (!std::isfinite(lambda)) lo = 0, hi = m;
                }
                if (lo >= hi) lo = hi = 0;
                std::size_t width = hi - lo;
                auto a_of = [&](std::size_t i) {
                    return recompute ? a_block.data() + i * block : a_kept + ((u * maps + i) * n + r0) * m;
                };
                auto y_of = [&](std::size_t i) { return has_tanh ? y_block.data() + i * block : nullptr; };
                auto sink_of = [&](std::size_t i) { return sinks ? sink_block.data() + i * rows_max : nullptr; };
                auto recompute_weights = [&] {  // the forward's blocks, one by one
                    for (std::size_t i = 0; i < maps; ++i)
                        for (std::size_t f0 = 0; f0 < rows; f0 += gemm_row_block)
                            op.weights(u * maps + i, r0 + f0, std::min(gemm_row_block, rows - f0), lo, hi,
                                       a_block.data() + i * block + f0 * m, has_tanh ? y_of(i) + f0 * m : nullptr,
                                       sinks ? sink_of(i) + f0 : nullptr);
                };
                if (recompute && (width > 0 || sinks)) recompute_weights();  // (a fully masked row's sink)
                // A's seed, as a row per row (one row for every row: step 0)
                const T* seed = !g.a_seed ? nullptr : g.a_seed_one_row ? g.a_seed : g.a_seed + (u * n + r0) * m;
                const std::size_t seed_step = g.a_seed_one_row ? 0 : m;
                // not finite: every key, as the plain nodes (a NaN row of A is NaN on all of them)
                const bool nonfinite =
                    nonfinite_path && (vk_bad || any_nan(do_blk, rows, dv, 0, dv, true) ||
                                       any_nan(op.q + (u * n + r0) * dk, rows, dk, 0, dk, true) ||
                                       (width > 0 && any_nan(a_of(0), rows, m, lo, hi, false)) ||
                                       (sinks && any_nan(sink_of(0), 1, 0, 0, rows, false)) ||
                                       (seed && any_nan(seed, seed_step ? rows : 1, seed_step, 0, m, true)));
                if (nonfinite && width < m) {
                    lo = 0, hi = m, width = m;
                    if (recompute) recompute_weights();
                }
                // the weights O reads: A, or A_diff = Sub(A_1, Mul(A_2, lambda)) as the forward has it
                const T* w = a_of(0);
                if (diff && width > 0) {
                    const T* a1 = a_of(0);
                    const T* a2 = a_of(1);
                    for (std::size_t r = 0; r < rows; ++r)
                        for (std::size_t j = lo; j < hi; ++j)
                            w_block[r * m + j] =
                                ops::Sub::apply(sub, a1[r * m + j], ops::Mul::apply(mul, a2[r * m + j], lambda));
                    w = w_block.data();
                }
                // O_blk = W·V:  dV += Wᵀ·dO_blk (m, dv),  dW = dO_blk·Vᵀ (rows, m)
                if (dv_u && width > 0)
                    gemm<T>(true, false, width, dv, rows, T(1), w + lo, m, do_blk, dv, T(1), dv_u + lo * dv, dv);
                if (!need_ds) continue;
                T* ds = ds_block.data();  // dA (dA_diff), then dS, then dS_raw, in place on [lo, hi)
                da_product(do_blk, rows, v, lo, hi, ds + lo);
                if (seed && width > 0)
                    for (std::size_t r = 0; r < rows; ++r) add_into(ds + r * m + lo, seed + r * seed_step + lo, width);
                // traced: whole rows, the keys outside [lo, hi) by calls of their own (one GEMM call
                // over the row would cut its columns elsewhere and could change dS's bits)
                if (full_da) {
                    T* full = da_rows.data();
                    da_product(do_blk, rows, v, 0, lo, full);
                    da_product(do_blk, rows, v, hi, m, full + hi);
                    for (std::size_t r = 0; r < rows; ++r) {
                        std::copy(ds + r * m + lo, ds + r * m + hi, full + r * m + lo);
                        if (seed) {  // (on [lo, hi) ds has it)
                            add_into(full + r * m, seed + r * seed_step, lo);
                            add_into(full + r * m + hi, seed + r * seed_step + hi, m - hi);
                        }
                    }
                    const std::size_t at = (u * maps * n + r0) * m;  // the first map's rows in A
                    if (g.da) add_into(g.da + at, full, rows * m);
                    if (g.a_sinks)  // [dA | 0], rows of m + 1
                        for (std::size_t r = 0; r < rows; ++r)
                            add_into(g.a_sinks + (u * n + r0 + r) * (m + 1), full + r * m, m);
                    if (diff) {  // A_diff = Sub(A_split:0, A_2_weighted), A_2_weighted = Mul(A_split:1, lambda)
                        const std::size_t at_o = (u * n + r0) * m;
                        if (g.a_diff) add_into(g.a_diff + at_o, full, rows * m);
                        if (g.a_first) add_into(g.a_first + at_o, full, rows * m);
                        for (std::size_t e = 0; e < rows * m; ++e) {
                            const T dw = full[e] * to_weighted, d2 = dw * to_second;
                            if (g.a_weighted) g.a_weighted[at_o + e] += dw;
                            if (g.a_second) g.a_second[at_o + e] += d2;
                            if (g.da) g.da[at + n * m + e] += d2;
                        }
                    }
                }
                if (width == 0) continue;  // every row fully masked: dS = 0
                if (diff) {  // the second map's dA = dA_2_weighted·lambda, dA_2_weighted = −dA_diff
                    const T* a2 = a_of(1);
                    T* ds2 = ds + block;
                    double sum = 0;
                    for (std::size_t r = 0; r < rows; ++r)
                        for (std::size_t j = lo; j < hi; ++j) {
                            const T dw = ds[r * m + j] * to_weighted;
                            ds2[r * m + j] = dw * to_second;
                            sum += static_cast<double>(dw * ops::Mul::partial_b(mul, a2[r * m + j], lambda, T(0)));
                        }
                    if (g.lambda) lambda_sums[u] += sum;
                }
                for (std::size_t i = 0; i < maps; ++i)
                    map_backward(u * maps + i, r0, rows, lo, hi, a_of(i), ds + i * block, y_of(i), sink_of(i),
                                 nonfinite);
            }
        }
    });
    dk_of.add_parts();
    dv_of.add_parts();
    for (auto& shared : bias_of)
        for (SharedGrad<T>& sg : shared) sg.add_parts();
    for (std::size_t b = 0; b < sink_sums.size(); ++b) g.sink[op.sink_of[b]] += static_cast<T>(sink_sums[b]);
    for (std::size_t u = 0; u < lambda_sums.size(); ++u) g.lambda[op.lambda_of[u]] += static_cast<T>(lambda_sums[u]);
    for (std::size_t i = 0; i < links && slopes_wanted; ++i)
        if (i < g.slopes.size() && g.slopes[i])
            for (std::size_t b = 0; b < op.batches; ++b)
                g.slopes[i][b % op.chain[i].heads] -= static_cast<T>(slope_sums[b * links + i]);
}

}  // namespace

template <class T>
void attention_backward(const AttentionOperands<T>& op, const T* a, const T* d_o, const AttentionGrads<T>& grads) {
    backward_blocks<T>(op, a, d_o, grads);
}

template <class T>
AttentionOperands<T> attention_operands(const Array<T>& q, const Array<T>& k, const Array<T>& v, T factor,
                                        bool scaled) {
    const Shape qs(q.shape().begin(), q.shape().end()), ks(k.shape().begin(), k.shape().end()),
        vs(v.shape().begin(), v.shape().end());
    AttentionOperands<T> op;
    op.q = q.data();
    op.k = k.data();
    op.v = v.data();
    op.n = qs.end()[-2];
    op.dk = qs.back();
    op.m = ks.end()[-2];
    op.dv = vs.back();
    const Shape qb(qs.begin(), qs.end() - 2), kbs(ks.begin(), ks.end() - 2), vbs(vs.begin(), vs.end() - 2);
    op.batches = element_count(qb);
    op.k_batches = element_count(kbs);
    op.v_batches = element_count(vbs);
    // matrix of a broadcast operand for each batch of Q (numpy broadcasting of the batch axes)
    auto offsets = [&](const Shape& operand) {
        std::vector<std::size_t> strides(qb.size(), 0), out(op.batches);
        std::size_t stride = 1;
        for (std::size_t i = operand.size(); i-- > 0;) {
            strides[i + qb.size() - operand.size()] = operand[i] == 1 ? 0 : stride;
            stride *= operand[i];
        }
        for (std::size_t flat = 0; flat < op.batches; ++flat) {
            std::size_t rem = flat, off = 0;
            for (std::size_t i = qb.size(); i-- > 0;) {
                off += (rem % qb[i]) * strides[i];
                rem /= qb[i];
            }
            out[flat] = off;
        }
        return out;
    };
    op.kb = offsets(kbs);
    op.vb = offsets(vbs);
    if (scaled) op.chain.push_back({ChainLink<T>::Kind::scale, factor});
    op.keys = [m = op.m](std::size_t, std::size_t, std::size_t) { return std::pair<std::size_t, std::size_t>{0, m}; };
    op.row_keys = [m = op.m](std::size_t, std::size_t, std::size_t rows, std::size_t* lo, std::size_t* hi) {
        std::fill(lo, lo + rows, std::size_t{0});
        std::fill(hi, hi + rows, m);
    };
    // every key: whole rows, whatever [lo, hi) is asked for
    op.weights = [q = op.q, k = op.k, kb = op.kb, n = op.n, m = op.m, dk = op.dk, factor, scaled](
                     std::size_t b, std::size_t r0, std::size_t rows, std::size_t, std::size_t, T* a, T*, T*) {
        gemm<T>(false, true, rows, m, dk, T(1), q + (b * n + r0) * dk, dk, k + kb[b] * m * dk, dk, T(0), a, m);
        softmax_rows<T>(a, a, rows, m, factor, scaled);
    };
    return op;
}

template void attention_backward<float>(const AttentionOperands<float>&, const float*, const float*,
                                        const AttentionGrads<float>&);
template void attention_backward<double>(const AttentionOperands<double>&, const double*, const double*,
                                         const AttentionGrads<double>&);
template AttentionOperands<float> attention_operands<float>(const Array<float>&, const Array<float>&,
                                                            const Array<float>&, float, bool);
template AttentionOperands<double> attention_operands<double>(const Array<double>&, const Array<double>&,
                                                              const Array<double>&, double, bool);

}  // namespace attngraph
