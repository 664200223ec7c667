#include "engine/npy.hpp"

#include <cstdint>
#include <fstream>
#include <sstream>

#include <xtensor/xnpy.hpp>

#include "engine/error.hpp"

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
        if (comma - pos > 19) throw IoError(where + ": bad header (size " + dims.substr(pos, comma - pos) + " is too large)");
        pos = comma + 1;
    }
}

}  // namespace

Tensor load_npy(const std::filesystem::path& path, std::size_t max_elements) {
    const std::string where = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(where + ": cannot open");
    return load_npy(in, where, max_elements);
}

Tensor load_npy(std::istream& in, const std::string& where, std::size_t max_elements) {
    const auto start = in.tellg();
    const std::string header = header_of(in, where);
    check_header_text(header, where);
    const auto data_start = in.tellg();
    in.seekg(0, std::ios::end);
    const auto end = in.tellg();
    if (data_start < 0 || end < data_start) throw IoError(where + ": cannot determine the file size");
    const std::size_t data_bytes = static_cast<std::size_t>(end - data_start);

    std::string descr;
    bool fortran = false;
    std::vector<std::size_t> shape;
    try {
        xt::detail::parse_header(header, descr, &fortran, shape);
    } catch (const std::exception& e) {
        throw IoError(where + ": bad header (" + e.what() + ")");
    }
    if (fortran) throw IoError(where + ": Fortran-order arrays are not supported; save with C order");
    std::size_t word = 0;
    if (descr == "<f4") word = 4;
    else if (descr == "<f8") word = 8;
    else throw IoError(where + ": dtype '" + descr + "' is not supported (float32 '<f4' or float64 '<f8')");
    const std::size_t count = element_count_capped(shape);
    if (count > max_elements)
        throw IoError(where + ": shape (" + shape_str(shape) + ") is larger than the limit of " +
                      std::to_string(max_elements) + " elements (--max-memory)");
    if (count > data_bytes / word || count * word != data_bytes)
        throw IoError(where + ": header says shape (" + shape_str(shape) + ") " + descr + " = " +
                      (count > SIZE_MAX / word ? "too many" : std::to_string(count * word)) + " bytes, file holds " +
                      std::to_string(data_bytes));
    in.clear();
    in.seekg(start);
    try {
        if (word == 4) {
            auto a = xt::load_npy<float>(in);
            Array<float> out = a;
            return out;
        }
        auto a = xt::load_npy<double>(in);
        Array<double> out = a;
        return out;
    } catch (const std::exception& e) {
        throw IoError(where + ": " + e.what());
    }
}

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw IoError(path.string() + ": cannot create");
    tensor.visit([&](const auto& a) { xt::detail::dump_npy_stream(out, a); });
    out.close();
    if (!out) throw IoError(path.string() + ": write failed");
}

}  // namespace attngraph
