#include "engine/npy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include <xtensor/xnpy.hpp>

#include "engine/error.hpp"
#include "engine/half.hpp"

namespace attngraph {

namespace {

std::string header_of(std::istream& in, const std::string& where) {
    char magic[6];
    in.read(magic, 6);
    if (!in || std::string(magic, 6) != "\x93NUMPY") throw IoError(where + ": not a .npy file (bad magic)");
    unsigned char version[2];
    in.read(reinterpret_cast<char*>(version), 2);
    if (!in) throw IoError(where + ": truncated header");
    std::size_t len = 0;
    if (version[0] == 1) {
        unsigned char b[2];
        in.read(reinterpret_cast<char*>(b), 2);
        len = b[0] | (std::size_t(b[1]) << 8);
    } else if (version[0] == 2 || version[0] == 3) {
        unsigned char b[4];
        in.read(reinterpret_cast<char*>(b), 4);
        len = b[0] | (std::size_t(b[1]) << 8) | (std::size_t(b[2]) << 16) | (std::size_t(b[3]) << 24);
    } else {
        throw IoError(where + ": unsupported .npy version " + std::to_string(version[0]));
    }
    if (!in || len == 0 || len > 65536) throw IoError(where + ": bad header length");
    std::string header(len, '\0');
    in.read(header.data(), static_cast<std::streamsize>(len));
    if (!in) throw IoError(where + ": truncated header");
    return header;
}

// xtensor's header parser reads s.back() of its pieces without checking they are empty:
// refuse a header without a '{...}' dictionary or with an empty or malformed shape tuple
// before it gets there (and a size it would silently read as 0, like "(abc,)").
void check_header_text(const std::string& header, const std::string& where) {
    // a control byte (a NUL in 'descr') would also cut this error's own line short
    for (std::size_t i = 0; i + 1 < header.size(); ++i) {
        const auto c = static_cast<unsigned char>(header[i]);
        if (c < 0x20 || c == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", c);
            throw IoError(where + ": bad header (control byte " + hex + " at offset " + std::to_string(i) + ")");
        }
    }
    std::string h;
    for (char c : header)
        if (c != ' ') h += c;
    if (h.empty() || h.back() != '\n') throw IoError(where + ": bad header (no terminating newline)");
    h.pop_back();
    if (h.size() < 2 || h.front() != '{' || h.back() != '}') throw IoError(where + ": bad header (not a dictionary)");
    const auto key = h.find("'shape':");
    if (key == std::string::npos) throw IoError(where + ": bad header (missing 'shape' key)");
    const auto open = key + 8, close = h.find(')', open);
    if (open >= h.size() || h[open] != '(' || close == std::string::npos)
        throw IoError(where + ": bad header (shape is not a tuple)");
    const std::string dims = h.substr(open + 1, close - open - 1);
    if (dims.find_first_not_of("0123456789,") != std::string::npos || dims.find(",,") != std::string::npos ||
        (!dims.empty() && dims.front() == ','))
        throw IoError(where + ": bad header (shape (" + dims + ") is not a tuple of sizes)");
    for (std::size_t pos = 0; pos < dims.size();) {
        const auto comma = std::min(dims.find(',', pos), dims.size());
        if (comma - pos > 19)
            throw IoError(where + ": bad header (size " + dims.substr(pos, comma - pos) + " is too large)");
        pos = comma + 1;
    }
}

// ---- element types ----------------------------------------------------------------------

struct ElementType {
    char kind = 'f';  // 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    std::size_t bytes = 4;
    bool big_endian = false;
};

ElementType element_type_of(const std::string& descr, const std::string& where) {
    const auto refuse = [&] {
        return IoError(where + ": dtype '" + descr +
                       "' is not supported (bool, int8-int64, uint8-uint64, float16/32/64; little- or big-endian)");
    };
    if (descr.size() < 3 || descr.size() > 4) throw refuse();
    ElementType t;
    const char order = descr[0];
    if (order == '>')
        t.big_endian = true;
    else if (order != '<' && order != '|' && order != '=')
        throw refuse();
    t.kind = descr[1];
    const std::string size = descr.substr(2);
    if (size != "1" && size != "2" && size != "4" && size != "8") throw refuse();
    t.bytes = static_cast<std::size_t>(size[0] - '0');
    const bool ok =
        (t.kind == 'b' && t.bytes == 1) || t.kind == 'i' || t.kind == 'u' || (t.kind == 'f' && t.bytes >= 2);
    if (!ok) throw refuse();
    return t;
}

// The value of the header's 'descr' key ("" when there is none).
std::string descr_of(const std::string& header) {
    const auto key = header.find("'descr'");
    if (key == std::string::npos) return "";
    const auto open = header.find('\'', header.find(':', key));
    if (open == std::string::npos) return "";
    const auto close = header.find('\'', open + 1);
    return close == std::string::npos ? "" : header.substr(open + 1, close - open - 1);
}

std::uint64_t raw_bits(const unsigned char* p, const ElementType& t) {
    std::uint64_t bits = 0;
    for (std::size_t b = 0; b < t.bytes; ++b) {
        const std::size_t k = t.big_endian ? t.bytes - 1 - b : b;  // byte k holds bits 8k..8k+7
        bits |= std::uint64_t(p[b]) << (8 * k);
    }
    return bits;
}

std::int64_t signed_of(std::uint64_t bits, std::size_t bytes) {
    if (bytes == 8) return static_cast<std::int64_t>(bits);
    const std::uint64_t sign = std::uint64_t(1) << (8 * bytes - 1);
    return static_cast<std::int64_t>(bits ^ sign) - static_cast<std::int64_t>(sign);
}

double decode(const unsigned char* p, const ElementType& t) {
    const std::uint64_t bits = raw_bits(p, t);
    switch (t.kind) {
        case 'b':
            return bits != 0 ? 1.0 : 0.0;
        case 'u':
            return static_cast<double>(bits);
        case 'i':
            return static_cast<double>(signed_of(bits, t.bytes));
        default:
            if (t.bytes == 2) return half_to_float(static_cast<std::uint16_t>(bits));
            if (t.bytes == 4) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
            return std::bit_cast<double>(bits);
    }
}

std::uint64_t integer_magnitude(const unsigned char* p, const ElementType& t) {
    const std::uint64_t bits = raw_bits(p, t);
    if (t.kind == 'u') return bits;
    const std::int64_t v = signed_of(bits, t.bytes);
    return v < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
}

std::string integer_text(const unsigned char* p, const ElementType& t) {
    const std::uint64_t bits = raw_bits(p, t);
    return t.kind == 'u' ? std::to_string(bits) : std::to_string(signed_of(bits, t.bytes));
}

}  // namespace

Tensor load_npy(const std::filesystem::path& path, std::size_t max_elements, std::optional<DType> convert_to) {
    const std::string where = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(where + ": cannot open");
    return load_npy(in, where, max_elements, convert_to);
}

Tensor load_npy(std::istream& in, const std::string& where, std::size_t max_elements, std::optional<DType> convert_to) {
    const std::string header = header_of(in, where);
    check_header_text(header, where);
    const auto data_start = in.tellg();
    in.seekg(0, std::ios::end);
    const auto end = in.tellg();
    if (data_start < 0 || end < data_start) throw IoError(where + ": cannot determine the file size");
    const std::size_t data_bytes = static_cast<std::size_t>(end - data_start);

    // the dtype first: xtensor's parser refuses strings and others with a vaguer message
    std::string descr = descr_of(header);
    const ElementType type = element_type_of(descr, where);
    bool fortran = false;
    std::vector<std::size_t> shape;
    try {
        xt::detail::parse_header(header, descr, &fortran, shape);
    } catch (const std::exception& e) {
        throw IoError(where + ": bad header (" + e.what() + ")");
    }
    const std::size_t word = type.bytes;
    const std::size_t count = element_count_capped(shape);
    if (count > max_elements)
        throw IoError(where + ": shape (" + shape_str(shape) + ") is larger than the limit of " +
                      std::to_string(max_elements) + " elements (--max-memory)");
    if (count > data_bytes / word || count * word != data_bytes)
        throw IoError(where + ": header says shape (" + shape_str(shape) + ") " + descr + " = " +
                      (count > SIZE_MAX / word ? "too many" : std::to_string(count * word)) + " bytes, file holds " +
                      std::to_string(data_bytes));
    in.clear();
    in.seekg(data_start);
    std::vector<unsigned char> raw(data_bytes);
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(data_bytes));
    if (!in) throw IoError(where + ": read failed");

