// The C++ builder functions declared in ops/ops.hpp: each adds one node to its value's graph.
#include "engine/builder.hpp"
#include "ops/ops.hpp"

namespace attngraph {

// ops/add.hpp
Value add(const Value& a, const Value& b) {
    return a.builder().node<ops::Add>({a, b}, ops::AddAttrs{});
}

// ops/alibi.hpp
Value alibi(const Value& x, const Value& slopes, int offset) {
    return x.builder().node<ops::Alibi>({x, slopes}, ops::AlibiAttrs{offset});
}

// ops/concat.hpp
Value concat(const std::vector<Value>& xs, int axis) {
    if (xs.empty()) throw GraphError("concat needs at least one input");
    return xs.front().builder().node<ops::Concat>(xs, ops::ConcatAttrs{axis});
}

// ops/linear.hpp
Value linear(const Value& x, const Value& w) {
    return x.builder().node<ops::Linear>({x, w}, ops::LinearAttrs{});
}
Value linear(const Value& x, const Value& w, const Value& b) {
    return x.builder().node<ops::Linear>({x, w, b}, ops::LinearAttrs{});
}

// ops/mask.hpp
Value mask_causal(const Value& x, int offset) {
    ops::MaskAttrs a;
    a.pattern = "causal";
    if (offset == causal_from_end)
        a.offset_from_end = true;
    else if (offset)
        a.offset = offset;
    return x.builder().node<ops::Mask>({x}, a);
}
Value mask_window(const Value& x, int window, bool causal) {
    return x.builder().node<ops::Mask>({x}, ops::MaskAttrs{"window", window, causal, {}, {}, {}, {}});
}
Value mask_padding(const Value& x, std::vector<int> lengths) {
    return x.builder().node<ops::Mask>({x}, ops::MaskAttrs{"padding", {}, {}, std::move(lengths), {}, {}, {}});
}
Value mask(const Value& x, const Value& keep) {
    return x.builder().node<ops::Mask>({x, keep}, ops::MaskAttrs{});
}
Value mask_tensor(const Value& x, const Value& m, bool additive, bool causal, int offset) {
    ops::MaskAttrs a;
    if (causal) a.pattern = "causal";
    if (causal && offset == causal_from_end)
        a.offset_from_end = true;
    else if (causal && offset)
        a.offset = offset;
    a.mask_type = additive ? "additive" : "boolean";
    return x.builder().node<ops::Mask>({x, m}, a);
}

// ops/matmul.hpp
Value matmul(const Value& a, const Value& b) {
    return a.builder().node<ops::MatMul>({a, b}, ops::MatMulAttrs{});
}

// ops/permute.hpp
Value permute(const Value& x, std::vector<int> perm) {
    return x.builder().node<ops::Permute>({x}, ops::PermuteAttrs{{std::move(perm)}});
}

// ops/reshape.hpp
Value reshape(const Value& x, std::vector<int> shape, int keep_leading, int keep_trailing) {
    return x.builder().node<ops::Reshape>({x}, ops::ReshapeAttrs{{std::move(shape)}, keep_leading, keep_trailing});
}

// ops/scale.hpp
Value scale(const Value& x, double factor) {
    return x.builder().node<ops::Scale>({x}, ops::ScaleAttrs{{factor}});
}

// ops/slice.hpp
Value slice(const Value& x, int axis, int start, int end) {
    return x.builder().node<ops::Slice>({x}, ops::SliceAttrs{axis, {start}, {end}});
}

// ops/softmax.hpp
Value softmax(const Value& x, int axis) {
    return x.builder().node<ops::Softmax>({x}, ops::SoftmaxAttrs{axis});
}

// ops/split.hpp
std::vector<Value> split(const Value& x, int parts, int axis, const std::string& name) {
    Value node = x.builder().node<ops::Split>({x}, ops::SplitAttrs{axis, parts, {}}, name);
    std::vector<Value> out;
    for (int k = 0; k < parts; ++k) out.push_back(node[k]);
    return out;
}
std::vector<Value> split(const Value& x, std::vector<int> sizes, int axis, const std::string& name) {
    const std::size_t n = sizes.size();
    Value node = x.builder().node<ops::Split>({x}, ops::SplitAttrs{axis, {}, std::move(sizes)}, name);
    std::vector<Value> out;
    for (std::size_t k = 0; k < n; ++k) out.push_back(node[static_cast<int>(k)]);
    return out;
}

// ops/transpose.hpp
Value transpose(const Value& x) {
    return x.builder().node<ops::Transpose>({x}, ops::TransposeAttrs{});
}
Value transpose(const Value& x, std::vector<int> perm) {
    return x.builder().node<ops::Transpose>({x}, ops::TransposeAttrs{std::move(perm)});
}

// ops/neg.hpp
Value neg(const Value& x) {
    return x.builder().node<ops::Neg>({x}, ops::NegAttrs{});
}

// ops/exp.hpp
Value exp(const Value& x) {
    return x.builder().node<ops::Exp>({x}, ops::ExpAttrs{});
}

// ops/log.hpp
Value log(const Value& x) {
    return x.builder().node<ops::Log>({x}, ops::LogAttrs{});
}

// ops/tanh.hpp
Value tanh(const Value& x) {
    return x.builder().node<ops::Tanh>({x}, ops::TanhAttrs{});
}

// ops/relu.hpp
Value relu(const Value& x) {
    return x.builder().node<ops::Relu>({x}, ops::ReluAttrs{});
}

// ops/sigmoid.hpp
Value sigmoid(const Value& x) {
    return x.builder().node<ops::Sigmoid>({x}, ops::SigmoidAttrs{});
}

// ops/abs.hpp
Value abs(const Value& x) {
    return x.builder().node<ops::Abs>({x}, ops::AbsAttrs{});
}

// ops/floor.hpp, ops/ceil.hpp, ops/round.hpp, ops/sign.hpp
Value floor(const Value& x) {
    return x.builder().node<ops::Floor>({x}, ops::FloorAttrs{});
}
Value ceil(const Value& x) {
    return x.builder().node<ops::Ceil>({x}, ops::CeilAttrs{});
}
Value round(const Value& x) {
    return x.builder().node<ops::Round>({x}, ops::RoundAttrs{});
}
Value sign(const Value& x) {
    return x.builder().node<ops::Sign>({x}, ops::SignAttrs{});
}

// ops/mod.hpp
Value mod(const Value& a, const Value& b, bool fmod) {
    return a.builder().node<ops::Mod>({a, b}, ops::ModAttrs{fmod});
}

// ops/clip.hpp
Value clip(const Value& x, std::optional<double> min, std::optional<double> max) {
    return x.builder().node<ops::Clip>({x}, ops::ClipAttrs{min, max});
}

// ops/leaky_relu.hpp
Value leaky_relu(const Value& x, double alpha) {
    return x.builder().node<ops::LeakyRelu>({x}, ops::LeakyReluAttrs{alpha});
}

// ops/softplus.hpp
Value softplus(const Value& x) {
    return x.builder().node<ops::Softplus>({x}, ops::SoftplusAttrs{});
}

// ops/max.hpp, ops/min.hpp
Value maximum(const Value& a, const Value& b) {
    return a.builder().node<ops::Max>({a, b}, ops::MaxAttrs{});
}
Value minimum(const Value& a, const Value& b) {
    return a.builder().node<ops::Min>({a, b}, ops::MinAttrs{});
}

// ops/erf.hpp
Value erf(const Value& x) {
    return x.builder().node<ops::Erf>({x}, ops::ErfAttrs{});
}

// ops/sqrt.hpp
Value sqrt(const Value& x) {
    return x.builder().node<ops::Sqrt>({x}, ops::SqrtAttrs{});
}

// ops/pow.hpp
Value pow(const Value& x, double exponent) {
    return x.builder().node<ops::Pow>({x}, ops::PowAttrs{exponent});
}

// ops/sin.hpp
Value sin(const Value& x) {
    return x.builder().node<ops::Sin>({x}, ops::SinAttrs{});
}

// ops/cos.hpp
Value cos(const Value& x) {
    return x.builder().node<ops::Cos>({x}, ops::CosAttrs{});
}

// ops/mul.hpp
Value mul(const Value& a, const Value& b) {
    return a.builder().node<ops::Mul>({a, b}, ops::MulAttrs{});
}

// ops/sub.hpp
Value sub(const Value& a, const Value& b) {
    return a.builder().node<ops::Sub>({a, b}, ops::SubAttrs{});
}

// ops/div.hpp
Value div(const Value& a, const Value& b) {
    return a.builder().node<ops::Div>({a, b}, ops::DivAttrs{});
}

// ops/where.hpp
Value where(const Value& cond, const Value& a, const Value& b) {
    return a.builder().node<ops::Where>({cond, a, b}, ops::WhereAttrs{});
}

// ops/equal.hpp
Value equal(const Value& a, const Value& b) {
    return a.builder().node<ops::Equal>({a, b}, ops::EqualAttrs{});
}

// ops/less.hpp
Value less(const Value& a, const Value& b) {
    return a.builder().node<ops::Less>({a, b}, ops::LessAttrs{});
}

// ops/greater.hpp
Value greater(const Value& a, const Value& b) {
    return a.builder().node<ops::Greater>({a, b}, ops::GreaterAttrs{});
}

// ops/reduce_sum.hpp
Value reduce_sum(const Value& x, std::vector<int> axes, bool keepdims) {
    return x.builder().node<ops::ReduceSum>({x}, ops::ReduceSumAttrs{std::move(axes), keepdims ? 1 : 0, 0});
}

// ops/reduce_mean.hpp
Value reduce_mean(const Value& x, std::vector<int> axes, bool keepdims) {
    return x.builder().node<ops::ReduceMean>({x}, ops::ReduceMeanAttrs{std::move(axes), keepdims ? 1 : 0, 0});
}

// ops/reduce_max.hpp
Value reduce_max(const Value& x, std::vector<int> axes, bool keepdims) {
    return x.builder().node<ops::ReduceMax>({x}, ops::ReduceMaxAttrs{std::move(axes), keepdims ? 1 : 0, 0});
}

// ops/cumsum.hpp
Value cumsum(const Value& x, int axis, bool exclusive, bool reverse) {
    return x.builder().node<ops::CumSum>({x}, ops::CumSumAttrs{axis, exclusive, reverse});
}

// ops/scatter_elements.hpp, ops/scatter_nd.hpp
Value scatter_elements(const Value& data, const Value& indices, const Value& updates, int axis,
                       const std::string& reduction) {
    return data.builder().node<ops::ScatterElements>({data, indices, updates},
                                                     ops::ScatterElementsAttrs{axis, reduction});
}
Value scatter_nd(const Value& data, const Value& indices, const Value& updates, const std::string& reduction) {
    return data.builder().node<ops::ScatterND>({data, indices, updates}, ops::ScatterNDAttrs{reduction});
}

// ops/arg_max.hpp, ops/arg_min.hpp
Value argmax(const Value& x, int axis, bool keepdims, bool select_last_index) {
    return x.builder().node<ops::ArgMax>({x}, ops::ArgMaxAttrs{axis, keepdims ? 1 : 0, select_last_index ? 1 : 0});
}
Value argmin(const Value& x, int axis, bool keepdims, bool select_last_index) {
    return x.builder().node<ops::ArgMin>({x}, ops::ArgMinAttrs{axis, keepdims ? 1 : 0, select_last_index ? 1 : 0});
}

// ops/top_k.hpp
std::vector<Value> topk(const Value& x, int k, int axis, bool largest, const std::string& name) {
    Value node = x.builder().node<ops::TopK>({x}, ops::TopKAttrs{{k}, axis, largest ? 1 : 0, 1}, name);
    return {node[0], node[1]};
}

// ops/expand.hpp
Value expand(const Value& x, std::vector<int> shape) {
    return x.builder().node<ops::Expand>({x}, ops::ExpandAttrs{{std::move(shape)}});
}

// ops/gather.hpp
Value gather(const Value& data, const Value& indices, int axis) {
    return data.builder().node<ops::Gather>({data, indices}, ops::GatherAttrs{axis});
}

// ops/gather_elements.hpp
Value gather_elements(const Value& data, const Value& indices, int axis) {
    return data.builder().node<ops::GatherElements>({data, indices}, ops::GatherElementsAttrs{axis});
}

// ops/range.hpp
Value range(GraphBuilder& g, double limit) {
    return g.node<ops::Range>({}, ops::RangeAttrs{0, {limit}, 1});
}
Value range(GraphBuilder& g, double start, double limit, double delta) {
    return g.node<ops::Range>({}, ops::RangeAttrs{start, {limit}, delta});
}

// ops/rms_normalization.hpp
Value rms_norm(const Value& x, const Value& scale, int axis, double epsilon) {
    return x.builder().node<ops::RMSNormalization>({x, scale}, ops::RMSNormalizationAttrs{axis, epsilon, 1});
}

// ops/layer_normalization.hpp
Value layer_norm(const Value& x, const Value& scale, int axis, double epsilon) {
    return x.builder().node<ops::LayerNormalization>({x, scale}, ops::LayerNormalizationAttrs{axis, epsilon, 1, 0});
}
Value layer_norm(const Value& x, const Value& scale, const Value& bias, int axis, double epsilon) {
    return x.builder().node<ops::LayerNormalization>({x, scale, bias},
                                                     ops::LayerNormalizationAttrs{axis, epsilon, 1, 0});
}

// ops/rotary_embedding.hpp
Value rotary_embedding(const Value& x, const Value& cos_cache, const Value& sin_cache, bool interleaved,
                       int rotary_embedding_dim, int num_heads) {
    return x.builder().node<ops::RotaryEmbedding>(
        {x, cos_cache, sin_cache}, ops::RotaryEmbeddingAttrs{interleaved ? 1 : 0, rotary_embedding_dim, num_heads});
}
Value rotary_embedding(const Value& x, const Value& cos_cache, const Value& sin_cache, const Value& position_ids,
                       bool interleaved, int rotary_embedding_dim, int num_heads) {
    return x.builder().node<ops::RotaryEmbedding>(
        {x, cos_cache, sin_cache, position_ids},
        ops::RotaryEmbeddingAttrs{interleaved ? 1 : 0, rotary_embedding_dim, num_heads});
}

// ops/conv.hpp
Value conv(const Value& x, const Value& w, const ops::ConvAttrs& attrs) {
    return x.builder().node<ops::Conv>({x, w}, attrs);
}
Value conv(const Value& x, const Value& w, const Value& b, const ops::ConvAttrs& attrs) {
    return x.builder().node<ops::Conv>({x, w, b}, attrs);
}

}  // namespace attngraph
