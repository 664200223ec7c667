// Every op on non-finite and extreme inputs (NaN, ±inf, ±1e38, ±1.7e308, denormals, -0.0),
// forward and backward, f32 and f64, through its definition and through the executor: no
// crash and, in the asan build (UBSan halts on error), no undefined behaviour. The elementwise
// ops' values are checked against the C library's (numpy's semantics); the other ops' values
// on such inputs are checked in their own test_op_*.cpp.
#include <cmath>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "engine/finite.hpp"
#include "engine/optimize.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_nonfinite)  // one suite a file: the tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
namespace bdata = boost::unit_test::data;
using nlohmann::json;

namespace {

const double inf = std::numeric_limits<double>::infinity();
const double nan = std::numeric_limits<double>::quiet_NaN();

/// The extreme values (f32 rounds ±1.7e308 to ±inf and 1e-310 to 0)
const std::vector<double> extremes = {nan,     inf,     -inf,  1e38,   -1e38, 1.7e308, -1.7e308, -0.0,   0.0,
                                      1e-310,  -1e-310, 1e-40, -1e-40, 1e20,  -1e20,   1e300,    -1e300, 3.0e38,
                                      -3.0e38, 1000,    -1000, 0.5,    -0.5,  2.5,     -2.5};

struct Case {
    std::string op;
    json attrs;
    std::vector<Shape> inputs;
    std::vector<bool> extreme;  // inputs that get the extreme values (the others: random in (-1, 1))
    std::vector<bool> needs;    // inputs that get a gradient
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
    out << c.op << " " << c.attrs.dump() << " on";
    for (const auto& shape : c.inputs) out << " " << shape_str(shape);
    out << " extreme";
    for (bool e : c.extreme) out << " " << e;
    return out;
}

const std::vector<Case> cases = {
    {"Exp", nullptr, {{25}}, {true}, {true}},
    {"Log", nullptr, {{25}}, {true}, {true}},
    {"Sqrt", nullptr, {{25}}, {true}, {true}},
    {"Sin", nullptr, {{25}}, {true}, {true}},
    {"Cos", nullptr, {{25}}, {true}, {true}},
    {"Tanh", nullptr, {{25}}, {true}, {true}},
    {"Erf", nullptr, {{25}}, {true}, {true}},
    {"Neg", nullptr, {{25}}, {true}, {true}},
    {"Relu", nullptr, {{25}}, {true}, {true}},
    {"Sigmoid", nullptr, {{25}}, {true}, {true}},
    {"Abs", nullptr, {{25}}, {true}, {true}},
    {"Clip", {{"min", -1}, {"max", 6}}, {{25}}, {true}, {true}},
    {"Clip", {{"min", 1e38}}, {{25}}, {true}, {true}},
    {"LeakyRelu", nullptr, {{25}}, {true}, {true}},
    {"Softplus", nullptr, {{25}}, {true}, {true}},
    {"Floor", nullptr, {{25}}, {true}, {false}},
    {"Ceil", nullptr, {{25}}, {true}, {false}},
    {"Round", nullptr, {{25}}, {true}, {false}},
    {"Sign", nullptr, {{25}}, {true}, {false}},
    {"CumSum", {{"axis", 0}}, {{25}}, {true}, {true}},
    {"CumSum", {{"axis", 1}, {"exclusive", true}, {"reverse", true}}, {{5, 5}}, {true}, {true}},
    {"ArgMax", {{"axis", 0}}, {{25}}, {true}, {false}},
    {"ArgMin", {{"axis", 1}, {"select_last_index", 1}}, {{5, 5}}, {true}, {false}},
    {"TopK", {{"k", 7}}, {{25}}, {true}, {true}},
    {"TopK", {{"k", 2}, {"axis", 0}, {"largest", 0}}, {{5, 5}}, {true}, {true}},
    {"Pow", {{"exponent", 0.5}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", 3}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", -1}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", -2}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", 0}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", 2}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", 1.5}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", -0.5}}, {{25}}, {true}, {true}},
    {"Pow", {{"exponent", 1e10}}, {{25}}, {true}, {true}},
    {"Scale", {{"factor", 0.125}}, {{25}}, {true}, {true}},
    {"Scale", {{"factor", 0}}, {{25}}, {true}, {true}},
    {"Add", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Sub", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Mul", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Div", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Max", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Min", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Mod", nullptr, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Mod", {{"fmod", true}}, {{25, 1}, {25}}, {true, true}, {true, true}},
    {"Equal", nullptr, {{25, 1}, {25}}, {true, true}, {false, false}},
    {"Greater", nullptr, {{25, 1}, {25}}, {true, true}, {false, false}},
    {"Less", nullptr, {{25, 1}, {25}}, {true, true}, {false, false}},
    {"Where", nullptr, {{25, 1}, {25}, {25, 25}}, {true, true, true}, {false, true, true}},
    {"Softmax", nullptr, {{25, 25}}, {true}, {true}},
    {"Softmax", nullptr, {{5, 5}}, {true}, {true}},
    {"Softmax", nullptr, {{25, 3}}, {true}, {true}},
    {"Softmax", {{"axis", 0}}, {{25, 25}}, {true}, {true}},
    {"ReduceSum", {{"axes", {1}}}, {{25, 25}}, {true}, {true}},
    {"ReduceMean", {{"axes", {1}}}, {{25, 25}}, {true}, {true}},
    {"ReduceMax", {{"axes", {1}}}, {{25, 25}}, {true}, {true}},
    {"ReduceMax", {{"axes", {0}}}, {{25, 25}}, {true}, {true}},
    {"ReduceMax", nullptr, {{25}}, {true}, {true}},
    {"RMSNormalization", nullptr, {{25, 25}, {25}}, {true, false}, {true, true}},
    {"RMSNormalization", nullptr, {{25, 25}, {25}}, {false, true}, {true, true}},
    {"RMSNormalization", nullptr, {{25, 1}, {1}}, {true, false}, {true, true}},
    {"LayerNormalization", nullptr, {{25, 25}, {25}, {25}}, {true, false, false}, {true, true, true}},
    {"LayerNormalization", nullptr, {{25, 25}, {25}, {25}}, {false, true, true}, {true, true, true}},
    {"LayerNormalization", {{"stats", 1}}, {{25, 1}, {1}, {1}}, {true, false, false}, {true, true, true}},
    {"Linear", nullptr, {{25, 4}, {4, 3}, {3}}, {true, false, false}, {true, true, true}},
    {"Linear", nullptr, {{4, 25}, {25, 3}, {3}}, {false, true, false}, {true, true, true}},
    {"Linear", nullptr, {{4, 5}, {5, 25}, {25}}, {false, false, true}, {true, true, true}},
    {"MatMul", nullptr, {{25, 4}, {4, 3}}, {true, false}, {true, true}},
    {"MatMul", nullptr, {{3, 25}, {25, 4}}, {false, true}, {true, true}},
    {"MatMul", nullptr, {{3, 25}, {25, 25}}, {true, true}, {true, true}},
    {"Transpose", nullptr, {{5, 5}}, {true}, {true}},
    {"Permute", {{"perm", {1, 0}}}, {{5, 5}}, {true}, {true}},
    {"Reshape", {{"shape", {5, 5}}}, {{25}}, {true}, {true}},
    {"Concat", nullptr, {{5, 5}, {5, 5}}, {true, true}, {true, true}},
    {"Slice", {{"start", 1}, {"end", 4}}, {{5, 5}}, {true}, {true}},
    {"Split", {{"parts", 5}}, {{5, 5}}, {true}, {true}},
    {"Expand", {{"shape", {3, 25}}}, {{25}}, {true}, {true}},
    {"Mask", {{"pattern", "causal"}}, {{5, 5}}, {true}, {true}},
    {"Mask", nullptr, {{5, 5}, {5, 5}}, {true, true}, {true, false}},
    {"Mask", {{"mask_type", "additive"}}, {{5, 5}, {5, 5}}, {true, true}, {true, false}},
    {"Alibi", {{"offset", 0}}, {{5, 5, 5}, {5}}, {true, false}, {true, false}},
    {"Alibi", {{"offset", 0}}, {{5, 5, 5}, {5}}, {false, true}, {true, false}},
    {"RotaryEmbedding", nullptr, {{1, 1, 25, 4}, {1, 25, 2}, {1, 25, 2}}, {true, false, false}, {true, true, true}},
    {"RotaryEmbedding", nullptr, {{1, 1, 25, 4}, {1, 25, 2}, {1, 25, 2}}, {false, true, true}, {true, true, true}},
};

/// Input k of case c: the extreme values (cycled, one per element) or random (-1, 1).
Array<double> input_of(const Case& c, std::size_t k) {
    Array<double> a = random_array(c.inputs[k], 11 + k);
    if (c.extreme[k])
        for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = extremes[(i + 7 * k) % extremes.size()];
    return a;
}

template <class T>
void run_case(const Case& c) {
    std::vector<Array<T>> in;
    for (std::size_t k = 0; k < c.inputs.size(); ++k)
        in.push_back(Tensor(input_of(c, k)).cast(dtype_of<T>()).template as<T>());
    const std::vector<Array<T>> y = forward_all<T>(c.op, c.attrs, in);
    if (!op_def(c.op).template backward<T>()) return;
    std::vector<Array<T>> G;
    std::vector<const Array<T>*> douts;
    for (const auto& out : y) G.push_back(Tensor(random_array(shape_of(out), 77)).cast(dtype_of<T>()).template as<T>());
    for (const auto& g : G) douts.push_back(&g);
    bool any = false;
    for (bool n : c.needs) any = any || n;
    if (!any) return;
    const std::vector<Array<T>> d = backward_direct<T>(c.op, c.attrs, in, douts, c.needs);
    const Graph graph = op_graph<T>(c.op, c.attrs, in);
    std::map<std::string, Tensor> by_name;
    for (std::size_t k = 0; k < G.size(); ++k) by_name[graph.value(graph.outputs()[k]).name] = Tensor(G[k]);
    std::vector<std::string> wrt;
    std::vector<Array<T>> wanted;
    for (std::size_t i = 0; i < in.size(); ++i)
        if (c.needs[i]) {
            wrt.push_back("in" + std::to_string(i));
            wanted.push_back(d[i]);
        }
    for (int threads : {1, 4}) {
        const std::vector<Array<T>> via = executor_gradients<T>(graph, by_name, wrt, threads);
        for (std::size_t k = 0; k < wrt.size(); ++k)
            BOOST_TEST(same_bits(via[k], wanted[k]), c.op << ": dL/d" << wrt[k]
                                                          << " of the definition and of the executor at " << threads
                                                          << " threads differ");
    }
    for (std::size_t k = 0; k < wrt.size(); ++k) {
        BOOST_TEST_MESSAGE(c << " " << typeid(T).name() << " dL/d" << wrt[k]);
    }
}

}  // namespace

