#include "engine/safetensors.hpp"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "engine/half.hpp"

namespace attngraph {

namespace fs = std::filesystem;
namespace {
using nlohmann::json;  // not in attngraph itself: -Wshadow would flag TraceFormat::json in a unity build
}  // namespace

static std::size_t dtype_size(const std::string& dtype) {
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
    return 0;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : m_path(path) {
    const std::string where = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(where + ": cannot open");
    std::error_code ec;
    const std::uint64_t size = fs::file_size(path, ec);
    if (ec) throw IoError(where + ": cannot read its size");
    unsigned char len_bytes[8];
    if (size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8))
        throw IoError(where + ": truncated: shorter than the 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    if (n > size - 8)
        throw IoError(where + ": truncated: the header is " + std::to_string(n) + " bytes but the file has " +
                      std::to_string(size - 8) + " after the length");
    if (n > (std::uint64_t(100) << 20))
        throw IoError(where + ": header of " + std::to_string(n) + " bytes (over 100 MB)");
    std::string text(n, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw IoError(where + ": cannot read the header");
    m_data_start = 8 + n;
    const std::uint64_t data_size = size - m_data_start;
    json header;
    try {
        header = json::parse(text);
    } catch (const json::exception& e) {
        std::string msg = e.what();
        if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
        throw IoError(where + ": malformed header: " + msg);
    }
    if (!header.is_object()) throw IoError(where + ": malformed header: not a JSON object");
    for (const auto& [key, spec] : header.items()) {
        if (key == "__metadata__") continue;
        const std::string at = where + ": key '" + key + "'";
        if (!spec.is_object() || !spec.contains("dtype") || !spec["dtype"].is_string() || !spec.contains("shape") ||
            !spec["shape"].is_array() || !spec.contains("data_offsets") || !spec["data_offsets"].is_array() ||
            spec["data_offsets"].size() != 2)
            throw IoError(at + ": malformed header entry (needs dtype, shape and data_offsets [begin, end])");
        SafetensorsEntry e;
        e.key = key;
        e.dtype = spec["dtype"].get<std::string>();
        std::uint64_t count = 1;
        for (const auto& d : spec["shape"]) {
            if (!d.is_number_unsigned()) throw IoError(at + ": malformed shape " + spec["shape"].dump());
            const std::uint64_t v = d.get<std::uint64_t>();
            if (v && count > (std::uint64_t(1) << 62) / v)
                throw IoError(at + ": shape " + spec["shape"].dump() + " too large");
            count *= v;
            e.shape.push_back(static_cast<std::size_t>(v));
        }
        const json& off = spec["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            throw IoError(at + ": malformed data_offsets " + off.dump());
        e.begin = off[0].get<std::uint64_t>();
        e.end = off[1].get<std::uint64_t>();
        if (e.end < e.begin) throw IoError(at + ": data_offsets " + off.dump() + " end before they begin");
        if (e.end > data_size)
            throw IoError(at + ": truncated: its data ends at byte " + std::to_string(e.end) +
                          " of the data section, which has " + std::to_string(data_size));
        const std::size_t word = dtype_size(e.dtype);
        if (word && e.end - e.begin != count * word)
            throw IoError(at + ": " + e.dtype + " " + shape_str(e.shape) + " needs " + std::to_string(count * word) +
                          " bytes, data_offsets give " + std::to_string(e.end - e.begin));
        m_entries.push_back(std::move(e));
    }
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& key) const {
    for (const auto& e : m_entries)
        if (e.key == key) return &e;
    return nullptr;
}

Tensor SafetensorsFile::load(const std::string& key, DType dtype, bool transpose, std::size_t max_elements) const {
    const std::string at = m_path.string() + ": key '" + key + "'";
    const SafetensorsEntry* e = find(key);
    if (!e) {
        std::string keys;
        std::size_t shown = 0;
        for (const auto& x : m_entries) {
            if (shown++ == 8) {
                keys += ", ...";
                break;
            }
            keys += (keys.empty() ? "" : ", ") + x.key;
        }
        throw IoError(m_path.string() + ": no tensor '" + key + "' (it has " + std::to_string(m_entries.size()) +
                      (m_entries.empty() ? " tensors)" : ": " + keys + ")"));
    }
    if (e->dtype != "F32" && e->dtype != "F16" && e->dtype != "BF16")
        throw IoError(at + ": dtype " + e->dtype + " is not supported (F32, F16 or BF16)");
    const std::size_t count = element_count_capped(e->shape);
    if (count > max_elements)
        throw IoError(at + ": " + shape_str(e->shape) + " has more than the " + std::to_string(max_elements) +
                      " elements allowed");
    if (transpose && e->shape.size() != 2)
        throw IoError(at + ": \"transpose\" needs a 2-D tensor, this one is " + std::to_string(e->shape.size()) +
                      "-D (" + shape_str(e->shape) + ")");
    std::ifstream in(m_path, std::ios::binary);
    std::string raw(e->end - e->begin, '\0');
    in.seekg(static_cast<std::streamoff>(m_data_start + e->begin));
    if (!in || !in.read(raw.data(), static_cast<std::streamsize>(raw.size()))) throw IoError(at + ": truncated data");
    Array<float> a = Array<float>::from_shape(e->shape);
    const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());
    for (std::size_t i = 0; i < count; ++i) {
        if (e->dtype == "F32") {
            std::uint32_t bits = 0;
            for (int k = 3; k >= 0; --k) bits = (bits << 8) | bytes[i * 4 + static_cast<std::size_t>(k)];
            std::memcpy(&a.data()[i], &bits, 4);
        } else {
            const std::uint16_t bits = static_cast<std::uint16_t>(bytes[i * 2] | (bytes[i * 2 + 1] << 8));
            a.data()[i] = e->dtype == "F16" ? half_to_float(bits) : bfloat16_to_float(bits);
        }
    }
    if (transpose) {
        const std::size_t r = e->shape[0], c = e->shape[1];
        Array<float> t = Array<float>::from_shape({c, r});
        for (std::size_t i = 0; i < r; ++i)
            for (std::size_t j = 0; j < c; ++j) t.data()[j * r + i] = a.data()[i * c + j];
        a = std::move(t);
    }
    return Tensor(std::move(a)).cast(dtype);
}

}  // namespace attngraph
