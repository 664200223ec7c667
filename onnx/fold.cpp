#include "onnx/fold.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "engine/error.hpp"
#include "ops/cos.hpp"
#include "ops/exp.hpp"
#include "ops/log.hpp"
#include "ops/scatter_reduction.hpp"
#include "ops/sin.hpp"
#include "ops/sqrt.hpp"
#include "ops/tanh.hpp"

namespace attngraph::onnx_fold {

using TP = onnx::TensorProto;
using I64 = std::vector<std::int64_t>;

std::size_t count_of(const I64& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

std::size_t count_capped(const I64& shape) {
    std::size_t n = 1;
    for (auto d : shape)
        if (d == 0) return 0;
    for (auto d : shape) {
        const auto u = static_cast<std::size_t>(d);
        if (d < 0 || n > SIZE_MAX / u) return SIZE_MAX;
        n *= u;
    }
    return n;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
    for (const auto& a : node.attribute())
        if (a.name() == name) return &a;
    return nullptr;
}
std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
    const auto* a = find_attr(node, name);
    return a ? a->i() : fallback;
}
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback) {
    const auto* a = find_attr(node, name);
    return a ? a->f() : fallback;
}
I64 attr_ints(const onnx::NodeProto& node, const std::string& name) {
    const auto* a = find_attr(node, name);
    return a ? I64(a->ints().begin(), a->ints().end()) : I64{};
}

static bool is_float(int t) {
    return t == TP::FLOAT || t == TP::DOUBLE || t == TP::FLOAT16 || t == TP::BFLOAT16;
}

void round_to_type(OnnxTensor& t) {
    if (t.elem_type == TP::FLOAT || t.elem_type == TP::FLOAT16 || t.elem_type == TP::BFLOAT16) {
        for (auto& v : t.values) v = static_cast<double>(static_cast<float>(v));
    } else if (t.elem_type == TP::BOOL) {
        for (auto& v : t.values) v = v != 0 ? 1.0 : 0.0;
    } else if (!is_float(t.elem_type)) {
        for (auto& v : t.values) v = std::isfinite(v) ? std::trunc(v) : 0.0;
    }
}

I64 broadcast_shapes(const I64& a, const I64& b, const std::string& where) {
    const std::size_t n = std::max(a.size(), b.size());
    I64 out(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
        const std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
        if (x != y && x != 1 && y != 1) {
            auto text = [](const I64& s) {
                std::string r;
                for (std::size_t k = 0; k < s.size(); ++k) {
                    if (k) r += 'x';
                    r += std::to_string(s[k]);
                }
                return r.empty() ? std::string("()") : r;
            };
            throw ShapeError(where + ": shapes (" + text(a) + ") and (" + text(b) + ") do not broadcast");
        }
        out[i] = x == 1 ? y : x;
    }
    return out;
}

std::vector<double> broadcast_to(const OnnxTensor& t, const I64& shape) {
    const std::size_t n = count_of(shape), rank = shape.size(), off = rank - t.shape.size();
    std::vector<std::size_t> stride(rank, 0);
    std::size_t s = 1;
    for (std::size_t i = t.shape.size(); i-- > 0;) {
        stride[i + off] = t.shape[i] == 1 ? 0 : s;
        s *= static_cast<std::size_t>(t.shape[i]);
    }
    std::vector<double> out(n);
    std::vector<std::size_t> idx(rank, 0);
    for (std::size_t k = 0; k < n; ++k) {
        std::size_t src = 0;
        for (std::size_t i = 0; i < rank; ++i) src += idx[i] * stride[i];
        out[k] = t.values[src];
        for (std::size_t i = rank; i-- > 0;) {
            if (++idx[i] < static_cast<std::size_t>(shape[i])) break;
            idx[i] = 0;
        }
    }
    return out;
}

