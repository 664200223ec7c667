// Alibi: y = x - slope[h] · |i + offset - j|, ALiBi's linear position bias computed from
// per-head slopes and the positions at run time, so that no (h, n, m) table is stored: a
// graph holds h numbers and runs at any n. Legend: x and y are (..., h, n, m): head h on
// axis -3, query i on axis -2, key j on axis -1; slopes is (h); offset: the keys before the
// first query (a KV cache's length), default 0.
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct AlibiAttrs {
    int offset = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::AlibiAttrs, offset);

namespace attngraph::ops {

struct Alibi {
    static constexpr const char* name = "Alibi";
    static constexpr int min_inputs = 2, max_inputs = 2;
    using Attrs = AlibiAttrs;

    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) {
        const Shape& x = in[0];
        if (x.size() < 3) throw ShapeError("x must be (..., h, n, m) with a head axis, got (" + shape_str(x) + ")");
        if (in[1].size() != 1 || in[1][0] != x[x.size() - 3])
            throw ShapeError("slopes (" + shape_str(in[1]) + ") must be (h) = (" + std::to_string(x[x.size() - 3]) +
                             ") for the heads of x (" + shape_str(x) + ")");
        return x;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        const std::string i = a.offset ? "i + " + std::to_string(a.offset) : "i";
        return v[0] + " - " + v[1] + "[h]·|" + i + " - j|";
    }

    // The distance |i + offset - j| of flat element e of x (shape (..., h, n, m)), and its head.
    struct Position {
        std::size_t m, n, h;
        long offset;
        std::size_t head(std::size_t e) const { return (e / (m * n)) % h; }
        double distance(std::size_t e) const {
            const long j = static_cast<long>(e % m), i = static_cast<long>((e / m) % n) + offset;
            return static_cast<double>(i > j ? i - j : j - i);
        }
    };
    static Position position(const Attrs& a, const Shape& xs) {
        return {xs[xs.size() - 1], xs[xs.size() - 2], xs[xs.size() - 3], a.offset};
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Position p = position(a, shape_of(*in[0]));
        const T* x = in[0]->data();
        const T* slope = in[1]->data();
        T* y = out[0]->data();
        parallel_chunks(in[0]->size(), grain_for(4), [&](std::size_t e0, std::size_t e1) {
            for (std::size_t e = e0; e < e1; ++e) y[e] = x[e] - slope[p.head(e)] * static_cast<T>(p.distance(e));
        });
    }

    // in the forward pass this was: y = x - slope[h]·|i + offset - j|. dx += dy;
    // dslope[h] -= sum of dy·|i + offset - j| over that head's elements, in element order.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Position p = position(a, shape_of(*in[0]));
        const T* dy = dout[0]->data();
        if (din[0]) {
            T* dx = din[0]->data();
            for (std::size_t e = 0; e < in[0]->size(); ++e) dx[e] += dy[e];
        }
        if (din[1]) {  // each head's sum in double (B·n·m terms of about |i − j|), as the fused step's
            std::vector<double> sums(din[1]->size(), 0.0);
            for (std::size_t e = 0; e < in[0]->size(); ++e)
                sums[p.head(e)] += static_cast<double>(dy[e]) * static_cast<double>(p.distance(e));
            T* ds = din[1]->data();
            for (std::size_t h = 0; h < sums.size(); ++h) ds[h] -= static_cast<T>(sums[h]);
        }
    }
};

}  // namespace attngraph::ops
