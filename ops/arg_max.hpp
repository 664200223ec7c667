// ArgMax: y = the position along `axis` of the largest x (ONNX ArgMax, numpy.argmax,
// torch.argmax): the first where several tie, the last with select_last_index; a NaN counts as the
// extreme (numpy's). Attributes `axis` (default 0), `keepdims` (default 1), `select_last_index`
// (default 0), ONNX's. The positions are whole numbers in the graph's float type (int64 in
// ONNX); x gets no gradient. ops/reduce.hpp's ArgReduceOp does the work.
#pragma once
#include "ops/reduce.hpp"

namespace attngraph::ops {
struct ArgMaxAttrs {
    int axis = 0;
    int keepdims = 1;
    int select_last_index = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ArgMaxAttrs, axis, keepdims, select_last_index);

namespace attngraph::ops {

struct ArgMax : ArgReduceOp<ArgMaxAttrs, true> {
    static constexpr const char* name = "ArgMax";
    using Attrs = ArgMaxAttrs;
};

}  // namespace attngraph::ops