namespace {

OnnxTensor make(int type, I64 shape, std::vector<double> values) {
    OnnxTensor t{type, std::move(shape), std::move(values)};
    round_to_type(t);
    return t;
}

std::int64_t norm_axis(std::int64_t axis, std::size_t rank, const std::string& where) {
    const auto r = static_cast<std::int64_t>(rank);
    if (axis < -r || axis >= r)
        throw ShapeError(where + ": axis " + std::to_string(axis) + " is out of range for rank " +
                         std::to_string(rank));
    return axis < 0 ? axis + r : axis;
}

// "2x6x4x4", as shape_str writes an attngraph shape
std::string shape_text(const I64& shape) {
    std::string text;
    for (std::size_t k = 0; k < shape.size(); ++k) {
        if (k) text += 'x';
        text += std::to_string(shape[k]);
    }
    return text;
}

I64 ints_of(const OnnxTensor& t, const std::string& where) {
    I64 out;
    for (double v : t.values) {
        if (std::isnan(v)) throw ShapeError(where + ": a NaN where an integer is expected");
        if (v >= 9.2e18)
            out.push_back(std::numeric_limits<std::int64_t>::max());
        else if (v <= -9.2e18)
            out.push_back(std::numeric_limits<std::int64_t>::min());
        else
            out.push_back(static_cast<std::int64_t>(v));
    }
    return out;
}

OnnxTensor binary(const OnnxTensor& a, const OnnxTensor& b, int out_type,
                  const std::function<double(double, double)>& f, const std::string& where) {
    const I64 s = broadcast_shapes(a.shape, b.shape, where);
    const auto x = broadcast_to(a, s), y = broadcast_to(b, s);
    std::vector<double> v(x.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = f(x[i], y[i]);
    return make(out_type, s, std::move(v));
}

OnnxTensor unary(const OnnxTensor& a, const std::function<double(double)>& f) {
    std::vector<double> v(a.values.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = f(a.values[i]);
    return make(a.elem_type, a.shape, std::move(v));
}

// A unary op of attngraph's op set, folded by that op's own kernel in the tensor's float type
// (float and double; other types as `f` in double): a folded constant has the bits the op
// computes when the graph runs, so a graph exported and imported again computes the same
// bits whether its constants are folded or not.
template <class Op>
OnnxTensor unary_op(const OnnxTensor& a, const std::function<double(double)>& f) {
    auto run = [&]<class T>(T) {
        const std::size_t n = a.values.size();
        Array<T> x = Array<T>::from_shape({n}), y = Array<T>::from_shape({n});
        std::transform(a.values.begin(), a.values.end(), x.data(), [](double v) { return static_cast<T>(v); });
        const Array<T>* in[] = {&x};
        Array<T>* out[] = {&y};
        Op::template forward<T>(typename Op::Attrs{}, In<T>(in, 1), Out<T>(out, 1));
        return make(a.elem_type, a.shape, std::vector<double>(y.begin(), y.end()));
    };
    if (a.elem_type == TP::FLOAT) return run(float{});
    if (a.elem_type == TP::DOUBLE) return run(double{});
    return unary(a, f);
}

// Row-major strides of a shape.
std::vector<std::size_t> strides_of(const I64& s) {
    std::vector<std::size_t> st(s.size(), 1);
    for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * static_cast<std::size_t>(s[i]);
    return st;
}

OnnxTensor transpose(const OnnxTensor& x, I64 perm, const std::string& where) {
    const std::size_t r = x.shape.size();
    if (perm.empty())
        for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(r - 1 - i));
    if (perm.size() != r)
        throw ShapeError(where + ": perm has " + std::to_string(perm.size()) + " axes for rank " + std::to_string(r));
    I64 shape(r);
    std::vector<bool> seen(r, false);  // a permutation names each axis once (a repeat read past the data)
    for (std::size_t i = 0; i < r; ++i) {
        const auto a = static_cast<std::size_t>(norm_axis(perm[i], r, where));
        if (seen[a]) throw ShapeError(where + ": perm repeats axis " + std::to_string(a));
        seen[a] = true;
        shape[i] = x.shape[a];
    }
    const auto in_st = strides_of(x.shape);
    std::vector<double> v(x.values.size());
    std::vector<std::size_t> idx(r, 0);
    for (std::size_t k = 0; k < v.size(); ++k) {
        std::size_t src = 0;
        for (std::size_t i = 0; i < r; ++i)
            src += idx[i] * in_st[static_cast<std::size_t>(norm_axis(perm[i], r, where))];
        v[k] = x.values[src];
        for (std::size_t i = r; i-- > 0;) {
            if (++idx[i] < static_cast<std::size_t>(shape[i])) break;
            idx[i] = 0;
        }
    }
    return {x.elem_type, shape, v};
}

}  // namespace

bool foldable(const std::string& op) {
    static const std::set<std::string> ops = {"Identity",
                                              "Constant",
                                              "Gather",
                                              "Unsqueeze",
                                              "Squeeze",
                                              "Concat",
                                              "ConstantOfShape",
                                              "Equal",
                                              "Less",
                                              "Greater",
                                              "LessOrEqual",
                                              "GreaterOrEqual",
                                              "Not",
                                              "And",
                                              "Or",
                                              "Xor",
                                              "Where",
                                              "Expand",
                                              "Cast",
                                              "CastLike",
                                              "Range",
                                              "Add",
                                              "Sub",
                                              "Mul",
                                              "Div",
                                              "Neg",
                                              "Sqrt",
                                              "Pow",
                                              "Exp",
                                              "Log",
                                              "Abs",
                                              "Floor",
                                              "Ceil",
                                              "Reciprocal",
                                              "Min",
                                              "Max",
                                              "Mod",
                                              "Reshape",
                                              "Slice",
                                              "Split",
                                              "Transpose",
                                              "Flatten",
                                              "Tanh",
                                              "Erf",
                                              "Sin",
                                              "Cos",
                                              "Dropout",
                                              "ReduceProd",
                                              "ReduceSum",
                                              "ReduceMax",
                                              "ReduceMin",
                                              "ReduceMean",
                                              "ReduceL1",
                                              "ReduceL2",
                                              "ReduceSumSquare",
                                              "CumSum",
                                              "Trilu",
                                              "Sign",
                                              "Round",
                                              "ScatterElements",
                                              "ScatterND",
                                              "IsInf",
                                              "IsNaN"};
    return ops.count(op) > 0;
}

std::vector<OnnxTensor> fold(const onnx::NodeProto& node, const std::vector<const OnnxTensor*>& in, std::int64_t opset,
                             const std::string& where, std::size_t max_elements) {
    const std::string& op = node.op_type();
    // an output that grows (ConstantOfShape, Expand, broadcasting, Gather, Concat, Range) is
    // checked from its shape before it is allocated: values are held as double here
    const std::size_t max_count = max_elements ? max_elements : (std::size_t(1) << 40);
    auto check_size = [&](const I64& shape) {
        const std::size_t n = count_capped(shape);
        if (n <= max_count) return;
        std::string text;
        for (std::size_t k = 0; k < shape.size(); ++k) {
            if (k) text += 'x';
            text += std::to_string(shape[k]);
        }
        throw ShapeError(where + ": output '" + (node.output_size() ? node.output(0) : std::string()) + "' of shape (" +
                         text + ") has " + (n == SIZE_MAX ? "too many" : std::to_string(n)) +
                         " elements, over the limit of " + std::to_string(max_count) +
                         (max_elements ? " (--max-memory)" : ""));
    };
    auto arg = [&](std::size_t i) -> const OnnxTensor& {
        if (i >= in.size() || !in[i]) throw GraphError(where + ": input " + std::to_string(i) + " is missing");
        return *in[i];
    };
    auto has = [&](std::size_t i) { return i < in.size() && in[i]; };
    const auto bool_type = TP::BOOL;

    if (op == "Identity" || op == "Dropout") return {arg(0)};
    if (op == "Constant") {
        OnnxTensor t;
        if (const auto* a = find_attr(node, "value_float"))
            t = {TP::FLOAT, {}, {a->f()}};
        else if (const auto* a2 = find_attr(node, "value_floats"))
            t = {TP::FLOAT, {a2->floats_size()}, {a2->floats().begin(), a2->floats().end()}};
        else if (const auto* a3 = find_attr(node, "value_int"))
            t = {TP::INT64, {}, {double(a3->i())}};
        else if (const auto* a4 = find_attr(node, "value_ints")) {
            t = {TP::INT64, {a4->ints_size()}, {}};
            for (auto v : a4->ints()) t.values.push_back(double(v));
        } else
            throw GraphError(where + ": Constant without a value (sparse and string constants are not supported)");
        round_to_type(t);
        return {t};
    }
    if (op == "Cast" || op == "CastLike") {
        const int to = op == "Cast" ? static_cast<int>(attr_int(node, "to", TP::FLOAT)) : arg(1).elem_type;
        OnnxTensor t = arg(0);
        if (is_float(t.elem_type) && !is_float(to) && to != bool_type)
            for (auto& v : t.values) v = std::trunc(v);
        t.elem_type = to;
        round_to_type(t);
        return {t};
    }
    if (op == "Gather") {
        const auto& x = arg(0);
        const auto& idx = arg(1);
        if (x.shape.empty()) throw ShapeError(where + ": cannot gather from a scalar");
        const auto axis = static_cast<std::size_t>(norm_axis(attr_int(node, "axis", 0), x.shape.size(), where));
        I64 shape(x.shape.begin(), x.shape.begin() + static_cast<long>(axis));
        shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
        shape.insert(shape.end(), x.shape.begin() + static_cast<long>(axis) + 1, x.shape.end());
        check_size(shape);
        std::size_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < axis; ++i) outer *= static_cast<std::size_t>(x.shape[i]);
        for (std::size_t i = axis + 1; i < x.shape.size(); ++i) inner *= static_cast<std::size_t>(x.shape[i]);
        const auto len = x.shape[axis];
        std::vector<double> v;
        for (std::size_t o = 0; o < outer; ++o)
            for (double jd : idx.values) {
                if (!(std::fabs(jd) < 9.2e18))  // NaN or beyond int64: out of range, without UB
                    throw ShapeError(where + ": index " + std::to_string(jd) + " is out of range for axis of length " +
                                     std::to_string(len));
                auto j = static_cast<std::int64_t>(jd);
                if (j < 0) j += len;
                if (j < 0 || j >= len)
                    throw ShapeError(where + ": index " + std::to_string(static_cast<std::int64_t>(jd)) +
                                     " is out of range for axis of length " + std::to_string(len));
                for (std::size_t k = 0; k < inner; ++k)
                    v.push_back(
                        x.values[(o * static_cast<std::size_t>(len) + static_cast<std::size_t>(j)) * inner + k]);
            }
        return {{x.elem_type, shape, v}};
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
        const auto& x = arg(0);
        const I64 axes = has(1) ? ints_of(arg(1), where) : attr_ints(node, "axes");
        I64 shape;
        if (op == "Unsqueeze") {
            const std::size_t r = x.shape.size() + axes.size();
            std::set<std::int64_t> at;
            for (auto a : axes) at.insert(norm_axis(a, r, where));
            if (at.size() != axes.size()) throw ShapeError(where + ": repeated axis");
            std::size_t k = 0;
            for (std::size_t i = 0; i < r; ++i)
                shape.push_back(at.count(static_cast<std::int64_t>(i)) ? 1 : x.shape[k++]);
        } else {
            std::set<std::int64_t> at;
            for (auto a : axes) at.insert(norm_axis(a, x.shape.size(), where));
            for (std::size_t i = 0; i < x.shape.size(); ++i) {
                const bool drop = axes.empty() ? x.shape[i] == 1 : at.count(static_cast<std::int64_t>(i)) > 0;
                if (drop && x.shape[i] != 1)
                    throw ShapeError(where + ": cannot squeeze an axis of length " + std::to_string(x.shape[i]));
                if (!drop) shape.push_back(x.shape[i]);
            }
        }
        return {{x.elem_type, shape, x.values}};
    }
    if (op == "Flatten") {
        const auto& x = arg(0);
        const auto axis = norm_axis(attr_int(node, "axis", 1), x.shape.size() + 1, where);
        std::int64_t a = 1, b = 1;
        for (std::size_t i = 0; i < x.shape.size(); ++i) (static_cast<std::int64_t>(i) < axis ? a : b) *= x.shape[i];
        return {{x.elem_type, {a, b}, x.values}};
    }
    if (op == "Concat") {
        const auto& first = arg(0);
        const auto axis = static_cast<std::size_t>(norm_axis(attr_int(node, "axis", 0), first.shape.size(), where));
        I64 shape = first.shape;
        shape[axis] = 0;
        for (std::size_t i = 0; i < in.size(); ++i) {
            const auto& t = arg(i);
            if (t.shape.size() != first.shape.size()) throw ShapeError(where + ": inputs of different ranks");
            for (std::size_t k = 0; k < shape.size(); ++k)
                if (k != axis && t.shape[k] != first.shape[k])
                    throw ShapeError(where + ": input shapes disagree off the axis");
            shape[axis] += t.shape[axis];
        }
        check_size(shape);
        std::size_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < axis; ++i) outer *= static_cast<std::size_t>(shape[i]);
        for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= static_cast<std::size_t>(shape[i]);
        std::vector<double> v;
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < in.size(); ++i) {
                const std::size_t n = static_cast<std::size_t>(arg(i).shape[axis]) * inner;
                v.insert(v.end(), arg(i).values.begin() + static_cast<long>(o * n),
                         arg(i).values.begin() + static_cast<long>((o + 1) * n));
            }
        return {make(first.elem_type, shape, v)};
    }
    if (op == "ConstantOfShape") {
        const I64 shape = ints_of(arg(0), where);
        for (auto d : shape)
            if (d < 0) throw ShapeError(where + ": negative dimension " + std::to_string(d));
        check_size(shape);
        OnnxTensor fill{TP::FLOAT, {}, {0.0}};
        if (const auto* a = find_attr(node, "value")) {
            fill.elem_type = a->t().data_type();
            if (a->t().has_raw_data() || a->t().float_data_size() || a->t().int64_data_size() ||
                a->t().int32_data_size() || a->t().double_data_size()) {
                // read through the importer's reader rules: one value
                const auto& t = a->t();
                if (t.float_data_size())
                    fill.values = {t.float_data(0)};
                else if (t.int64_data_size())
                    fill.values = {double(t.int64_data(0))};
                else if (t.int32_data_size())
                    fill.values = {double(t.int32_data(0))};
                else if (t.double_data_size())
                    fill.values = {t.double_data(0)};
                else {
                    const std::string& raw = t.raw_data();
                    if (fill.elem_type == TP::FLOAT && raw.size() >= 4) {
                        float f;
                        std::memcpy(&f, raw.data(), 4);
                        fill.values = {f};
                    } else if (fill.elem_type == TP::INT64 && raw.size() >= 8) {
                        std::int64_t i;
                        std::memcpy(&i, raw.data(), 8);
                        fill.values = {double(i)};
                    } else if (fill.elem_type == TP::INT32 && raw.size() >= 4) {
                        std::int32_t i;
                        std::memcpy(&i, raw.data(), 4);
                        fill.values = {double(i)};
                    } else if (fill.elem_type == TP::DOUBLE && raw.size() >= 8) {
                        double d;
                        std::memcpy(&d, raw.data(), 8);
                        fill.values = {d};
                    } else if ((fill.elem_type == TP::BOOL || fill.elem_type == TP::UINT8 ||
                                fill.elem_type == TP::INT8) &&
                               !raw.empty()) {
                        fill.values = {double(fill.elem_type == TP::INT8 ? double(static_cast<std::int8_t>(raw[0]))
                                                                         : double(static_cast<unsigned char>(raw[0])))};
                    } else {
                        throw GraphError(where + ": ConstantOfShape value of this type is not supported");
                    }
                }
            }
        }
        return {make(fill.elem_type, shape, std::vector<double>(count_of(shape), fill.values.at(0)))};
    }
    if (op == "Range") {
        const double start = arg(0).values.at(0), limit = arg(1).values.at(0), delta = arg(2).values.at(0);
        if (delta == 0) throw ShapeError(where + ": Range with delta 0");
        const double n = std::max(0.0, std::ceil((limit - start) / delta));
        if (n > 1e8) throw ShapeError(where + ": Range of " + std::to_string(n) + " elements is too large");
        check_size({static_cast<std::int64_t>(n)});
        std::vector<double> v;
        for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
            v.push_back(start + static_cast<double>(i) * delta);
        return {make(arg(0).elem_type, {static_cast<std::int64_t>(v.size())}, v)};
    }
    if (op == "Reshape") {
        const auto& x = arg(0);
        I64 shape = ints_of(arg(1), where);
        const bool allowzero = attr_int(node, "allowzero", 0) != 0;
        std::int64_t known = 1;
        int minus = -1;
        for (std::size_t i = 0; i < shape.size(); ++i) {
            if (shape[i] == 0 && !allowzero) {
                if (i >= x.shape.size())
                    throw ShapeError(where + ": 0 in shape at axis " + std::to_string(i) + " beyond the input's rank");
                shape[i] = x.shape[i];
            }
            if (shape[i] == -1) {
                if (minus >= 0) throw ShapeError(where + ": two -1 in the shape");
                minus = static_cast<int>(i);
            } else if (shape[i] < 0) {
                throw ShapeError(where + ": negative size in the shape");
            } else {
                // a product past int64 is far more than any input's element count
                if (shape[i] && known > std::numeric_limits<std::int64_t>::max() / shape[i])
                    throw ShapeError(where + ": a reshape to (" + shape_text(shape) +
                                     ") has more elements than int64 counts; the input has " +
                                     std::to_string(x.values.size()));
                known *= shape[i];
            }
        }
        const auto total = static_cast<std::int64_t>(x.values.size());
        if (minus >= 0) {
            if (known == 0 || total % known)
                throw ShapeError(where + ": cannot infer -1 for " + std::to_string(total) + " elements");
            shape[static_cast<std::size_t>(minus)] = total / known;
        }
        if (static_cast<std::int64_t>(count_of(shape)) != total)
            throw ShapeError(where + ": a reshape to (" + shape_text(shape) + ") changes the element count " +
                             std::to_string(total) + " to " + std::to_string(count_of(shape)));
        return {{x.elem_type, shape, x.values}};
    }
    if (op == "Transpose") return {transpose(arg(0), attr_ints(node, "perm"), where)};
    if (op == "Slice") {
        const auto& x = arg(0);
        I64 starts, ends, axes, steps;
        if (opset < 10) {
            starts = attr_ints(node, "starts");
            ends = attr_ints(node, "ends");
            axes = attr_ints(node, "axes");
        } else {
            starts = ints_of(arg(1), where);
            ends = ints_of(arg(2), where);
            if (has(3)) axes = ints_of(arg(3), where);
            if (has(4)) steps = ints_of(arg(4), where);
        }
        if (axes.empty())
            for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
        if (steps.empty()) steps.assign(starts.size(), 1);
        const std::size_t r = x.shape.size();
        I64 begin(r, 0), step(r, 1), shape = x.shape;
        for (std::size_t k = 0; k < axes.size(); ++k) {
            const auto ax = static_cast<std::size_t>(norm_axis(axes[k], r, where));
            const std::int64_t len = x.shape[ax];
            if (steps.at(k) == 0) throw ShapeError(where + ": step 0");
            // a step longer than the axis picks one element: bounded, so that −st and the
            // counts below cannot overflow (a step of INT64_MIN did)
            const std::int64_t st = std::clamp<std::int64_t>(steps.at(k), -len - 1, len + 1);
            auto clamp = [&](std::int64_t v, bool is_start) {
                if (v < 0) v = v < -len ? -1 : v + len;  // below: -1 means "before the first"
                if (st > 0) return std::clamp<std::int64_t>(v < 0 ? 0 : v, 0, len);
                (void)is_start;
                return std::clamp<std::int64_t>(v, -1, len - 1);
            };
            const std::int64_t b = clamp(starts.at(k), true), e = clamp(ends.at(k), false);
            const std::int64_t n = st > 0 ? std::max<std::int64_t>(0, (e - b + st - 1) / st)
                                          : std::max<std::int64_t>(0, (b - e + (-st) - 1) / (-st));
            begin[ax] = b;
            step[ax] = st;
            shape[ax] = n;
        }
        const auto st_in = strides_of(x.shape);
        std::vector<double> v(count_of(shape));
        std::vector<std::int64_t> idx(r, 0);
        for (std::size_t k = 0; k < v.size(); ++k) {
            std::size_t src = 0;
            for (std::size_t i = 0; i < r; ++i) src += static_cast<std::size_t>(begin[i] + idx[i] * step[i]) * st_in[i];
            v[k] = x.values[src];
            for (std::size_t i = r; i-- > 0;) {
                if (++idx[i] < shape[i]) break;
                idx[i] = 0;
            }
        }
        return {{x.elem_type, shape, v}};
    }
    if (op == "Split") {  // (torch's repeat_interleave splits its constant repeats)
        const auto& x = arg(0);
        if (x.shape.empty()) throw ShapeError(where + ": cannot split a scalar");
        const auto axis = static_cast<std::size_t>(norm_axis(attr_int(node, "axis", 0), x.shape.size(), where));
        I64 sizes = has(1) ? ints_of(arg(1), where) : attr_ints(node, "split");
        const std::int64_t len = x.shape[axis], outputs = node.output_size();
        if (sizes.empty()) {
            const std::int64_t parts = attr_int(node, "num_outputs", outputs);
            if (parts < 1) throw ShapeError(where + ": num_outputs " + std::to_string(parts));
            const std::int64_t piece = (len + parts - 1) / parts;
            for (std::int64_t k = 0; k < parts && k * piece < len; ++k)
                sizes.push_back(std::min(piece, len - k * piece));
        }
        std::int64_t total = 0;
        for (auto n : sizes) {
            if (n < 0) throw ShapeError(where + ": split size " + std::to_string(n) + " is negative");
            total += n;
        }
        if (total != len || static_cast<std::int64_t>(sizes.size()) != outputs)
            throw ShapeError(where + ": " + std::to_string(sizes.size()) + " sizes adding up to " +
                             std::to_string(total) + " do not split axis " + std::to_string(axis) + " of length " +
                             std::to_string(len) + " into the node's " + std::to_string(outputs) + " outputs");
        std::size_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < axis; ++i) outer *= static_cast<std::size_t>(x.shape[i]);
        for (std::size_t i = axis + 1; i < x.shape.size(); ++i) inner *= static_cast<std::size_t>(x.shape[i]);
        std::vector<OnnxTensor> outs;
        std::int64_t start = 0;
        for (auto n : sizes) {
            I64 shape = x.shape;
            shape[axis] = n;
            std::vector<double> v;
            v.reserve(outer * static_cast<std::size_t>(n) * inner);
            for (std::size_t o = 0; o < outer; ++o) {
                const auto from =
                    x.values.begin() +
                    static_cast<long>((o * static_cast<std::size_t>(len) + static_cast<std::size_t>(start)) * inner);
                v.insert(v.end(), from, from + static_cast<long>(static_cast<std::size_t>(n) * inner));
            }
            outs.push_back({x.elem_type, shape, v});
            start += n;
        }
        return outs;
    }
    if (op == "Where") {
        const I64 s = broadcast_shapes(broadcast_shapes(arg(0).shape, arg(1).shape, where), arg(2).shape, where);
        check_size(s);
        const auto c = broadcast_to(arg(0), s), a = broadcast_to(arg(1), s), b = broadcast_to(arg(2), s);
        std::vector<double> v(c.size());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = c[i] != 0 ? a[i] : b[i];
        return {make(arg(1).elem_type, s, v)};
    }
    if (op == "Expand") {
        const I64 s = broadcast_shapes(arg(0).shape, ints_of(arg(1), where), where);
        check_size(s);
        return {make(arg(0).elem_type, s, broadcast_to(arg(0), s))};
    }
    if (op == "Trilu") {
        const auto& x = arg(0);
        const I64 kv = has(1) ? ints_of(arg(1), where) : I64{0};
        if (kv.size() != 1) throw ShapeError(where + ": Trilu's k is not one number");
        const std::int64_t k = kv[0];
        const bool upper = attr_int(node, "upper", 1) != 0;
        if (x.shape.size() < 2) throw ShapeError(where + ": Trilu needs rank 2 or more");
        const auto rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
        OnnxTensor t = x;
        for (std::size_t i = 0; i < t.values.size(); ++i) {
            const auto c = static_cast<std::int64_t>(i) % cols, rr = (static_cast<std::int64_t>(i) / cols) % rows;
            const bool keep = upper ? c - rr >= k : c - rr <= k;
            if (!keep) t.values[i] = 0;
        }
        return {t};
    }
    if (op == "CumSum") {  // (position ids made from a constant mask), summed in order in double
        const auto& x = arg(0);
        const I64 axis_value = ints_of(arg(1), where);
        if (axis_value.size() != 1) throw ShapeError(where + ": CumSum's axis is not one number");
        if (x.shape.empty()) throw ShapeError(where + ": CumSum needs rank 1 or more");
        const auto axis = static_cast<std::size_t>(norm_axis(axis_value[0], x.shape.size(), where));
        const bool exclusive = attr_int(node, "exclusive", 0) != 0, reverse = attr_int(node, "reverse", 0) != 0;
        const std::size_t len = static_cast<std::size_t>(x.shape[axis]), step = strides_of(x.shape)[axis];
        OnnxTensor t = x;
        for (std::size_t k = 0; k < x.values.size(); ++k) {
            if ((k / step) % len != 0) continue;  // k starts a line along the axis
            double sum = 0;
            for (std::size_t j = 0; j < len; ++j) {
                const std::size_t i = k + (reverse ? len - 1 - j : j) * step;
                if (exclusive) t.values[i] = sum;
                sum += x.values[i];
                if (!exclusive) t.values[i] = sum;
            }
        }
        round_to_type(t);
        return {t};
    }
    if (op.rfind("Reduce", 0) == 0) {
        const auto& x = arg(0);
        I64 axes = (has(1) && opset >= 13) ? ints_of(arg(1), where) : attr_ints(node, "axes");
        const bool keep = attr_int(node, "keepdims", 1) != 0;
        if (axes.empty()) {
            if (attr_int(node, "noop_with_empty_axes", 0)) return {x};
            for (std::size_t i = 0; i < x.shape.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
        }
        std::set<std::size_t> at;
        for (auto a : axes) at.insert(static_cast<std::size_t>(norm_axis(a, x.shape.size(), where)));
        I64 kept_shape, out_shape;
        for (std::size_t i = 0; i < x.shape.size(); ++i) {
            kept_shape.push_back(at.count(i) ? 1 : x.shape[i]);
            if (!at.count(i)) out_shape.push_back(x.shape[i]);
        }
        const auto out_st = strides_of(kept_shape);
        const std::size_t n = count_of(kept_shape);
        const double init = op == "ReduceProd"  ? 1.0
                            : op == "ReduceMax" ? -INFINITY
                            : op == "ReduceMin" ? INFINITY
                                                : 0.0;
        std::vector<double> acc(n, init);
        std::vector<std::size_t> cnt(n, 0);
        std::vector<std::int64_t> idx(x.shape.size(), 0);
        for (std::size_t k = 0; k < x.values.size(); ++k) {
            std::size_t o = 0;
            for (std::size_t i = 0; i < idx.size(); ++i)
                o += (at.count(i) ? 0 : static_cast<std::size_t>(idx[i])) * out_st[i];
            const double v = x.values[k];
            if (op == "ReduceProd")
                acc[o] *= v;
            else if (op == "ReduceMax")
                acc[o] = std::max(acc[o], v);
            else if (op == "ReduceMin")
                acc[o] = std::min(acc[o], v);
            else if (op == "ReduceL1")
                acc[o] += std::fabs(v);
            else if (op == "ReduceL2" || op == "ReduceSumSquare")
                acc[o] += v * v;
            else
                acc[o] += v;
            ++cnt[o];
            for (std::size_t i = idx.size(); i-- > 0;) {
                if (++idx[i] < x.shape[i]) break;
                idx[i] = 0;
            }
        }
        if (op == "ReduceMean")
            for (std::size_t o = 0; o < n; ++o) acc[o] /= static_cast<double>(cnt[o]);
        else if (op == "ReduceL2")
            for (std::size_t o = 0; o < n; ++o) acc[o] = std::sqrt(acc[o]);
        else if (op != "ReduceSum" && op != "ReduceProd" && op != "ReduceMax" && op != "ReduceMin" &&
                 op != "ReduceL1" && op != "ReduceSumSquare")
            throw GraphError(where + ": " + op + " is not folded");
        return {make(x.elem_type, keep ? kept_shape : out_shape, acc)};
    }
    // elementwise
    if (has(0) && has(1)) check_size(broadcast_shapes(arg(0).shape, arg(1).shape, where));
    const int t0 = has(0) ? arg(0).elem_type : TP::FLOAT;
    const bool integral = !is_float(t0);
    if (op == "Add") return {binary(arg(0), arg(1), t0, std::plus<>(), where)};
    if (op == "Sub") return {binary(arg(0), arg(1), t0, std::minus<>(), where)};
    if (op == "Mul") return {binary(arg(0), arg(1), t0, std::multiplies<>(), where)};
    if (op == "Div")
        return {binary(
            arg(0), arg(1), t0,
            [&](double a, double b) {
                if (integral && b == 0) throw ShapeError(where + ": integer division by zero");
                return integral ? std::trunc(a / b) : a / b;
            },
            where)};
    if (op == "ScatterElements" || op == "ScatterND") {
        // as attngraph's ScatterElements and ScatterND (ops/scatter_*.hpp): data with updates
        // written in order (combined by `reduction`), an index a whole number in [-len, len)
        ops::scatter::Reduction reduce = ops::scatter::Reduction::none;
        if (const auto* r = find_attr(node, "reduction")) try {
                reduce = ops::scatter::reduction(r->s());
            } catch (const GraphError& e) {
                throw GraphError(where + ": " + e.what());
            }
        OnnxTensor y = arg(0);
        const OnnxTensor &idx = arg(1), &upd = arg(2);
        const std::size_t rank = y.shape.size();
        if (rank == 0) throw ShapeError(where + ": data must have at least one axis");
        std::vector<std::size_t> strides(rank, 1);
        for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * static_cast<std::size_t>(y.shape[d]);
        auto position = [&](double v, std::int64_t len) {
            if (!(v >= -double(len) && v < double(len) && std::trunc(v) == v))  // NaN too
                throw ShapeError(where + ": index " + std::to_string(v) + " is out of range for an axis of length " +
                                 std::to_string(len));
            const auto i = static_cast<std::int64_t>(v);
            return static_cast<std::size_t>(i < 0 ? i + len : i);
        };
        if (op == "ScatterElements") {
            const auto axis = static_cast<std::size_t>(norm_axis(attr_int(node, "axis", 0), rank, where));
            if (idx.shape != upd.shape || idx.shape.size() != rank)
                throw ShapeError(where + ": indices and updates must have one shape of data's rank");
            std::vector<std::size_t> at(rank, 0);
            for (std::size_t e = 0; e < idx.values.size(); ++e) {
                std::size_t off = 0;
                for (std::size_t d = 0; d < rank; ++d) {
                    if (d != axis && at[d] >= static_cast<std::size_t>(y.shape[d]))
                        throw ShapeError(where + ": indices is longer than data on axis " + std::to_string(d));
                    off += (d == axis ? position(idx.values[e], y.shape[axis]) : at[d]) * strides[d];
                }
                y.values[off] = ops::scatter::combine(reduce, y.values[off], upd.values[e]);
                for (std::size_t d = rank; d-- > 0;) {
                    if (++at[d] < static_cast<std::size_t>(idx.shape[d])) break;
                    at[d] = 0;
                }
            }
        } else {
            if (idx.shape.empty() || idx.shape.back() < 1 || static_cast<std::size_t>(idx.shape.back()) > rank)
                throw ShapeError(where + ": indices must end in a tuple length from 1 to data's rank");
            const auto k = static_cast<std::size_t>(idx.shape.back());
            const std::size_t slice = strides[k - 1], tuples = idx.values.size() / k;
            I64 want(idx.shape.begin(), idx.shape.end() - 1);
            want.insert(want.end(), y.shape.begin() + static_cast<long>(k), y.shape.end());
            if (upd.shape != want) throw ShapeError(where + ": updates must hold one slice of data per index tuple");
            for (std::size_t t = 0; t < tuples; ++t) {
                std::size_t off = 0;
                for (std::size_t j = 0; j < k; ++j) off += position(idx.values[t * k + j], y.shape[j]) * strides[j];
                for (std::size_t i = 0; i < slice; ++i)
                    y.values[off + i] = ops::scatter::combine(reduce, y.values[off + i], upd.values[t * slice + i]);
            }
        }
        return {y};
    }
    if (op == "Mod")
        return {binary(
            arg(0), arg(1), t0,
            [&](double a, double b) {
                if (b == 0) throw ShapeError(where + ": modulo by zero");
                if (attr_int(node, "fmod", 0)) return std::fmod(a, b);
                const double m = std::fmod(a, b);
                return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
            },
            where)};
    if (op == "Pow")
        return {binary(
            arg(0), arg(1), t0, [](double a, double b) { return std::pow(a, b); }, where)};
    if (op == "Min" || op == "Max") {
        // variadic (one input or more), broadcasting; NaN on either side gives NaN (numpy's
        // minimum and maximum, ONNX's reference), as attngraph's Min and Max ops
        const bool is_max = op == "Max";
        OnnxTensor acc = arg(0);
        for (std::size_t k = 1; k < in.size(); ++k) {
            check_size(broadcast_shapes(acc.shape, arg(k).shape, where));
            acc = binary(
                acc, arg(k), t0,
                [is_max](double a, double b) {
                    if (std::isnan(a)) return a;
                    if (std::isnan(b)) return b;
                    return is_max ? (a < b ? b : a) : (b < a ? b : a);
                },
                where);
        }
        return {acc};
    }
    if (op == "Equal") return {binary(arg(0), arg(1), bool_type, std::equal_to<>(), where)};
    if (op == "Less") return {binary(arg(0), arg(1), bool_type, std::less<>(), where)};
    if (op == "Greater") return {binary(arg(0), arg(1), bool_type, std::greater<>(), where)};
    if (op == "LessOrEqual") return {binary(arg(0), arg(1), bool_type, std::less_equal<>(), where)};
    if (op == "GreaterOrEqual") return {binary(arg(0), arg(1), bool_type, std::greater_equal<>(), where)};
    if (op == "And")
        return {binary(
            arg(0), arg(1), bool_type, [](double a, double b) { return a != 0 && b != 0; }, where)};
    if (op == "Or")
        return {binary(
            arg(0), arg(1), bool_type, [](double a, double b) { return a != 0 || b != 0; }, where)};
    if (op == "Xor")
        return {binary(
            arg(0), arg(1), bool_type, [](double a, double b) { return (a != 0) != (b != 0); }, where)};
    if (op == "Not") return {unary(arg(0), [](double a) { return a == 0 ? 1.0 : 0.0; })};
    if (op == "Neg") return {unary(arg(0), [](double a) { return -a; })};
    if (op == "Abs") return {unary(arg(0), [](double a) { return std::fabs(a); })};
    // numpy.sign: NaN stays NaN, as attngraph's Sign
    if (op == "Sign") return {unary(arg(0), [](double a) { return std::isnan(a) ? a : double((a > 0) - (a < 0)); })};
    if (op == "Round") return {unary(arg(0), [](double a) { return std::nearbyint(a); })};  // halves to even
    if (op == "Sqrt") return {unary_op<ops::Sqrt>(arg(0), [](double a) { return std::sqrt(a); })};
    if (op == "Exp") return {unary_op<ops::Exp>(arg(0), [](double a) { return std::exp(a); })};
    if (op == "Log") return {unary_op<ops::Log>(arg(0), [](double a) { return std::log(a); })};
    if (op == "Floor") return {unary(arg(0), [](double a) { return std::floor(a); })};
    if (op == "Ceil") return {unary(arg(0), [](double a) { return std::ceil(a); })};
    if (op == "Reciprocal") return {unary(arg(0), [](double a) { return 1.0 / a; })};
    if (op == "Tanh") return {unary_op<ops::Tanh>(arg(0), [](double a) { return std::tanh(a); })};
    if (op == "Erf") return {unary(arg(0), [](double a) { return std::erf(a); })};
    if (op == "Sin") return {unary_op<ops::Sin>(arg(0), [](double a) { return std::sin(a); })};
    if (op == "Cos") return {unary_op<ops::Cos>(arg(0), [](double a) { return std::cos(a); })};
    if (op == "IsNaN") {
        OnnxTensor t = unary(arg(0), [](double a) { return std::isnan(a) ? 1.0 : 0.0; });
        t.elem_type = bool_type;
        return {t};
    }
    if (op == "IsInf") {
        OnnxTensor t = unary(arg(0), [](double a) { return std::isinf(a) ? 1.0 : 0.0; });
        t.elem_type = bool_type;
        return {t};
    }
    throw GraphError(where + ": " + op + " is not folded");
}

}  // namespace attngraph::onnx_fold