    // float16 and float32 files give f32, float64 f64, integers and bool the graph's dtype
    // (f64 when none is given); convert_to then casts floats
    const DType natural = type.kind == 'f' ? (word == 8 ? DType::f64 : DType::f32) : convert_to.value_or(DType::f64);
    // a Fortran-order (a, b, c) array is the C-order (c, b, a) array transposed
    Shape stored = shape;
    if (fortran) std::reverse(stored.begin(), stored.end());
    Tensor t = zeros(natural, stored);
    const bool to_f32 = convert_to == DType::f32 || (!convert_to && natural == DType::f32);
    t.visit([&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        T* out = a.data();
        for (std::size_t i = 0; i < count; ++i) {
            const unsigned char* p = raw.data() + i * word;
            if (type.kind == 'i' || type.kind == 'u') {
                const std::uint64_t limit = std::uint64_t(1) << (std::is_same_v<T, float> ? 24 : 53);
                if (integer_magnitude(p, type) > limit)
                    throw IoError(where + ": integer " + integer_text(p, type) + " at flat index " + std::to_string(i) +
                                  " is beyond 2^" + (std::is_same_v<T, float> ? "24" : "53") +
                                  " and cannot be held exactly in " + to_string(dtype_of<T>()));
            }
            const double v = decode(p, type);
            if (to_f32 && std::isfinite(v) && std::abs(v) > std::numeric_limits<float>::max())
                throw IoError(where + ": value " + (std::ostringstream() << v).str() + " at flat index " + std::to_string(i) +
                              " is beyond f32's range (it would become infinite)");
            out[i] = static_cast<T>(v);
        }
        if (fortran && stored.size() > 1) {
            std::decay_t<decltype(a)> c = xt::transpose(a);
            a = std::move(c);
        }
    });
    if (convert_to && t.dtype() != *convert_to) return t.cast(*convert_to);
    return t;
}

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw IoError(path.string() + ": cannot create");
    tensor.visit([&](const auto& a) { xt::detail::dump_npy_stream(out, a); });
    out.close();
    if (!out) throw IoError(path.string() + ": write failed");
}

}  // namespace attngraph
