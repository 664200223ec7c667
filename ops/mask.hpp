// Mask: y = x where kept, -inf where masked, so that a following Softmax gives masked
// positions zero weight. Legend: x and y are (..., n, m): query i on axis -2, key j on
// axis -1; the batch axis (for `padding`) is axis 0.
// What is kept: a mask tensor (second input) broadcast to x's shape, and/or a built-in
// `pattern` on the last two axes, with p = i + offset (offset: the keys before the first
// query, e.g. the length of a KV cache; default 0; with offset_from_end, m - n: the last
// query sees the last key, for a cache of any length):
//   causal   j <= p
//   window   |p - j| < window, or 0 <= p - j < window with causal = true
//   padding  j < lengths[b] (one length per sequence of the batch axis)
// The mask tensor's `mask_type` says what its values mean, since both kinds arrive as floats:
//   boolean   (default) nonzero = keep, zero = drop (ONNX's bool attn_mask)
//   additive  a bias added to x where kept: y = x + mask (ONNX's float attn_mask; -inf drops)
// With a pattern and a mask tensor, a position is kept when both keep it.
#pragma once
#include "ops/common.hpp"

namespace attngraph::ops {
struct MaskAttrs {
    std::optional<std::string> pattern;
    std::optional<int> window;
    std::optional<bool> causal;
    std::optional<std::vector<int>> lengths;
    std::optional<int> offset;
    std::optional<bool> offset_from_end;
    std::optional<std::string> mask_type;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::MaskAttrs, pattern, window, causal, lengths, offset, offset_from_end,
                        mask_type);

namespace attngraph::ops {

struct Mask {
    static constexpr const char* name = "Mask";
    static constexpr int min_inputs = 1, max_inputs = 2;
    using Attrs = MaskAttrs;

    static void check_attrs(const Attrs& a) {
        const std::string p = a.pattern.value_or("");
        if (a.mask_type && *a.mask_type != "boolean" && *a.mask_type != "additive")
            throw ShapeError("unknown mask_type '" + *a.mask_type + "' (known: boolean, additive)");
        if ((a.offset || a.offset_from_end) && p != "causal" && p != "window")
            throw ShapeError("'offset' and 'offset_from_end' belong to pattern 'causal' or 'window'" +
                             (p.empty() ? std::string() : ", not '" + p + "'"));
        if (a.offset && a.offset_from_end.value_or(false))
            throw ShapeError("give 'offset' or 'offset_from_end', not both");
        if (!a.pattern) {
            if (a.window || a.causal || a.lengths)
                throw ShapeError("'window', 'causal' and 'lengths' need a 'pattern'");
            return;
        }
        if (p != "causal" && p != "window" && p != "padding")
            throw ShapeError("unknown pattern '" + p + "' (known: causal, window, padding)");
        if (p == "window") {
            if (!a.window) throw ShapeError("pattern 'window' needs the attribute 'window'");
            if (*a.window < 1) throw ShapeError("window must be at least 1, got " + std::to_string(*a.window));
        } else if (a.window || a.causal) {
            throw ShapeError("'window' and 'causal' belong to pattern 'window', not '" + p + "'");
        }
        if (p == "padding") {
            if (!a.lengths) throw ShapeError("pattern 'padding' needs the attribute 'lengths'");
        } else if (a.lengths) {
            throw ShapeError("'lengths' belongs to pattern 'padding', not '" + p + "'");
        }
    }

    static Shape infer_shape(const Attrs& a, const std::vector<Shape>& in) {
        check_attrs(a);
        const Shape& x = in[0];
        if (!a.pattern && in.size() == 1) throw ShapeError("give a mask tensor (second input) or a 'pattern'");
        if (a.pattern && x.size() < 2)
            throw ShapeError("pattern '" + *a.pattern + "' needs x with at least 2 axes (query, key), got (" +
                             shape_str(x) + ")");
        if (a.pattern == "padding") {
            if (x.size() < 3)
                throw ShapeError("pattern 'padding' needs a batch axis: x (B, ..., n, m), got (" + shape_str(x) + ")");
            if (a.lengths->size() != x[0])
                throw ShapeError("'lengths' has " + std::to_string(a.lengths->size()) + " entries for batch axis " +
                                 std::to_string(x[0]) + " of x (" + shape_str(x) + ")");
            for (int len : *a.lengths)
                if (len < 0 || static_cast<std::size_t>(len) > x.back())
                    throw ShapeError("length " + std::to_string(len) + " is outside [0, " + std::to_string(x.back()) +
                                     "] (keys of x (" + shape_str(x) + "))");
        }
        if (a.mask_type && in.size() != 2)
            throw ShapeError("'mask_type' describes a mask tensor (second input), and there is none");
        if (in.size() == 2) {
            Shape b;
            try {
                b = broadcast_shapes(in[1], x);
            } catch (const ShapeError&) {
                b.clear();
            }
            if (b != x)
                throw ShapeError("mask (" + shape_str(in[1]) + ") does not broadcast to x (" + shape_str(x) + ")");
        }
        return x;
    }