BOOST_DATA_TEST_CASE(no_undefined_behaviour_forward_or_backward, bdata::make(cases), c) {
    BOOST_TEST_CONTEXT("f64") run_case<double>(c);
    BOOST_TEST_CONTEXT("f32") run_case<float>(c);
}

namespace {

struct Unary {
    std::string op;
    json attrs;
    double (*f)(double, double);  // the C library's value (in the dtype: f32 arguments and results rounded)
    double p = 0;
};

std::ostream& operator<<(std::ostream& out, const Unary& u) {
    return out << u.op << " " << u.attrs.dump();
}

const std::vector<Unary> unary = {
    {"Exp", nullptr, [](double x, double) { return std::exp(x); }},
    {"Log", nullptr, [](double x, double) { return std::log(x); }},
    {"Sqrt", nullptr, [](double x, double) { return std::sqrt(x); }},
    {"Sin", nullptr, [](double x, double) { return std::sin(x); }},
    {"Cos", nullptr, [](double x, double) { return std::cos(x); }},
    {"Tanh", nullptr, [](double x, double) { return std::tanh(x); }},
    {"Erf", nullptr, [](double x, double) { return std::erf(x); }},
    {"Neg", nullptr, [](double x, double) { return -x; }},
    {"Relu", nullptr, [](double x, double) { return x < 0 ? 0.0 : x; }},  // numpy: maximum(x, 0) keeps NaN
    {"Sigmoid", nullptr, [](double x, double) { return 1 / (1 + std::exp(-x)); }},
    {"Abs", nullptr, [](double x, double) { return std::fabs(x); }},
    {"Floor", nullptr, [](double x, double) { return std::floor(x); }},
    {"Ceil", nullptr, [](double x, double) { return std::ceil(x); }},
    {"Round", nullptr, [](double x, double) { return std::nearbyint(x); }},  // halves to even
    // numpy.sign: 0 at ±0 (+0), NaN at NaN
    {"Sign", nullptr, [](double x, double) { return x > 0    ? 1.0
                                                    : x < 0  ? -1.0
                                                    : x == 0 ? 0.0
                                                             : x; }},
    // numpy.clip(x, -1, 6): NaN stays NaN
    {"Clip",
     {{"min", -1}, {"max", 6}},
     [](double x, double) { return std::isnan(x) ? x : std::fmin(std::fmax(x, -1.0), 6.0); }},
    {"LeakyRelu", {{"alpha", 0.25}}, [](double x, double) { return x > 0 ? x : 0.25 * x; }},
    // log1p(exp(x)) in long double: ln(1 + e^x) without overflow or cancellation for these x
    {"Softplus", nullptr,
     [](double x, double) {
         return static_cast<double>(x > 0 ? x + std::log1p(std::exp(-static_cast<long double>(x)))
                                          : std::log1p(std::exp(static_cast<long double>(x))));
     }},
    {"Pow", {{"exponent", 0.5}}, [](double x, double p) { return std::pow(x, p); }, 0.5},
    {"Pow", {{"exponent", 3}}, [](double x, double p) { return std::pow(x, p); }, 3},
    {"Pow", {{"exponent", -1}}, [](double x, double p) { return std::pow(x, p); }, -1},
    {"Pow", {{"exponent", -2}}, [](double x, double p) { return std::pow(x, p); }, -2},
    {"Pow", {{"exponent", -3}}, [](double x, double p) { return std::pow(x, p); }, -3},
    {"Pow", {{"exponent", 0}}, [](double x, double p) { return std::pow(x, p); }, 0},
    {"Pow", {{"exponent", 1.5}}, [](double x, double p) { return std::pow(x, p); }, 1.5},
    {"Pow", {{"exponent", -0.5}}, [](double x, double p) { return std::pow(x, p); }, -0.5},
};

template <class T>
double want_of(const Unary& u, double x) {
    if constexpr (std::is_same_v<T, float>) {
        const float xf = static_cast<float>(x);
        // f32: the op in float (std::pow etc. have float overloads through the double ones
        // rounded once: close enough, the tolerance below is relative)
        return static_cast<double>(static_cast<float>(u.f(static_cast<double>(xf), u.p)));
    } else {
        return u.f(x, u.p);
    }
}

template <class T>
void check_unary(const Unary& u) {
    Array<T> x = Array<T>::from_shape({extremes.size()});
    for (std::size_t i = 0; i < extremes.size(); ++i) x.data()[i] = static_cast<T>(extremes[i]);
    const Array<T> y = forward<T>(u.op, u.attrs, {x});
    for (std::size_t i = 0; i < extremes.size(); ++i) {
        const double in = static_cast<double>(x.data()[i]), want = want_of<T>(u, in);
        const double got = static_cast<double>(y.data()[i]);
        const double tiny = std::is_same_v<T, float> ? 1e-37 : 1e-300;  // subnormal results may flush
        // (xsimd's pow is exp(p·ln x), a few hundred ulp off C's for large |p·ln x|)
        const bool pow = u.op == "Pow";
        const double rel = std::is_same_v<T, float> ? (pow ? 2e-6 : 4e-7) : (pow ? 1e-12 : 4e-15);
        bool ok;
        if (std::isnan(want))
            ok = std::isnan(got);
        else if (std::isinf(want) || want == 0)
            ok = got == want && std::signbit(got) == std::signbit(want);
        else
            ok = std::abs(got - want) <= rel * std::abs(want) + tiny;
        BOOST_TEST(ok, u << "(" << in << ") = " << got << ", want " << want);
    }
}

}  // namespace

