#pragma once
// What an op's code sees (ops/<op>.hpp includes it through ops/common.hpp): the kernel
// argument types, shapes and typed attributes. The op set built from the ops is engine/op.hpp.
#include <span>

#include "engine/attrs.hpp"
#include "engine/error.hpp"
#include "engine/tensor.hpp"

namespace attngraph {

/// A kernel's operands: in[i] points to input i (or, in backward, to forward output / output
/// gradient i); out[i] to output i (or input gradient i, nullptr when none is needed).
template <class T>
using In = std::span<const Array<T>* const>;
template <class T>
using Out = std::span<Array<T>* const>;

}  // namespace attngraph