    static std::string formula(const Attrs& a, const std::vector<std::string>& v) {
        std::string what;
        const std::string offset = a.offset_from_end.value_or(false) ? ", offset m - n"
                                   : a.offset.value_or(0)            ? ", offset " + std::to_string(*a.offset)
                                                                     : "";
        if (a.pattern == "causal") what = "causal" + offset;
        if (a.pattern == "window")
            what = "window " + std::to_string(a.window.value_or(0)) + (a.causal.value_or(false) ? ", causal" : "") +
                   offset;
        if (a.pattern == "padding") {
            std::vector<std::string> l;
            for (int len : *a.lengths) l.push_back(std::to_string(len));
            what = "padding lengths=[" + join(l, ",") + "]";
        }
        if (v.size() == 2 && additive(a))
            return what.empty() ? v[0] + " + " + v[1] : "mask(" + v[0] + " + " + v[1] + ", " + what + ")";
        if (v.size() == 2) what = v[1] + (what.empty() ? "" : ", " + what);
        return "mask(" + v[0] + ", " + what + ")";
    }

    static bool additive(const Attrs& a) { return a.mask_type.value_or("boolean") == "additive"; }

    /// keep(i): whether flat element i of x (shape xs) is kept.
    template <class T>
    static auto keeper(const Attrs& a, const Shape& xs, const Array<T>* mask) {
        const std::size_t rank = xs.size();
        const std::size_t m = rank >= 1 ? xs[rank - 1] : 1, n = rank >= 2 ? xs[rank - 2] : 1;
        const std::size_t per_batch = rank ? element_count(xs) / (xs[0] ? xs[0] : 1) : 1;
        enum class Pattern { none, causal, window, padding };
        const Pattern pattern = !a.pattern               ? Pattern::none
                                : *a.pattern == "causal" ? Pattern::causal
                                : *a.pattern == "window" ? Pattern::window
                                                         : Pattern::padding;
        const long w = a.window.value_or(0);
        const long offset =
            a.offset_from_end.value_or(false) ? static_cast<long>(m) - static_cast<long>(n) : a.offset.value_or(0);
        const bool causal = a.causal.value_or(false);
        std::vector<std::size_t> ms;
        if (mask && !additive(a)) ms = broadcast_strides(shape_of(*mask), xs);
        const T* md = mask && !additive(a) ? mask->data() : nullptr;
        const std::vector<int> lengths = a.lengths.value_or(std::vector<int>{});
        return [=](std::size_t idx) {
            if (md && md[broadcast_offset(idx, xs, ms)] == T(0)) return false;
            const long j = static_cast<long>(idx % m), i = static_cast<long>((idx / m) % n) + offset;
            switch (pattern) {
                case Pattern::causal:
                    return j <= i;
                case Pattern::window:
                    return causal ? (i - j >= 0 && i - j < w) : std::abs(i - j) < w;
                case Pattern::padding:
                    return j < lengths[idx / per_batch];
                case Pattern::none:
                    break;
            }
            return true;
        };
    }

    template <class T>
    static void forward(const Attrs& a, In<T> in, Out<T> out) {
        const auto keep = keeper<T>(a, shape_of(*in[0]), in.size() == 2 ? in[1] : nullptr);
        const T* x = in[0]->data();
        T* y = out[0]->data();
        const T inf = std::numeric_limits<T>::infinity();
        if (in.size() == 2 && additive(a)) {
            const Shape xs = shape_of(*in[0]);
            const std::vector<std::size_t> ms = broadcast_strides(shape_of(*in[1]), xs);
            const T* md = in[1]->data();
            parallel_chunks(in[0]->size(), grain_for(4), [&](std::size_t i0, std::size_t i1) {
                for (std::size_t i = i0; i < i1; ++i) y[i] = keep(i) ? x[i] + md[broadcast_offset(i, xs, ms)] : -inf;
            });
            return;
        }
        parallel_chunks(in[0]->size(), grain_for(4), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) y[i] = keep(i) ? x[i] : -inf;
        });
    }

    // in the forward pass this was: y = keep ? x (+ mask, additive) : -inf. dx = dy where
    // kept, 0 where masked; an additive mask gets dy where kept, summed over the axes it was
    // broadcast along (in element order: the same bits for any thread count); a boolean mask
    // gets no gradient.
    template <class T>
    static void backward(const Attrs& a, In<T> in, In<T>, In<T> dout, Out<T> din) {
        const auto keep = keeper<T>(a, shape_of(*in[0]), in.size() == 2 ? in[1] : nullptr);
        const T* dy = dout[0]->data();
        if (din[0]) {
            T* dx = din[0]->data();
            for (std::size_t i = 0; i < in[0]->size(); ++i)
                if (keep(i)) dx[i] += dy[i];
        }
        if (in.size() == 2 && additive(a) && din[1]) {
            const Shape xs = shape_of(*in[0]);
            const std::vector<std::size_t> ms = broadcast_strides(shape_of(*in[1]), xs);
            T* dm = din[1]->data();
            for (std::size_t i = 0; i < in[0]->size(); ++i)
                if (keep(i)) dm[broadcast_offset(i, xs, ms)] += dy[i];
        }
    }
};

}  // namespace attngraph::ops