BOOST_DATA_TEST_CASE(elementwise_values_are_the_c_librarys, bdata::make(unary), u) {
    BOOST_TEST_CONTEXT("f64") check_unary<double>(u);
    BOOST_TEST_CONTEXT("f32") check_unary<float>(u);
}

// ---- the bugs this audit found, each on its own ---------------------------------------------

/// Checks y against want element by element: NaN for NaN, ±inf and ±0 exactly (sign too), others within rel.
void check_values(const std::string& what, const Array<double>& x, const Array<double>& y,
                  const std::vector<double>& want, double rel) {
    BOOST_TEST_REQUIRE(y.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double got = y.data()[i], w = want[i];
        const bool ok = std::isnan(w)             ? std::isnan(got)
                        : std::isinf(w) || w == 0 ? got == w && std::signbit(got) == std::signbit(w)
                                                  : std::abs(got - w) <= rel * std::abs(w);
        BOOST_TEST(ok, what << "(" << x.data()[i] << ") = " << got << ", want " << w);
    }
}

// xsimd's tanh and erf run xsimd::exp on NaN, ±inf and, in double, on 2x or -x² past a long
// (tanh(1e20), erf(1e10)): undefined behaviour (UBSan, in the asan build). numpy: tanh(±inf) =
// ±1, erf(±inf) = ±1, NaN stays NaN.
BOOST_AUTO_TEST_CASE(tanh_and_erf_of_nan_inf_and_huge_values) {
    const std::vector<double> x = {nan, inf, -inf, 1e20, -1e20, 1e38, -1e38, 1e200, -1e200, 1e10, -0.0};
    const std::vector<double> sign = {nan, 1, -1, 1, -1, 1, -1, 1, -1, 1, -0.0};
    for (DType dtype : {DType::f64, DType::f32}) BOOST_TEST_CONTEXT(to_string(dtype)) {
            for (const char* op : {"Tanh", "Erf"}) {
                const Doubles y = run_one(op, nullptr, {array_of({x.size()}, x)}, dtype);
                check_values(op, array_of({x.size()}, x), y[0], sign, 0);
            }
        }
}

