#pragma once
// The built-in op set, listed once (builtin_ops below), and the C++ builder functions.
//
// How to add an op `Foo` (see ops/scale.hpp for a small one, ops/split.hpp for several outputs):
//  1. Write ops/foo.hpp, header only: the legend comment, then
//       namespace attngraph::ops {
//       struct FooAttrs { Required<double> alpha; int axis = -1; };   // typed attributes
//       }
//       BOOST_HANA_ADAPT_STRUCT(attngraph::ops::FooAttrs, alpha, axis); // (empty: FooAttrs)
//       namespace attngraph::ops {
//       struct Foo {
//           static constexpr const char* name = "Foo";                // the name in graph files
//           static constexpr int min_inputs = 1, max_inputs = 1;      // max_inputs = -1: any number
//           using Attrs = FooAttrs;
//           static Shape infer_shape(const Attrs&, const std::vector<Shape>& in);  // or std::vector<Shape>
//           static std::string formula(const Attrs&, const std::vector<std::string>& operands);
//           template <class T> static void forward(const Attrs&, In<T> in, Out<T> out);
//           template <class T> static void backward(const Attrs&, In<T> in, In<T> out, In<T> dout, Out<T> din);
//       };
//       }
//     with every member defined inline in the struct (engine/op.hpp says what each must do).
//     Attribute members: a default initializer makes one optional in graph files,
//     Required<T> makes it mandatory, std::optional<T> may be absent (engine/attrs.hpp).
//     backward may be left out (the op then has no gradient).
//  2. Include ops/foo.hpp below and add `Foo` to builtin_ops. Nothing else: name lookup, JSON
//     attributes, shape inference, forward/backward dispatch, formulas all come from the list.
//  3. Optional: a C++ builder function (declared below, defined in ops/functions.cpp) and the
//     op's test, tests/test_op_foo.cpp (a Boost.Test suite test_op_foo: the op tests are one
//     program, docs/testing.md).
//
// Optional members (engine/op.hpp fills in a default when an op leaves one out): formula
// ("Foo(a, b)"), latex (explain's line), flops (bench's count, 0), backward (none).
//
// A composite op is defined by its expansion into other ops instead of infer_shape, forward
// and backward:
//       template <class E>
//       static typename E::Value expand(const Attrs& a, E& e, const std::vector<typename E::Value>& in) {
//           auto s = e.template node<MatMul>({in[0], in[1]}, {}, "S");   // node "<name>.S"
//           return e.template node<Softmax>({s}, {-1}, "A");             // node "<name>.A"
//       }
// Adding a composite node (GraphBuilder::node, or a graph file) adds the nodes of its
// expansion, named "<node name>.<part>"; the node name itself then stands for the returned
// value (other nodes and "outputs" may name it). Values have shapes (in[0].shape()) while
// expanding. The Graph holds only the expansion: every intermediate is traced and
// differentiated like any node, and a saved graph file lists the expanded nodes (loading it
// again gives the same graph). A composite has one output.
//
// User ops: a program may define op types of its own exactly like these (its own header,
// outside ops/) and add them to the op set with OpRegistry::instance().add<Foo>() or
// add_list(hana::tuple_t<Foo, Bar>): graph files, runs, traces, explain, backward and
// gradcheck then know them (tests/test_op_extension.cpp). The attngraph command-line program
// knows only the built-in ops: a graph file using a user op loads only in that program.
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <boost/hana.hpp>

