// RotaryEmbedding (ONNX opset 23): rotates pairs of x's features by position-dependent angles.
// Legend: x is (B, H, S, D) or (B, S, H·D) with `num_heads` = H; R = rotary_embedding_dim
// (0: D), even, R <= D; the first R features of each head rotate, the rest pass through.
// cos_cache and sin_cache are (P, R/2) read at position_ids (B, S) or (1, S) (no grad), or,
// without position_ids, (B, S, R/2) read at (b, s). Pairs: (x_i, x_{i+R/2}) for i < R/2, or
// (x_{2i}, x_{2i+1}) when `interleaved`; for a pair (x1, x2) at angle cos c, sin s:
//   y1 = c·x1 - s·x2,   y2 = s·x1 + c·x2.
// A position id past the cache (or negative, or not a whole number) is a ValueError when the
// graph runs (ids are values).
#pragma once
#include <cmath>

#include "ops/common.hpp"

namespace attngraph::ops {
struct RotaryEmbeddingAttrs {
    int interleaved = 0;
    int rotary_embedding_dim = 0;
    int num_heads = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::RotaryEmbeddingAttrs, interleaved, rotary_embedding_dim, num_heads);

namespace attngraph::ops {

struct RotaryEmbedding {
    static constexpr const char* name = "RotaryEmbedding";
    static constexpr int min_inputs = 3, max_inputs = 4;
    static constexpr std::array<int, 1> no_grad_inputs{3};
    using Attrs = RotaryEmbeddingAttrs;

    /// x's layout: batch, heads, sequence, head size, rotary dim, and the strides of b, h, s.
    struct Layout {
        std::size_t batch = 0, heads = 0, seq = 0, head = 0, rot = 0;
        std::size_t sb = 0, sh = 0, ss = 0;
    };

    static Layout layout(const Attrs& a, const Shape& x) {
        Layout l;
        if (a.interleaved != 0 && a.interleaved != 1)
            throw ShapeError("interleaved must be 0 or 1, got " + std::to_string(a.interleaved));
        if (a.num_heads < 0) throw ShapeError("num_heads must be >= 0, got " + std::to_string(a.num_heads));
        if (x.size() == 4) {
            l.batch = x[0], l.heads = x[1], l.seq = x[2], l.head = x[3];
            if (a.num_heads && static_cast<std::size_t>(a.num_heads) != l.heads)
                throw ShapeError("num_heads " + std::to_string(a.num_heads) + " disagrees with x (" + shape_str(x) +
                                 "), (batch, heads, sequence, head size)");
            l.ss = l.head, l.sh = l.seq * l.head, l.sb = l.heads * l.sh;
        } else if (x.size() == 3) {
            if (a.num_heads == 0)
                throw ShapeError("x (" + shape_str(x) + ") is 3-D (batch, sequence, hidden): give num_heads");
            l.batch = x[0], l.seq = x[1], l.heads = static_cast<std::size_t>(a.num_heads);
            if (x[2] % l.heads)
                throw ShapeError("hidden size " + std::to_string(x[2]) + " of x (" + shape_str(x) +
                                 ") is not a multiple of num_heads " + std::to_string(a.num_heads));
            l.head = x[2] / l.heads;
            l.sh = l.head, l.ss = x[2], l.sb = l.seq * x[2];
        } else {
            throw ShapeError(
                "x must be 4-D (batch, heads, sequence, head size) or 3-D (batch, sequence, hidden), got (" +
                shape_str(x) + ")");
        }
        if (a.rotary_embedding_dim < 0)
            throw ShapeError("rotary_embedding_dim must be >= 0, got " + std::to_string(a.rotary_embedding_dim));
        l.rot = a.rotary_embedding_dim ? static_cast<std::size_t>(a.rotary_embedding_dim) : l.head;
        if (l.rot > l.head)
            throw ShapeError("rotary_embedding_dim " + std::to_string(l.rot) + " exceeds the head size " +
                             std::to_string(l.head) + " of x (" + shape_str(x) + ")");
        if (l.rot % 2)
            throw ShapeError((a.rotary_embedding_dim ? "rotary_embedding_dim " : "head size ") + std::to_string(l.rot) +
                             " of x (" + shape_str(x) + ") is odd: rotation pairs features");
        return l;
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        const Layout l = layout(a, in[0]);
        const Shape &cos = in[1], &sin = in[2];
        if (cos != sin)
            throw ShapeError("cos_cache (" + shape_str(cos) + ") and sin_cache (" + shape_str(sin) + ") differ");
        const std::size_t half = l.rot / 2;
        if (in.size() == 4) {
            const Shape& pos = in[3];
            if (pos.size() != 2 || (pos[0] != l.batch && pos[0] != 1) || pos[1] != l.seq)
                throw ShapeError("position_ids (" + shape_str(pos) + ") must be (batch, sequence) = (" +
                                 std::to_string(l.batch) + "x" + std::to_string(l.seq) + ") or (1x" +
                                 std::to_string(l.seq) + ") for x (" + shape_str(in[0]) + ")");
            if (cos.size() != 2 || cos[1] != half)
                throw ShapeError("cos_cache (" + shape_str(cos) + ") must be (max positions, " + std::to_string(half) +
                                 ") with position_ids: half the rotary dim " + std::to_string(l.rot));
        } else if (cos != Shape{l.batch, l.seq, half}) {
            throw ShapeError("cos_cache (" + shape_str(cos) + ") must be (batch, sequence, rotary dim / 2) = (" +
                             shape_str({l.batch, l.seq, half}) + ") without position_ids");
        }
        return in[0];
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::string s = "rope(" + v[0] + ", " + v[1] + ", " + v[2];
        if (v.size() == 4) s += ", positions=" + v[3];
        if (a.interleaved) s += ", interleaved";
        if (a.rotary_embedding_dim) s += ", dim=" + std::to_string(a.rotary_embedding_dim);
        return s + ")";
    }