// xsimd's pow is exp(p·ln|x|) with fix-ups that miss C's (numpy's) special cases, and runs
// exp on ±inf and NaN (undefined behaviour in double). Wanted: numpy.power's values.
BOOST_AUTO_TEST_CASE(pow_at_zero_inf_and_nan) {
    const std::vector<double> x = {0.0, -0.0, inf, -inf, nan, 2};
    const std::vector<std::pair<double, std::vector<double>>> pow_cases = {
        {0, {1, 1, 1, 1, 1, 1}},
        {0.5, {0, 0, inf, inf, nan, 1.4142135623730951}},
        {-1, {inf, -inf, 0, -0.0, nan, 0.5}},
        {3, {0, -0.0, inf, -inf, nan, 8}},
        {-2, {inf, inf, 0, 0, nan, 0.25}},
        {-3, {inf, -inf, 0, -0.0, nan, 0.125}},
        {1.5, {0, 0, inf, inf, nan, 2.8284271247461903}},
        {-0.5, {inf, inf, 0, 0, nan, 0.7071067811865476}},
    };
    for (DType dtype : {DType::f64, DType::f32}) BOOST_TEST_CONTEXT(to_string(dtype)) {
            for (const auto& [p, want] : pow_cases) {
                const Doubles y = run_one("Pow", {{"exponent", p}}, {array_of({x.size()}, x)}, dtype);
                check_values("pow^" + std::to_string(p), array_of({x.size()}, x), y[0], want, 2e-6);
            }
        }
}

