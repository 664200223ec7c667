#pragma once
// The C++ face of every op: functions that add a node to the value's graph, so that graph
// code reads like the math. One line per op; each is defined in its op's file.
#include <string>
#include <vector>

#include "engine/builder.hpp"

namespace attngraph {

/// x·W + b over the last axis of x. x is (..., in), W is (in, out), b is (out) or (1, out).
Value linear(const Value& x, const Value& w);
Value linear(const Value& x, const Value& w, const Value& b);
/// Swaps the last two axes, or permutes all axes by `perm`.
Value transpose(const Value& x);
Value transpose(const Value& x, std::vector<int> perm);
/// a·b over the last two axes, batched (with broadcasting) over the leading ones.
Value matmul(const Value& a, const Value& b);
/// factor · x
Value scale(const Value& x, double factor);
/// Numerically stable softmax along `axis`.
Value softmax(const Value& x, int axis = -1);
/// Concatenation along `axis`.
Value concat(const std::vector<Value>& xs, int axis = -1);
/// a + b with numpy broadcasting.
Value add(const Value& a, const Value& b);
/// x with masked positions set to -inf: keys j > i (causal); outside the window |i - j| < w
/// (or 0 <= i - j < w when causal); keys j >= lengths[b] of sequence b (padding, batch axis 0);
/// where `keep` (broadcast to x) is zero.
Value mask_causal(const Value& x);
Value mask_window(const Value& x, int window, bool causal = false);
Value mask_padding(const Value& x, std::vector<int> lengths);
Value mask(const Value& x, const Value& keep);
/// x[start:end] along `axis`.
Value slice(const Value& x, int axis, int start, int end);
/// `parts` equal pieces, or pieces of the listed `sizes`, along `axis`; the node is `name`.
std::vector<Value> split(const Value& x, int parts, int axis = -1, const std::string& name = "");
std::vector<Value> split(const Value& x, std::vector<int> sizes, int axis = -1, const std::string& name = "");
/// x's elements in a new shape; one entry may be -1.
Value reshape(const Value& x, std::vector<int> shape);
/// Axes permuted: y.shape[i] = x.shape[perm[i]].
Value permute(const Value& x, std::vector<int> perm);

}  // namespace attngraph
