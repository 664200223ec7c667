// ArgMin: y = the position along `axis` of the smallest x (ONNX ArgMin, numpy.argmin,
// torch.argmin): the first where several tie, the last with select_last_index; a NaN counts as the
// extreme (numpy's). Attributes `axis` (default 0), `keepdims` (default 1), `select_last_index`
// (default 0), ONNX's. The positions are whole numbers in the graph's float type (int64 in
// ONNX); x gets no gradient. ops/reduce.hpp's ArgReduceOp does the work.
#pragma once
#include "ops/reduce.hpp"

namespace attngraph::ops {
struct ArgMinAttrs {
    int axis = 0;
    int keepdims = 1;
    int select_last_index = 0;
};
}  // namespace attngraph::ops
BOOST_HANA_ADAPT_STRUCT(attngraph::ops::ArgMinAttrs, axis, keepdims, select_last_index);

namespace attngraph::ops {

struct ArgMin : ArgReduceOp<ArgMinAttrs, false> {
    static constexpr const char* name = "ArgMin";
    using Attrs = ArgMinAttrs;
};

}  // namespace attngraph::ops