// d/dx x^0 = 0 everywhere (PyTorch: 0); p·x^(p-1) gave 0·inf = NaN at x = 0
BOOST_AUTO_TEST_CASE(pow_zero_gradient_is_zero) {
    const Array<double> x = array_of({4}, {0.0, -0.0, 2, -3});
    const Array<double> dy = array_of({4}, {1, 2, 3, 4});
    const auto dx = backward_direct<double>("Pow", {{"exponent", 0}}, {x}, {&dy}, {true});
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(dx[0].data()[i] == 0.0, "at x = " << x.data()[i]);
}

// xsimd's log reads a subnormal double's exponent before scaling it up: log(1e-310) was
// -746.5. numpy: log(1e-310) = -713.8013788281542; and pow through it: 1e-310^0.5 = 1e-155.
BOOST_AUTO_TEST_CASE(log_and_pow_of_subnormal_doubles) {
    const std::vector<double> x = {1e-310, 5e-324, 2.2e-308, 1e-315, 2.2250738585072014e-308};
    const Doubles y = run_one("Log", nullptr, {array_of({x.size()}, x)}, DType::f64);
    check_values("log", array_of({x.size()}, x), y[0],
                 {-713.8013788281542, -744.4400719213812, -708.4077512818018, -725.3143042946427, -708.3964185322641},
                 1e-15);
    const Doubles r = run_one("Pow", {{"exponent", 0.5}}, {array_of({x.size()}, x)}, DType::f64);
    check_values("sqrt", array_of({x.size()}, x), r[0],
                 {9.999999999999984e-156, 2.2227587494850775e-162, 1.4832396974191327e-154, 3.1622776577677105e-158,
                  1.4916681462400413e-154},
                 1e-12);
}

