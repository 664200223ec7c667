// libFuzzer target: bytes -> load_npy. Anything but a typed attngraph::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "engine/error.hpp"
#include "engine/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size), std::ios::binary);
    try {
        attngraph::load_npy(in, "fuzz.npy", std::size_t(1) << 20);
    } catch (const attngraph::Error&) {
    }
    return 0;
}
