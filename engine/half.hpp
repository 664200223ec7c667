#pragma once
// IEEE 754 half precision (float16) and bfloat16 bits to float. Both conversions are exact: every
// float16 and bfloat16 value is a float. Used by the .npy, safetensors and ONNX readers.
#include <bit>
#include <cstdint>

namespace attngraph {

/// float16 bits (sign, 5 exponent, 10 mantissa bits) to the float of the same value.
constexpr float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits = 0;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exp = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    return std::bit_cast<float>(bits);
}

/// bfloat16 bits (the high half of a float's) to that float.
constexpr float bfloat16_to_float(std::uint16_t b) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace attngraph