#include "ops/abs.hpp"
#include "ops/add.hpp"
#include "ops/alibi.hpp"
#include "ops/arg_max.hpp"
#include "ops/arg_min.hpp"
#include "ops/attention_op.hpp"
#include "ops/ceil.hpp"
#include "ops/clip.hpp"
#include "ops/concat.hpp"
#include "ops/conv.hpp"
#include "ops/cos.hpp"
#include "ops/cumsum.hpp"
#include "ops/div.hpp"
#include "ops/equal.hpp"
#include "ops/erf.hpp"
#include "ops/exp.hpp"
#include "ops/expand.hpp"
#include "ops/floor.hpp"
#include "ops/gather.hpp"
#include "ops/gather_elements.hpp"
#include "ops/greater.hpp"
#include "ops/layer_normalization.hpp"
#include "ops/leaky_relu.hpp"
#include "ops/less.hpp"
#include "ops/linear.hpp"
#include "ops/log.hpp"
#include "ops/mask.hpp"
#include "ops/matmul.hpp"
#include "ops/max.hpp"
#include "ops/min.hpp"
#include "ops/mod.hpp"
#include "ops/mul.hpp"
#include "ops/neg.hpp"
#include "ops/permute.hpp"
#include "ops/pow.hpp"
#include "ops/range.hpp"
#include "ops/reduce_max.hpp"
#include "ops/reduce_mean.hpp"
#include "ops/reduce_sum.hpp"
#include "ops/relu.hpp"
#include "ops/reshape.hpp"
#include "ops/rms_normalization.hpp"
#include "ops/rotary_embedding.hpp"
#include "ops/round.hpp"
#include "ops/scale.hpp"
#include "ops/scatter_elements.hpp"
#include "ops/scatter_nd.hpp"
#include "ops/sigmoid.hpp"
#include "ops/sign.hpp"
#include "ops/sin.hpp"
#include "ops/slice.hpp"
#include "ops/softmax.hpp"
#include "ops/softplus.hpp"
#include "ops/split.hpp"
#include "ops/sqrt.hpp"
#include "ops/sub.hpp"
#include "ops/tanh.hpp"
#include "ops/top_k.hpp"
#include "ops/transpose.hpp"
#include "ops/where.hpp"

namespace attngraph::ops {

/// @brief Every built-in op, once. The order is the order `attngraph` lists ops in.
inline constexpr auto builtin_ops =
    boost::hana::tuple_t<Linear, Transpose, MatMul, Scale, Softmax, Concat, Add, Mask, Slice, Split, Reshape, Permute,
                         Alibi, Neg, Exp, Log, Tanh, Erf, Sqrt, Pow, Sin, Cos, Mul, Sub, Div, Where, Equal, Less,
                         Greater, ReduceSum, ReduceMean, ReduceMax, Expand, Gather, GatherElements, Range,
                         RMSNormalization, LayerNormalization, RotaryEmbedding, Attention, Relu, Sigmoid, Abs, Clip,
                         LeakyRelu, Softplus, Max, Min, Floor, Ceil, Round, Sign, Mod, CumSum, ScatterElements,
                         ScatterND, ArgMax, ArgMin, TopK, Conv>;

}  // namespace attngraph::ops

