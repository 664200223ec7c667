// Writing a command's result to a file or stdout.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/common.hpp"
#include "engine/error.hpp"

namespace attngraph::cli {

void write_output(const std::string& path, const std::string& text) {
    if (path.empty() || path == "-") {
        std::cout << text;
        return;
    }
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        out << text;
        out.close();
        if (!out) {
            std::remove(tmp.c_str());
            throw IoError(path + ": cannot write");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw IoError(path + ": cannot write");
    }
}

}  // namespace attngraph::cli
