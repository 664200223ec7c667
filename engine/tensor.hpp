#pragma once
// Tensor: an xtensor array of float or double, plus shape helpers shared by every op.
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include <xtensor/xarray.hpp>

namespace attngraph {

using Shape = std::vector<std::size_t>;

enum class DType { f32, f64 };

template <class T>
using Array = xt::xarray<T, xt::layout_type::row_major>;

template <class T>
constexpr DType dtype_of() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

std::string to_string(DType dtype);           // "f32" / "f64"
DType parse_dtype(const std::string& text);   // throws GraphError

/// "3x4", "()" for a scalar.
std::string shape_str(const Shape& shape);
/// Number of elements of a shape (1 for a scalar).
std::size_t element_count(const Shape& shape);
/// Number of elements, or SIZE_MAX when the product does not fit in std::size_t (also for an
/// empty shape whose non-zero sizes multiply past PTRDIFF_MAX: its strides would overflow).
std::size_t element_count_capped(const Shape& shape);

/// @brief A float32 or float64 xtensor array.
class Tensor {
public:
    Tensor() = default;
    Tensor(Array<float> a) : m_data(std::move(a)) {}
    Tensor(Array<double> a) : m_data(std::move(a)) {}

    DType dtype() const { return m_data.index() == 0 ? DType::f32 : DType::f64; }
    Shape shape() const;
    std::size_t size() const;

    template <class T>
    Array<T>& as() { return std::get<Array<T>>(m_data); }
    template <class T>
    const Array<T>& as() const { return std::get<Array<T>>(m_data); }

    /// A copy converted to dtype (the same array when it already is).
    Tensor cast(DType dtype) const;
    /// Element i of the flat row-major data, as double.
    double at_flat(std::size_t i) const;

    template <class F>
    decltype(auto) visit(F&& f) const { return std::visit(std::forward<F>(f), m_data); }
    template <class F>
    decltype(auto) visit(F&& f) { return std::visit(std::forward<F>(f), m_data); }

    bool operator==(const Tensor& other) const;  // same dtype, shape and bits

private:
    std::variant<Array<float>, Array<double>> m_data;
};

/// A zero-filled tensor of the given dtype and shape.
Tensor zeros(DType dtype, const Shape& shape);

/// Buffers of at least this many bytes are backed by transparent huge pages where the
/// system allows it (Linux, THP "madvise" or "always"): see advise_huge_pages.
constexpr std::size_t huge_page_min_bytes = std::size_t{4} << 20;

/// Asks the kernel to back the 2 MiB-aligned part of [data, data + bytes) with transparent
/// huge pages (madvise MADV_HUGEPAGE) when bytes >= huge_page_min_bytes; a no-op elsewhere.
/// A large run value is written once per run into memory fresh from mmap: with 4 KiB pages
/// its first touch is one page fault per 4 KiB, and a GEMM writing it row block by row
/// block misses the TLB on every row. Nothing about the values changes.
void advise_huge_pages(void* data, std::size_t bytes);

/// An uninitialised array of `shape`: a buffer from the pool (engine/buffer_pool.hpp) when
/// one of its size waits there, else Array<T>::from_shape with its buffer advised as above.
template <class T>
Array<T> uninitialized(const Shape& shape);
extern template Array<float> uninitialized<float>(const Shape&);
extern template Array<double> uninitialized<double>(const Shape&);

}  // namespace attngraph
