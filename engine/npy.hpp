#pragma once
// .npy files: whatever numpy writes (bool, int8-int64, uint8-uint64, float16/32/64, either
// byte order, C or Fortran order, format versions 1-3), checked before anything is allocated
// (the header's shape must fit the file's size), written through xtensor's writer.
#include <filesystem>
#include <istream>
#include <optional>
#include <string>

#include "engine/tensor.hpp"

namespace attngraph {

/// @brief Reads a .npy file; throws IoError naming the file on any defect. `max_elements`
/// refuses larger arrays before allocating. Floats keep their width (float16 gives f32) unless
/// `convert_to` is given; integers and bool become `convert_to` (default f64), and an integer
/// that the target cannot hold exactly (beyond 2^24 for f32, 2^53 for f64) is an error.
Tensor load_npy(const std::filesystem::path& path, std::size_t max_elements = std::size_t(1) << 32,
                std::optional<DType> convert_to = std::nullopt);

/// @brief Reads a .npy image from a stream positioned at its start (through its end);
/// `where` names the source in errors. Same checks as the file version.
Tensor load_npy(std::istream& in, const std::string& where, std::size_t max_elements = std::size_t(1) << 32,
                std::optional<DType> convert_to = std::nullopt);

/// @brief Writes a tensor as .npy (numpy.load reads it); throws IoError.
void save_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace attngraph
