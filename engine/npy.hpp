#pragma once
// .npy files through xtensor's reader and writer, with the checks xtensor leaves out: the
// header's shape must fit the file's size before anything is allocated, and only float32 /
// float64 little-endian C-order data is accepted.
#include <filesystem>
#include <istream>
#include <string>

#include "engine/tensor.hpp"

namespace attngraph {

/// @brief Reads a float32/float64 .npy file; throws IoError naming the file on any defect.
/// `max_elements` refuses larger arrays before allocating.
Tensor load_npy(const std::filesystem::path& path, std::size_t max_elements = std::size_t(1) << 32);

/// @brief Reads a .npy image from a stream positioned at its start (through its end);
/// `where` names the source in errors. Same checks as the file version.
Tensor load_npy(std::istream& in, const std::string& where, std::size_t max_elements = std::size_t(1) << 32);

/// @brief Writes a tensor as .npy (numpy.load reads it); throws IoError.
void save_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace attngraph