namespace attngraph {

class Value;         // engine/builder.hpp
class GraphBuilder;  // engine/builder.hpp

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
/// x with masked positions set to -inf: keys j > i + offset (causal); outside the window
/// |i - j| < w (or 0 <= i - j < w when causal); keys j >= lengths[b] of sequence b (padding,
/// batch axis 0); where `keep` (broadcast to x) is zero. mask_tensor: a mask `m` broadcast
/// to x, additive (x + m; -inf drops) or boolean (zero drops), and keys j > i + offset dropped
/// when `causal`.
/// offset `causal_from_end`: m - n at run time (the last query sees the last key).
inline constexpr int causal_from_end = -0x7fffffff;
Value mask_causal(const Value& x, int offset = 0);
Value mask_window(const Value& x, int window, bool causal = false);
Value mask_padding(const Value& x, std::vector<int> lengths);
Value mask(const Value& x, const Value& keep);
Value mask_tensor(const Value& x, const Value& m, bool additive, bool causal = false, int offset = 0);
/// ALiBi: x - slopes[h]·|i + offset - j| for x (..., h, n, m), slopes (h), computed at run time.
Value alibi(const Value& x, const Value& slopes, int offset = 0);
/// x[start:end] along `axis`.
Value slice(const Value& x, int axis, int start, int end);
/// `parts` equal pieces, or pieces of the listed `sizes`, along `axis`; the node is `name`.
std::vector<Value> split(const Value& x, int parts, int axis = -1, const std::string& name = "");
std::vector<Value> split(const Value& x, std::vector<int> sizes, int axis = -1, const std::string& name = "");
/// x's elements in a new shape; one entry may be -1. The first `keep_leading` and the last
/// `keep_trailing` axes of x are kept; `shape` gives the axes between them.
Value reshape(const Value& x, std::vector<int> shape, int keep_leading = 0, int keep_trailing = 0);
/// Axes permuted: y.shape[i] = x.shape[perm[i]].
Value permute(const Value& x, std::vector<int> perm);

// ---- elementwise (numpy broadcasting for the binary ones) ---------------------------------
// The C library's functions of the same names stay usable unqualified in this namespace:
using std::abs, std::ceil, std::cos, std::div, std::erf, std::exp, std::floor, std::log, std::pow, std::round, std::sin,
    std::sqrt, std::tanh;
/// -x, e^x, ln x, tanh x, erf x, √x, x^exponent, sin x, cos x.
Value neg(const Value& x);
Value exp(const Value& x);
Value log(const Value& x);
Value tanh(const Value& x);
Value erf(const Value& x);
Value sqrt(const Value& x);
Value pow(const Value& x, double exponent);
Value sin(const Value& x);
Value cos(const Value& x);
/// max(x, 0), 1 / (1 + e^-x).
Value relu(const Value& x);
Value sigmoid(const Value& x);
/// |x|; x clamped to [min, max] (an absent bound: none); x > 0 ? x : alpha·x; ln(1 + e^x).
Value abs(const Value& x);
Value clip(const Value& x, std::optional<double> min, std::optional<double> max);
Value leaky_relu(const Value& x, double alpha = 0.01);
Value softplus(const Value& x);
/// ⌊x⌋, ⌈x⌉, x to the nearest integer (halves to even, as numpy.round and torch.round), the
/// sign of x (0 at 0, NaN at NaN): step functions, no gradient.
Value floor(const Value& x);
Value ceil(const Value& x);
Value round(const Value& x);
Value sign(const Value& x);
/// max(a, b), min(a, b) (NaN if either is NaN).
Value maximum(const Value& a, const Value& b);
Value minimum(const Value& a, const Value& b);
/// The remainder of a / b: the sign of b (torch.remainder, numpy.mod), or of a when `fmod`
/// (the C library's fmod, torch.fmod).
Value mod(const Value& a, const Value& b, bool fmod = false);
/// a·b, a - b, a / b.
Value mul(const Value& a, const Value& b);
Value sub(const Value& a, const Value& b);
Value div(const Value& a, const Value& b);
/// a where cond is nonzero, else b.
Value where(const Value& cond, const Value& a, const Value& b);
/// 1 where a == b (a < b, a > b), else 0; no gradient.
Value equal(const Value& a, const Value& b);
Value less(const Value& a, const Value& b);
Value greater(const Value& a, const Value& b);

// ---- reductions, shape and index ops --------------------------------------------------------
/// Sum, mean, max of x over `axes` (empty: every axis); reduced axes stay as 1 with keepdims.
Value reduce_sum(const Value& x, std::vector<int> axes = {}, bool keepdims = true);
Value reduce_mean(const Value& x, std::vector<int> axes = {}, bool keepdims = true);
Value reduce_max(const Value& x, std::vector<int> axes = {}, bool keepdims = true);
/// Running sums of x along `axis` (exclusive: each leaves its own element out; reverse: from
/// the end).
Value cumsum(const Value& x, int axis, bool exclusive = false, bool reverse = false);
/// The position along `axis` of the largest (smallest) x: the first where several tie, the last
/// with select_last_index; a NaN counts as the extreme. No gradient.
Value argmax(const Value& x, int axis = 0, bool keepdims = true, bool select_last_index = false);
Value argmin(const Value& x, int axis = 0, bool keepdims = true, bool select_last_index = false);
/// The k largest (smallest) entries of x along `axis`, sorted, and their positions: {values,
/// positions} (equal values by position; NaN above every number). The positions get no gradient.
std::vector<Value> topk(const Value& x, int k, int axis = -1, bool largest = true, const std::string& name = "");
/// The convolution of x (N, C, D1..Dk), k = 1..3, with W (M, C/group, K1..Kk), plus b (M):
/// ONNX's Conv, torch's Conv1d/2d/3d. Attributes (ops/conv.hpp): strides and dilations one per
/// spatial axis (absent: 1), pads the begins then the ends (absent: 0), group (16x16 patches:
/// `ops::ConvAttrs a; a.strides = {16, 16}; conv(x, w, b, a)`).
Value conv(const Value& x, const Value& w, const ops::ConvAttrs& attrs = {});
Value conv(const Value& x, const Value& w, const Value& b, const ops::ConvAttrs& attrs = {});
/// x broadcast to `shape` (ONNX Expand: x's shape and `shape` broadcast together).
Value expand(const Value& x, std::vector<int> shape);
/// data taken along `axis` at `indices` (whole numbers, negative from the end; no gradient).
Value gather(const Value& data, const Value& indices, int axis = 0);
/// data read along `axis` element by element: y (indices' shape, data's rank) at a multi-index
/// is data there with the coordinate of `axis` replaced by the index (torch.gather; no gradient
/// for indices, repeated positions add their gradients).
Value gather_elements(const Value& data, const Value& indices, int axis = 0);
/// data with updates written where indices point (no gradient for indices; of two writes to one
/// position the later is kept): along `axis`, indices and updates of one shape (a KV cache
/// written at its positions); or slices data[t0, ..., tk-1] named by the tuples in indices' last axis.
/// `reduction` "add", "mul", "max" or "min" combines each write with what is there, in order
/// (scatter_add, scatter_reduce; gradients as torch's, ops/scatter_reduction.hpp).
Value scatter_elements(const Value& data, const Value& indices, const Value& updates, int axis = 0,
                       const std::string& reduction = "none");
Value scatter_nd(const Value& data, const Value& indices, const Value& updates, const std::string& reduction = "none");
/// [start, start + delta, ...) below `limit`: position indices as a tensor.
Value range(GraphBuilder& g, double limit);
Value range(GraphBuilder& g, double start, double limit, double delta = 1);

// ---- normalization and rotary embeddings ----------------------------------------------------
/// x / sqrt(mean(x², axes axis..) + epsilon) · scale.
Value rms_norm(const Value& x, const Value& scale, int axis = -1, double epsilon = 1e-5);
/// (x - mean) / sqrt(var + epsilon) · scale (+ bias) over axes axis.. (output Y only).
Value layer_norm(const Value& x, const Value& scale, int axis = -1, double epsilon = 1e-5);
Value layer_norm(const Value& x, const Value& scale, const Value& bias, int axis = -1, double epsilon = 1e-5);
/// RoPE (ONNX RotaryEmbedding): x (B, H, S, D), or (B, S, H·D) with num_heads; caches (P, R/2)
/// read at position_ids (B, S), or (B, S, R/2) without ids; R = rotary_embedding_dim (0: D).
Value rotary_embedding(const Value& x, const Value& cos_cache, const Value& sin_cache, bool interleaved = false,
                       int rotary_embedding_dim = 0, int num_heads = 0);
Value rotary_embedding(const Value& x, const Value& cos_cache, const Value& sin_cache, const Value& position_ids,
                       bool interleaved = false, int rotary_embedding_dim = 0, int num_heads = 0);

}  // namespace attngraph