// std::max(m, NaN) keeps m: ReduceMax dropped NaNs ([1, NaN, 3] gave 3). numpy and PyTorch
// give NaN; PyTorch's max along an axis routes the gradient to the (first) NaN.
BOOST_AUTO_TEST_CASE(reduce_max_of_a_nan) {
    const Array<double> x = array_of({4, 3}, {1, nan, 3, nan, -inf, 2, -inf, -inf, -inf, inf, nan, nan});
    for (DType dtype : {DType::f64, DType::f32}) BOOST_TEST_CONTEXT(to_string(dtype)) {
            const Doubles y = run_one("ReduceMax", {{"axes", {1}}, {"keepdims", 0}}, {x}, dtype);
            check_values("max", array_of({4}, {0, 1, 2, 3}), y[0], {nan, nan, -inf, nan}, 0);
            const Doubles t = run_one("ReduceMax", {{"axes", {0}}, {"keepdims", 0}}, {x}, dtype);
            check_values("max", array_of({3}, {0, 1, 2}), t[0], {nan, nan, nan}, 0);
        }
    const Array<double> dy = array_of({4}, {1, 2, 3, 4});
    const auto dx = backward_direct<double>("ReduceMax", {{"axes", {1}}, {"keepdims", 0}}, {x}, {&dy}, {true});
    BOOST_TEST(same_bits(dx[0], array_of({4, 3}, {0, 1, 0, 2, 0, 0, 3, 0, 0, 0, 4, 0})));
    const Array<double> dt = array_of({3}, {1, 2, 3});
    const auto dx0 = backward_direct<double>("ReduceMax", {{"axes", {0}}, {"keepdims", 0}}, {x}, {&dt}, {true});
    BOOST_TEST(same_bits(dx0[0], array_of({4, 3}, {0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3})));
}

