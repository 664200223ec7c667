// The list of built-in ops: adding an op is its file in ops/ and one line here.
#include "engine/op.hpp"

namespace attngraph {

namespace ops {
#define ATTNGRAPH_OPS(X) X(linear) X(transpose) X(matmul) X(scale) X(softmax) X(concat) X(add) X(mask) X(slice) X(split) X(reshape) X(permute)
#define ATTNGRAPH_DECLARE(op) OpDef op##_op();
ATTNGRAPH_OPS(ATTNGRAPH_DECLARE)
#undef ATTNGRAPH_DECLARE
}  // namespace ops

void register_builtin_ops(OpRegistry& registry) {
#define ATTNGRAPH_REGISTER(op) registry.add(ops::op##_op());
    ATTNGRAPH_OPS(ATTNGRAPH_REGISTER)
#undef ATTNGRAPH_REGISTER
}

}  // namespace attngraph
