#pragma once
// Summary statistics of a tensor, as the trace manifest records them per value.
#include <cstddef>

#include <nlohmann/json.hpp>

#include "engine/tensor.hpp"

namespace attngraph {

/// @brief min, max, mean and sum over the finite elements, and how many are not finite.
struct TensorStats {
    std::size_t count = 0;      ///< elements
    std::size_t nonfinite = 0;  ///< NaN or ±Inf elements
    std::size_t nan = 0;
    double min = 0, max = 0, mean = 0, sum = 0;  ///< over finite elements; 0 when there are none
};

TensorStats tensor_stats(const Tensor& tensor);

/// {"min", "max", "mean", "sum", "nonfinite", "nan", "count"}; min/max/mean are null when
/// no element is finite.
nlohmann::json stats_json(const TensorStats& stats);

/// "min -1.41421 max 0 mean -0.3 (2 non-finite: 1 NaN)".
std::string stats_text(const TensorStats& stats);

}  // namespace attngraph