// Gemma-2's softcapping chain fused into one attention step (engine/fused_attention.cpp runs
// the Tanh op's batch function, and its backward recomputes it) on scores that are NaN, ±inf
// and huge, in f64: xsimd's tanh on them was undefined behaviour (UBSan). Values: a plain loop
// with std::tanh and numpy's softmax (a NaN score makes its row NaN; tanh(±inf) = ±1 caps an
// infinite score).
BOOST_AUTO_TEST_CASE(fused_softcap_chain_on_non_finite_scores) {
    const std::size_t n = 6, d = 4;
    const double cap = 5;
    Array<double> q = random_array<double>({1, 1, n, d}, 1), k = random_array<double>({1, 1, n, d}, 2),
                  v = random_array<double>({1, 1, n, d}, 3);
    q(0, 0, 1, 0) = nan, q(0, 0, 2, 1) = inf, q(0, 0, 3, 2) = -inf, q(0, 0, 4, 3) = 1e200, q(0, 0, 5, 0) = -1e300;
    GraphBuilder b("softcap_nonfinite", DType::f64);
    Value qv = b.input("Q", Tensor(q)), kv = b.input("K", Tensor(k)), vv = b.input("V", Tensor(v));
    Value s = scale(matmul(qv, transpose(kv).named("KT")).named("S_raw"), 0.5).named("S");
    s = scale(s, 1 / cap).named("S_div");
    s = b.node<ops::Tanh>({s}, {}, "S_tanh");
    s = scale(s, cap).named("S_capped");
    s = mask_causal(s, 0).named("S_masked");
    b.output(matmul(softmax(s).named("A"), vv).named("O"));
    const Graph g = b.build();
    std::vector<bool> keep(g.values().size(), false);
    for (int id : g.outputs()) keep[static_cast<std::size_t>(id)] = true;
    std::size_t fused_steps = 0;
    for (const Step& st : make_plan(g, keep).steps) fused_steps += st.kind == StepKind::attention;
    BOOST_TEST(fused_steps == 1u);

    std::vector<double> want(n * d);
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<double> sc(i + 1);
        double mx = -inf;
        for (std::size_t j = 0; j <= i; ++j) {
            double raw = 0;
            for (std::size_t t = 0; t < d; ++t) raw += q(0, 0, i, t) * k(0, 0, j, t);
            sc[j] = cap * std::tanh(0.5 * raw / cap);
            mx = std::isnan(sc[j]) || std::isnan(mx) ? nan : std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (std::size_t t = 0; t < d; ++t) {
            double o = 0;
            for (std::size_t j = 0; j <= i; ++j) o += sc[j] / sum * v(0, 0, j, t);
            want[i * d + t] = o;
        }
    }
    RunOptions plain;
    plain.optimize = false;
    RunOptions keep_all;
    keep_all.keep_all = true;
    const RunResult fused = run(g, keep_all), unfused = run(g, plain);
    const Array<double> o = fused.at(g, "O").as<double>();
    check_values("O", Array<double>(o.shape(), 0.0), o, want, 1e-12);
    BOOST_TEST(std::isnan(o(0, 0, 1, 0)));     // not vacuous: the NaN row
    BOOST_TEST(std::isfinite(o(0, 0, 2, 0)));  // and the capped infinite scores
    BOOST_TEST(same_bits(o, unfused.at(g, "O").as<double>()));
    // the backward recomputes the chain (the Tanh's output): dQ, dK and dV as the unfused
    // graph's. (dV: the NaN row's masked keys have weight NaN, as the plain Softmax, numpy and
    // PyTorch give them, so dV = Aᵀ·dO is NaN for every key, those too.)
    const Gradients gf = default_executor(1)->backward(g, fused, {}, {"Q", "K", "V"});
    RunOptions plain_kept = plain;
    plain_kept.keep_all = true;
    const Gradients gu = default_executor(1)->backward(g, run(g, plain_kept), {}, {"Q", "K", "V"}, {}, false);
    for (const char* w : {"Q", "K", "V"}) {
        const Array<double> f = gf.at(w).as<double>(), u = gu.at(w).as<double>();
        BOOST_TEST_REQUIRE(f.size() == u.size());
        for (std::size_t i = 0; i < f.size(); ++i) {
            const double x = f.data()[i], y = u.data()[i];
            BOOST_TEST((std::isnan(x) ? std::isnan(y) : std::abs(x - y) <= 1e-12 * std::max(1.0, std::abs(y))),
                       "d" << w << "[" << i << "] fused " << x << ", unfused " << y);
        }
    }
}

// any_not_finite (engine/finite.hpp), the fused step's check of V and the backward's of its
// operands, against std::isfinite / std::isnan: each extreme value at every position of
// arrays of 1 to 40 values (the vector loop's body and its tail), in f32 and f64.
BOOST_DATA_TEST_CASE(any_not_finite_agrees_with_the_c_library, bdata::make({0, 1}), f64) {
    auto check = [](auto zero) {
        using T = decltype(zero);
        for (const double e : extremes) {
            const T x = static_cast<T>(e);
            for (std::size_t count = 1; count <= 40; ++count)
                for (std::size_t at = 0; at < count; ++at) {
                    std::vector<T> v(count, T(0.25));
                    v[at] = x;
                    BOOST_TEST_CONTEXT(e << " at " << at << " of " << count) {
                        BOOST_TEST(any_not_finite(v.data(), count) == !std::isfinite(x));
                        BOOST_TEST(any_not_finite(v.data(), count, true) == std::isnan(x));
                    }
                }
        }
        BOOST_TEST(!any_not_finite(static_cast<const T*>(nullptr), 0));
    };
    f64 ? check(0.0) : check(0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