    /// The cache row of each (b, s): b·S + s without position ids, else the id; ValueError
    /// on an id outside the cache.
    template <class T>
    static std::vector<std::size_t> cache_rows(const Layout& l, In<T> in) {
        std::vector<std::size_t> rows(l.batch * l.seq);
        if (in.size() < 4) {
            for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
            return rows;
        }
        const Array<T>& pos = *in[3];
        const std::size_t cache = in[1]->shape()[0];
        const bool shared = pos.shape()[0] == 1;
        for (std::size_t b = 0; b < l.batch; ++b)
            for (std::size_t s = 0; s < l.seq; ++s) {
                const std::size_t at = (shared ? 0 : b) * l.seq + s;
                const T v = pos.data()[at];
                if (!(v >= 0 && v < static_cast<T>(cache) && std::trunc(v) == v)) {
                    char buf[64];
                    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
                    throw ValueError(std::string("position id ") + buf + " at [" + std::to_string(shared ? 0 : b) +
                                     ", " + std::to_string(s) + "] of position_ids (" + shape_str(shape_of(pos)) +
                                     ") is " + (v >= static_cast<T>(cache) ? "past" : "outside") + " the cache of " +
                                     std::to_string(cache) + " positions (cos_cache " + shape_str(shape_of(*in[1])) +
                                     ")");
                }
                rows[b * l.seq + s] = static_cast<std::size_t>(v);
            }
        return rows;
    }

    /// Index of the two features of pair i within a head.
    static std::pair<std::size_t, std::size_t> pair_of(const Attrs& a, const Layout& l, std::size_t i) {
        return a.interleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + l.rot / 2};
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const Layout l = layout(a, shape_of(*in[0]));
        const std::vector<std::size_t> rows = cache_rows(l, in);
        const std::size_t half = l.rot / 2;
        const T* x = in[0]->data();
        const T* cos = in[1]->data();
        const T* sin = in[2]->data();
        T* y = out[0]->data();
        // one item per (b, h, s) vector of one head
        parallel_chunks(l.batch * l.heads * l.seq, grain_for(2 * l.head), [&](std::size_t t0, std::size_t t1) {
            for (std::size_t t = t0; t < t1; ++t) {
                const std::size_t s = t % l.seq, h = (t / l.seq) % l.heads, b = t / (l.seq * l.heads);
                const std::size_t off = b * l.sb + h * l.sh + s * l.ss;
                const T* c = cos + rows[b * l.seq + s] * half;
                const T* sn = sin + rows[b * l.seq + s] * half;
                for (std::size_t i = 0; i < half; ++i) {
                    const auto [i1, i2] = pair_of(a, l, i);
                    const T x1 = x[off + i1], x2 = x[off + i2];
                    y[off + i1] = c[i] * x1 - sn[i] * x2;
                    y[off + i2] = sn[i] * x1 + c[i] * x2;
                }
                for (std::size_t k = l.rot; k < l.head; ++k) y[off + k] = x[off + k];
            }
        });
    }

    // in the forward pass this was: y1 = c·x1 - s·x2, y2 = s·x1 + c·x2 (the rest y = x).
    //   dx1 += c·dy1 + s·dy2,  dx2 += -s·dy1 + c·dy2
    //   dcos[row, i] += dy1·x1 + dy2·x2,  dsin[row, i] += -dy1·x2 + dy2·x1  (b, h, s in order)
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const Layout l = layout(a, shape_of(*in[0]));
        const std::vector<std::size_t> rows = cache_rows(l, in);
        const std::size_t half = l.rot / 2, items = l.batch * l.heads * l.seq;
        const T* x = in[0]->data();
        const T* cos = in[1]->data();
        const T* sin = in[2]->data();
        const T* dy = dout[0]->data();
        auto place = [&](std::size_t t) {
            const std::size_t s = t % l.seq, h = (t / l.seq) % l.heads, b = t / (l.seq * l.heads);
            return std::pair{b * l.sb + h * l.sh + s * l.ss, rows[b * l.seq + s] * half};
        };
        if (din[0]) {
            T* dx = din[0]->data();
            parallel_chunks(items, grain_for(2 * l.head), [&](std::size_t t0, std::size_t t1) {
                for (std::size_t t = t0; t < t1; ++t) {
                    const auto [off, row] = place(t);
                    for (std::size_t i = 0; i < half; ++i) {
                        const auto [i1, i2] = pair_of(a, l, i);
                        const T c = cos[row + i], sn = sin[row + i];
                        dx[off + i1] += c * dy[off + i1] + sn * dy[off + i2];
                        dx[off + i2] += -sn * dy[off + i1] + c * dy[off + i2];
                    }
                    for (std::size_t k = l.rot; k < l.head; ++k) dx[off + k] += dy[off + k];
                }
            });
        }
        for (std::size_t t = 0; t < items && (din[1] || din[2]); ++t) {
            const auto [off, row] = place(t);
            for (std::size_t i = 0; i < half; ++i) {
                const auto [i1, i2] = pair_of(a, l, i);
                const T x1 = x[off + i1], x2 = x[off + i2], g1 = dy[off + i1], g2 = dy[off + i2];
                if (din[1]) din[1]->data()[row + i] += g1 * x1 + g2 * x2;
                if (din[2]) din[2]->data()[row + i] += -g1 * x2 + g2 * x1;
            }
        }
    }
};

}  // namespace attngraph::ops
