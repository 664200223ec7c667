#pragma once
// Multi-head self-attention, one branch per head, named as in the seed document:
//   head{i}.Q = X·Wq + bq,  head{i}.K = X·Wk + bk,  head{i}.V = X·Wv + bv,
//   head{i}.KT = K^T,  head{i}.S_raw = Q·KT,  head{i}.S = S_raw / sqrt(d_k),
//   head{i}.A = softmax(S),  head{i}.O = A·V,  O_concat = [O_1 | ... | O_h],  Y = O_concat·Wo + bo.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph.hpp"

namespace attngraph::graphs {

struct MhaConfig {
    std::size_t seq = 3;       ///< n, tokens
    std::size_t d_model = 4;
    std::size_t heads = 2;     ///< h; d_k = d_v = d_model / h
    std::size_t batch = 0;     ///< 0: X is (n, d_model); B > 0: X is (B, n, d_model)
    DType dtype = DType::f32;
    std::uint64_t seed = 1;
    std::vector<std::string> tokens;
    std::string name = "mha";
};

/// @brief The weights of a per-head multi-head attention graph, named as in the graph.
struct MhaWeights {
    Tensor x;                                  ///< X (n, d_model) or (B, n, d_model)
    std::vector<Tensor> wq, bq, wk, bk, wv, bv;  ///< per head: W (d_model, d_k), b (1, d_k)
    Tensor wo, bo;                             ///< (d_model, d_model), (1, d_model)
};

/// Seeded uniform(-1, 1) values (the same on every platform): X, and weights scaled by
/// 1/sqrt(d_model).
MhaWeights random_mha_weights(const MhaConfig& config);

/// The seed document's weights (n=3, d_model=4, 2 heads), as printed to 6 decimals.
MhaWeights seed_mha_weights();
/// The seed document's configuration: tokens 外送 晚到 補償.
MhaConfig seed_mha_config();

/// @brief Builds the graph; throws GraphError/ShapeError on inconsistent sizes.
Graph build_mha(const MhaConfig& config, const MhaWeights& weights);
inline Graph build_mha(const MhaConfig& config) { return build_mha(config, random_mha_weights(config)); }

/// A tensor of seeded uniform(-scale, scale) values, identical on every platform. Under a
/// TensorBudget of this thread, one that would take the budget's tensors past its limit is a
/// ShapeError before anything is allocated.
Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, double scale = 1.0);

/// @brief While alive, random_tensor() on this thread makes at most `max_bytes` of tensors
/// in all, so that a variant asked for at sizes the machine cannot hold (attngraph new
/// --d-model 1000000) is refused with the shape that does not fit, not killed by the system
/// or ended by std::bad_alloc part-way. Budgets nest: the innermost one counts.
class TensorBudget {
public:
    /// `limit` ends the error: "over LIMIT" (default "the memory limit of MAX bytes")
    explicit TensorBudget(std::size_t max_bytes, std::string limit = {});
    ~TensorBudget();
    TensorBudget(const TensorBudget&) = delete;
    TensorBudget& operator=(const TensorBudget&) = delete;

private:
    friend Tensor random_tensor(const Shape&, DType, std::uint64_t, double);
    std::size_t m_max, m_used = 0;
    std::string m_limit;
    TensorBudget* m_outer;
};

}  // namespace attngraph::graphs
