#include "engine/npy.hpp"

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
    if (!in || len > 65536) throw IoError(where + ": bad header length");
    std::string header(len, '\0');
    in.read(header.data(), static_cast<std::streamsize>(len));
    if (!in) throw IoError(where + ": truncated header");
    return header;
}

}  // namespace

Tensor load_npy(const std::filesystem::path& path, std::size_t max_elements) {
    const std::string where = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(where + ": cannot open");
    const std::string header = header_of(in, where);
    const auto data_start = in.tellg();
    in.seekg(0, std::ios::end);
    const auto file_size = static_cast<std::size_t>(in.tellg());
    const std::size_t data_bytes = file_size - static_cast<std::size_t>(data_start);

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
    std::size_t count = 1;
    for (auto d : shape) {
        if (d != 0 && count > max_elements / d)
            throw IoError(where + ": shape (" + shape_str(shape) + ") is larger than the limit of " +
                          std::to_string(max_elements) + " elements");
        count *= d;
    }
    if (count > max_elements)
        throw IoError(where + ": shape (" + shape_str(shape) + ") is larger than the limit of " +
                      std::to_string(max_elements) + " elements");
    if (count * word != data_bytes)
        throw IoError(where + ": header says shape (" + shape_str(shape) + ") " + descr + " = " +
                      std::to_string(count * word) + " bytes, file holds " + std::to_string(data_bytes));
    in.clear();
    in.seekg(0);
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
