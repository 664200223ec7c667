#pragma once
// Safetensors files (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// {"key": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": ...},
// then the raw little-endian data, offsets relative to its start. F32, F16 and BF16 tensors
// are read, converted to the graph's dtype.
#include <filesystem>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace attngraph {

/// @brief One tensor as a safetensors header describes it.
struct SafetensorsEntry {
    std::string key;
    std::string dtype;  ///< "F32", "F16", "BF16", ...
    Shape shape;
    std::uint64_t begin = 0, end = 0;  ///< byte offsets into the data section
};

/// @brief A safetensors file's header, checked against the file's size: every entry's data
/// lies inside the file and has the size its dtype and shape give. Throws IoError naming
/// the file (and the key) on any defect.
class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::filesystem::path& path);

    const std::filesystem::path& path() const { return m_path; }
    const std::vector<SafetensorsEntry>& entries() const { return m_entries; }
    const SafetensorsEntry* find(const std::string& key) const;

    /// Tensor `key` in `dtype`; with `transpose`, a 2-D tensor's axes swapped (Hugging Face
    /// stores Linear weights as (out, in)). Refuses more than max_elements before reading.
    Tensor load(const std::string& key, DType dtype, bool transpose = false,
                std::size_t max_elements = std::size_t(1) << 32) const;

private:
    std::filesystem::path m_path;
    std::uint64_t m_data_start = 0;
    std::vector<SafetensorsEntry> m_entries;
};


}  // namespace attngraph
