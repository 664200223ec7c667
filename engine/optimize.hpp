#pragma once
// The run plan: which steps the executor runs for a graph, given which values the run keeps
// (traced values and outputs). A node whose output nobody will see can be folded into the
// node that reads it, so that the value is never materialised:
//
//   attention       O = softmax(chain(Q·Kᵀ))·V: one kernel over blocks of gemm_row_block query
//                   rows that computes the scores, the chain between them and the softmax
//                   (Scale, Tanh, Alibi, Mask, Add, Reshapes of the matrices' batch axes) and
//                   O for a block while it is in cache, over only the keys the block's masks
//                   leave it (engine/fused_attention.hpp). Unseen intermediates live in one
//                   scratch block (never the n×m matrix); seen ones are written block by
//                   block; an unseen KT is never made (the GEMM reads K transposed). K and V
//                   may be shared across query heads (their batch axes broadcast to Q's: MQA,
//                   GQA, also through the composite's (B, G, 1, m, d) Reshapes). gpt-oss's
//                   sinks fold too: A = softmax([S | sink column])[..., :m] (SinkColumn), and
//                   the Differential Transformer's O = (A_1 - lambda·A_2)·V (DiffPair).
//   matmul_tb       MatMul(a, Transpose(b)) with the transpose unseen: the GEMM reads b
//                   transposed instead of a copy.
//   scaled_softmax  Softmax(Scale(x)) along the last axis with the scaled values unseen: one
//                   pass instead of two.
//   linear_group    Linear nodes reading the same x with weights given as tensors (the heads'
//                   Q, K, V projections): one wide GEMM x·[W1 | W2 | ...], each node's
//                   output copied out of it with its bias added. Every output is still
//                   materialised, so this one applies to traced runs too.
//   layout          a chain of Reshape, Permute and Transpose nodes with its values in
//                   between unseen, perhaps from an output of a Split whose outputs all start
//                   such chains (the batched heads' Q, K and V out of one QKV projection, O back
//                   into rows): one strided copy out of the chain's source instead of a copy
//                   per node.
//
// Every rewrite runs the same GEMM row blocks and the same softmax kernel as the nodes it
// replaces, so an optimised run gives the plain run's numbers (a transposed GEMM operand may
// change OpenBLAS's rounding in the last bit) and remains bit-identical for any thread count
// (a layout step moves values without arithmetic).
#include <memory>
#include <string>
#include <vector>

#include "engine/fused_attention.hpp"
#include "engine/graph.hpp"

namespace attngraph {

enum class StepKind { node, matmul_tb, scaled_softmax, attention, linear_group, layout };

/// @brief Where a layout step finds its output's elements: element i in row-major order over
/// `shape` is the source's element offset + Σ_a index_a·strides[a] (in elements).
struct StridedView {
    Shape shape;
    std::vector<std::size_t> strides;
    std::size_t offset = 0;
};

/// @brief One unit of work of a run: a node, or several nodes fused.
struct Step {
    StepKind kind = StepKind::node;
    int node = -1;             ///< the node whose outputs the step writes (the last one it covers)
    std::vector<int> folded;   ///< nodes folded into this step (not run on their own)
    std::vector<int> inputs;   ///< value ids read
    std::vector<int> outputs;  ///< value ids written
    std::vector<int> nodes;    ///< linear_group: the nodes computed together (`node` is the first)
    double factor = 1.0;       ///< a Scale factor folded in
    bool scaled = false;       ///< whether `factor` applies
    std::shared_ptr<const AttentionSpec> attention;  ///< attention: the chain and the kept values (outputs 1, 2, ...)
    std::size_t member_inputs = 0;  ///< linear_group: inputs per node after the shared x (W, or W and b)
    std::shared_ptr<const StridedView> view;  ///< layout: the output's elements in the input (inputs[0])
};

/// @brief The steps of a run, in an order where every step follows the producers of its inputs.
struct Plan {
    std::vector<Step> steps;
    /// "attention(head1.O <- head1.KT, head1.S_raw, head1.S, head1.A)", one line per fused step.
    std::string describe(const Graph& graph) const;
};

/// @brief The plan for `graph` when the values with keep[id] are kept (seen by the caller).
/// optimize = false gives one step per node.
Plan make_plan(const Graph& graph, const std::vector<bool>& keep, bool optimize = true);

/// @brief Runs one step: in holds the step's inputs, out its outputs, already shaped.
template <class T>
void run_step(const Graph& graph, const Step& step, In<T> in, Out<T> out);

// ---- the fused kernels on their own (engine/expr.hpp selects them by expression type) ----

/// @brief c = a·bᵀ over the last two axes, batched with broadcasting: a (..., m, k),
/// b (..., n, k), c (batch..., m, n) already shaped.
template <class T>
void fused_matmul_tb(const Array<T>& a, const Array<T>& b, Array<T>& c);
/// @brief y = softmax(factor · x) along the last axis, factor · x rounded as the Scale op does.
template <class T>
void fused_scaled_softmax(const Array<T>& x, Array<T>& y, T factor);
/// @brief o = softmax(factor · q·kᵀ)·v (factor only when `scaled`), by blocks of query rows:
/// q (..., n, dk), k (..., m, dk), v (..., m, dv), their batch axes broadcasting to q's;
/// o (batch of q..., n, dv) already shaped.
template <class T>
void fused_attention(const Array<T>& q, const Array<T>& k, const Array<T>& v, Array<T>& o, T factor, bool scaled);

}  // namespace attngraph
