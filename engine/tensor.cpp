#include "engine/tensor.hpp"

#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "engine/buffer_pool.hpp"
#include "engine/error.hpp"

namespace attngraph {

std::string to_string(DType dtype) { return dtype == DType::f32 ? "f32" : "f64"; }

DType parse_dtype(const std::string& text) {
    if (text == "f32" || text == "float32") return DType::f32;
    if (text == "f64" || text == "float64") return DType::f64;
    throw GraphError("unknown dtype '" + text + "' (expected f32 or f64)");
}

std::string shape_str(const Shape& shape) {
    if (shape.empty()) return "()";
    std::string s;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += 'x';
        s += std::to_string(shape[i]);
    }
    return s;
}

std::size_t element_count(const Shape& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::size_t element_count_capped(const Shape& shape) {
    // the product of the non-zero sizes: xtensor's strides multiply them as signed longs even
    // when a 0 makes the tensor empty, so an empty shape whose other sizes overflow that is
    // refused as too large too
    std::size_t n = 1;
    bool empty = false;
    for (auto d : shape) {
        if (d == 0) {
            empty = true;
            continue;
        }
        if (n > SIZE_MAX / d) return SIZE_MAX;
        n *= d;
    }
    if (empty) return n > static_cast<std::size_t>(PTRDIFF_MAX) ? SIZE_MAX : 0;
    return n;
}

Shape Tensor::shape() const {
    return visit([](const auto& a) { return Shape(a.shape().begin(), a.shape().end()); });
}

std::size_t Tensor::size() const {
    return visit([](const auto& a) { return a.size(); });
}

Tensor Tensor::cast(DType dtype) const {
    if (dtype == this->dtype()) return *this;
    return visit([&](const auto& a) -> Tensor {
        if (dtype == DType::f32) {
            Array<float> out = Array<float>::from_shape(a.shape());
            std::copy(a.begin(), a.end(), out.begin());
            return out;
        }
        Array<double> out = Array<double>::from_shape(a.shape());
        std::copy(a.begin(), a.end(), out.begin());
        return out;
    });
}

double Tensor::at_flat(std::size_t i) const {
    return visit([&](const auto& a) { return static_cast<double>(a.data()[i]); });
}

bool Tensor::operator==(const Tensor& other) const {
    if (dtype() != other.dtype() || shape() != other.shape()) return false;
    return visit([&](const auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        const auto& b = other.as<T>();
        return std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
    });
}

void advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < huge_page_min_bytes) return;
    constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(huge - 1);
    // advice only: where THP is off or the range cannot take it, the pages stay 4 KiB
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

template <class T>
Array<T> uninitialized(const Shape& shape) {
    Array<T> a;
    if (element_count(shape) * sizeof(T) >= buffer_pool_min_bytes && take_pooled(a, shape)) return a;
    a = Array<T>::from_shape(shape);
    advise_huge_pages(a.data(), a.size() * sizeof(T));
    return a;
}
template Array<float> uninitialized<float>(const Shape&);
template Array<double> uninitialized<double>(const Shape&);

Tensor zeros(DType dtype, const Shape& shape) {
    if (dtype == DType::f32) return Tensor(Array<float>(Array<float>::shape_type(shape.begin(), shape.end()), 0.0f));
    return Tensor(Array<double>(Array<double>::shape_type(shape.begin(), shape.end()), 0.0));
}

}  // namespace attngraph
