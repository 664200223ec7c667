#pragma once
// The C++ face of every op: functions that add a node to the value's graph, so that graph
// code reads like the math. One line per op; each is defined in its op's file.
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

}  // namespace attngraph
