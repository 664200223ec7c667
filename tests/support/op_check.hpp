#pragma once
// Running one op on its own, in double: forward, and backward against central finite
// differences. For the op tests (tests/test_op_*.cpp).
#include <any>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/op.hpp"

namespace attngraph::test {

using Arrays = std::vector<Array<double>>;

/// An array of `shape` holding `values` (row-major).
inline Array<double> array_of(const Shape& shape, const std::vector<double>& values) {
    Array<double> a = Array<double>::from_shape(shape);
    std::copy(values.begin(), values.end(), a.data());
    return a;
}

/// Seeded uniform(-1, 1) values.
inline Array<double> random_array(const Shape& shape, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    Array<double> a = Array<double>::from_shape(shape);
    for (auto& v : a) v = u(rng);
    return a;
}

/// The op's inferred output shapes for these input shapes (throws the op's ShapeError).
inline std::vector<Shape> infer(const std::string& op, const std::any& attrs, const std::vector<Shape>& in) {
    return OpRegistry::instance().get(op).infer_shapes(attrs, in);
}

/// Runs the op's f64 forward.
inline Arrays forward(const std::string& op, const std::any& attrs, const Arrays& in) {
    const OpDef& def = OpRegistry::instance().get(op);
    std::vector<Shape> shapes;
    for (const auto& a : in) shapes.emplace_back(a.shape().begin(), a.shape().end());
    Arrays out;
    for (const auto& s : def.infer_shapes(attrs, shapes)) out.push_back(Array<double>::from_shape(s));
    std::vector<const Array<double>*> ip;
    std::vector<Array<double>*> op_;
    for (const auto& a : in) ip.push_back(&a);
    for (auto& a : out) op_.push_back(&a);
    def.forward_f64(attrs, In<double>(ip), Out<double>(op_));
    return out;
}

/// Σ_k Σ w_k · y_k over the finite entries of y (masked -inf entries do not depend on x).
inline double weighted_sum(const Arrays& ys, const Arrays& ws) {
    double s = 0;
    for (std::size_t k = 0; k < ys.size(); ++k)
        for (std::size_t i = 0; i < ys[k].size(); ++i)
            if (std::isfinite(ys[k].data()[i])) s += ws[k].data()[i] * ys[k].data()[i];
    return s;
}

/// @brief Largest |analytic - numeric| / max(1, |numeric|) over every input element with
/// `needs[i]`, for the loss Σ w_k · y_k with seeded random w_k. The analytic gradient comes
/// from the op's backward (which must add into zero-initialised din, and into a din holding
/// 1 it must add on top: that is checked too), the numeric one from central differences.
inline double gradcheck(const std::string& op, const std::any& attrs, Arrays in, std::vector<bool> needs = {},
                        double eps = 1e-6) {
    const OpDef& def = OpRegistry::instance().get(op);
    if (!def.backward_f64) return std::numeric_limits<double>::infinity();
    if (needs.empty()) needs.assign(in.size(), true);
    const Arrays out = forward(op, attrs, in);
    Arrays ws;
    for (std::size_t k = 0; k < out.size(); ++k)
        ws.push_back(random_array(Shape(out[k].shape().begin(), out[k].shape().end()), 77 + static_cast<unsigned>(k)));
    Arrays din;
    for (std::size_t i = 0; i < in.size(); ++i) {
        Array<double> d = Array<double>::from_shape(in[i].shape());
        d.fill(1.0);  // backward must add (+=): the result is 1 + gradient
        din.push_back(std::move(d));
    }
    std::vector<const Array<double>*> ip, outp, doutp;
    std::vector<Array<double>*> dinp;
    for (const auto& a : in) ip.push_back(&a);
    for (const auto& a : out) outp.push_back(&a);
    for (const auto& a : ws) doutp.push_back(&a);
    for (std::size_t i = 0; i < in.size(); ++i) dinp.push_back(needs[i] ? &din[i] : nullptr);
    def.backward_f64(attrs, In<double>(ip), In<double>(outp), In<double>(doutp), Out<double>(dinp));

    double worst = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (!needs[i]) continue;
        for (std::size_t e = 0; e < in[i].size(); ++e) {
            const double saved = in[i].data()[e];
            in[i].data()[e] = saved + eps;
            const double up = weighted_sum(forward(op, attrs, in), ws);
            in[i].data()[e] = saved - eps;
            const double down = weighted_sum(forward(op, attrs, in), ws);
            in[i].data()[e] = saved;
            const double numeric = (up - down) / (2 * eps);
            const double analytic = din[i].data()[e] - 1.0;
            worst = std::max(worst, std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric)));
        }
    }
    return worst;
}

/// Largest |a - b| (+inf on a shape mismatch).
inline double max_diff(const Array<double>& a, const Array<double>& b) {
    if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = a.data()[i], y = b.data()[i];
        if (x == y) continue;  // equal infinities
        m = std::max(m, std::abs(x - y));
    }
    return m;
}

}  // namespace attngraph::test
