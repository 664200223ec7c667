// engine/expr.hpp: the seed graph written as an expression lowers to the IR of
// graphs/seed_mha.json and runs to its Y bit for bit; evaluate() agrees with a run of the
// lowered graph (f64, 1e-12) and with the seed document; an elementwise chain allocates only
// its result; gradients() agrees with engine/autodiff (f64, relative 1e-12).
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "engine/autodiff.hpp"
#include "engine/executor.hpp"
#include "engine/expr.hpp"
#include "engine/graph_file.hpp"
#include "engine/sanitizers.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_expr)

using namespace attngraph;
namespace ex = attngraph::expr;

namespace {
BackwardOptions with_respect_to(std::vector<std::string> names) {
    BackwardOptions options;
    options.wrt = std::move(names);
    return options;
}
}  // namespace

// ---- counting every allocation of this program (while `counting` is set) -----------------
// Every heap allocation goes through malloc, calloc, realloc or posix_memalign (operator new
// and xsimd's aligned allocator included). The plain build interposes them here (forwarding
// to glibc's own); a sanitizer build, whose runtime owns malloc, counts through its hooks.

namespace {
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0}, allocated_bytes{0};

void count(std::size_t n) {
    if (counting.load(std::memory_order_relaxed)) {
        allocations.fetch_add(1, std::memory_order_relaxed);
        allocated_bytes.fetch_add(n, std::memory_order_relaxed);
    }
}

struct Allocations {
    std::size_t count = 0, bytes = 0;
};
template <class F>
Allocations count_allocations(F&& f) {
    allocations = 0;
    allocated_bytes = 0;
    counting = true;
    f();
    counting = false;
    return {allocations.load(), allocated_bytes.load()};
}
}  // namespace

#ifdef ATTNGRAPH_SANITIZED
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*));
namespace {
const int hooks_installed = __sanitizer_install_malloc_and_free_hooks(
    [](const volatile void*, std::size_t n) { count(n); }, [](const volatile void*) {});
}  // namespace
#else
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) {
    count(n);
    return __libc_malloc(n);
}
void* calloc(std::size_t k, std::size_t n) {
    count(k * n);
    return __libc_calloc(k, n);
}
void* realloc(void* p, std::size_t n) {
    count(n);
    return __libc_realloc(p, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
    count(n);
    void* p = __libc_memalign(alignment, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
    count(n);
    return __libc_memalign(alignment, n);
}
}
#endif

namespace {

RunOptions plain_options() {  // one node at a time, one thread: no fused kernel
    RunOptions o;
    o.threads = 1;
    o.optimize = false;
    return o;
}

double max_abs(const Tensor& t) {
    double m = 0;
    for (std::size_t i = 0; i < t.size(); ++i) m = std::max(m, std::abs(t.at_flat(i)));
    return m;
}

// max |a - b| / max |b|
double relative_diff(const Tensor& a, const Tensor& b) {
    const double scale = max_abs(b);
    return test::max_abs_diff(a, b) / (scale > 0 ? scale : 1.0);
}

// ---- the seed graph, written as the issue writes an expression ----

struct SeedExpr {
    graphs::MhaWeights w = graphs::seed_mha_weights();
    Tensor x = w.x.cast(DType::f32);
};

auto seed_head(const SeedExpr& s, const ex::Leaf& X, std::size_t i) {
    const std::string h = "head" + std::to_string(i + 1) + ".";
    auto wq = ex::param(h + "Wq", s.w.wq[i]);
    auto bq = ex::param(h + "bq", s.w.bq[i]);
    auto wk = ex::param(h + "Wk", s.w.wk[i]);
    auto bk = ex::param(h + "bk", s.w.bk[i]);
    auto wv = ex::param(h + "Wv", s.w.wv[i]);
    auto bv = ex::param(h + "bv", s.w.bv[i]);
    auto q = ex::linear(X, wq, bq).named(h + "Q");
    auto k = ex::linear(X, wk, bk).named(h + "K");
    auto v = ex::linear(X, wv, bv).named(h + "V");
    auto kt = ex::transpose(k).named(h + "KT");
    auto s_raw = ex::matmul(q, kt).named(h + "S_raw");
    auto sc = ex::scale(s_raw, std::sqrt(0.5)).named(h + "S");
    auto a = ex::softmax(sc).named(h + "A");
    return ex::matmul(a, v).named(h + "O");
}

auto seed_expression(const SeedExpr& s) {
    auto X = ex::input("X", s.x);
    std::vector<decltype(seed_head(s, X, 0))> heads;
    for (std::size_t i = 0; i < 2; ++i) heads.push_back(seed_head(s, X, i));
    auto o = ex::concat(heads, -1).named("O_concat");
    auto wo = ex::param("Wo", s.w.wo);
    auto bo = ex::param("bo", s.w.bo);
    return ex::linear(o, wo, bo).named("Y");
}

// ---- a batched attention with every op: split, reshape, permute, masks, an additive bias ----

struct Batched {
    std::size_t B = 2, n = 5, d = 8, h = 2, dk = 4;
    Tensor x = graphs::random_tensor({B, n, d}, DType::f64, 11);
    Tensor wqkv = graphs::random_tensor({d, 3 * d}, DType::f64, 12, 0.4);
    Tensor bqkv = graphs::random_tensor({1, 3 * d}, DType::f64, 13, 0.4);
    Tensor bias = graphs::random_tensor({h, n, n}, DType::f64, 14);
    Tensor keep = [this] {
        Tensor t = graphs::random_tensor({1, 1, n, n}, DType::f64, 15);
        for (auto& v : t.as<double>()) v = v > -0.5 ? 1.0 : 0.0;
        for (std::size_t i = 0; i < n; ++i) t.as<double>()(0, 0, i, 0) = 1.0;  // no row fully masked
        return t;
    }();
    Tensor wo = graphs::random_tensor({d, d}, DType::f64, 16, 0.4);
    Tensor bo = graphs::random_tensor({1, d}, DType::f64, 17, 0.4);
};

auto batched_expression(const Batched& c) {
    const int B = static_cast<int>(c.B), H = static_cast<int>(c.h), DK = static_cast<int>(c.dk);
    auto X = ex::input("X", c.x);
    auto wqkv = ex::param("Wqkv", c.wqkv);
    auto bqkv = ex::param("bqkv", c.bqkv);
    auto qkv = ex::linear(X, wqkv, bqkv).named("QKV");
    auto parts = ex::split(qkv, 3, -1).named("QKV_split");
    auto heads = [&](auto flat, const std::string& name) {
        return ex::permute(ex::reshape(flat, {B, -1, H, DK}), {0, 2, 1, 3}).named(name);
    };
    auto q = heads(parts[0], "Q");
    auto k = heads(parts[1], "K");
    auto v = heads(parts[2], "V");
    auto s = ex::scale(ex::matmul(q, ex::transpose(k)), 1.0 / std::sqrt(static_cast<double>(c.dk))).named("S");
    auto alibi = ex::param("alibi", c.bias);
    auto keep = ex::param("keep", c.keep);
    auto masked = ex::mask(ex::mask_window(ex::add(s, alibi), 3, true), keep).named("S_masked");
    auto a = ex::softmax(ex::mask_padding(masked, {5, 3})).named("A");
    auto o = ex::matmul(a, v).named("O");
    auto rows = ex::reshape(ex::permute(o, {0, 2, 1, 3}), {B, -1, static_cast<int>(c.d)});
    auto wo = ex::param("Wo", c.wo);
    auto bo = ex::param("bo", c.bo);
    return ex::linear(rows, wo, bo).named("Y");
}

}  // namespace

// ---- the seed -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(seed_expression_gives_the_seed_graph_ir) {
    SeedExpr s;
    const auto y = seed_expression(s);
    const Graph g = ex::to_graph(y, "seed_mha", {DType::f32, {"外送", "晚到", "補償"}});
    const Graph file = load_graph(test::seed_graph());
    BOOST_TEST(graph_to_json(g) == graph_to_json(file));
    BOOST_TEST(graph_to_json(g).dump() == graph_to_json(file).dump());
}

BOOST_AUTO_TEST_CASE(seed_expression_runs_to_the_files_y_bit_for_bit) {
    SeedExpr s;
    const Graph g = ex::to_graph(seed_expression(s), "seed_mha", {DType::f32, {"外送", "晚到", "補償"}});
    const Graph file = load_graph(test::seed_graph());
    const Tensor ours = run(g).at(g, "Y"), theirs = run(file).at(file, "Y");
    BOOST_TEST((ours.dtype() == DType::f32));
    BOOST_TEST((ours == theirs));  // same dtype, shape and bits
}

BOOST_AUTO_TEST_CASE(seed_expression_evaluates_to_the_seed_document) {
    SeedExpr s;
    const auto y = seed_expression(s);
    const Tensor value = ex::evaluate(y, DType::f64);
    BOOST_TEST((value.dtype() == DType::f64));
    // the document's Y, printed to 6 decimals
    BOOST_TEST(test::max_abs_diff(value, test::seed_values()["Y"]) < 2e-6);
}

// ---- evaluate against a run of the lowered graph ---------------------------------------------

BOOST_AUTO_TEST_CASE(evaluate_agrees_with_the_lowered_graph_f64) {
    SeedExpr s;
    const auto seed = seed_expression(s);
    const Graph g1 = ex::to_graph(seed, "seed", {DType::f64, {}});
    BOOST_TEST(test::max_abs_diff(ex::evaluate(seed, DType::f64), run(g1).at(g1, "Y")) < 1e-12);

    Batched c;
    const auto y = batched_expression(c);
    const Graph g2 = ex::to_graph(y, "batched");
    BOOST_TEST((g2.dtype() == DType::f64));
    const Tensor direct = ex::evaluate(y), lowered = run(g2).at(g2, "Y");
    BOOST_TEST((direct.dtype() == DType::f64));
    BOOST_TEST(direct.shape() == (Shape{2, 5, 8}));
    BOOST_TEST(test::max_abs_diff(direct, lowered) < 1e-12);
    BOOST_TEST(max_abs(lowered) > 0.1);  // not a vacuous comparison
    // padding masks keys 3 and 4 of sequence 1: its attention ignores them
    BOOST_TEST(std::isfinite(direct.as<double>()(1, 4, 7)));
}

BOOST_AUTO_TEST_CASE(fused_kernels_are_selected_by_expression_type) {
    auto q = ex::input("Q", graphs::random_tensor({2, 7, 4}, DType::f64, 1));
    auto k = ex::input("K", graphs::random_tensor({2, 9, 4}, DType::f64, 2));
    auto v = ex::input("V", graphs::random_tensor({1, 9, 3}, DType::f64, 3));  // shared across the batch
    auto scores = ex::matmul(q, ex::transpose(k));
    auto attention = ex::matmul(ex::softmax(ex::scale(scores, 0.5)), v);
    auto unscaled = ex::matmul(ex::softmax(scores), v);
    auto probabilities = ex::softmax(ex::scale(ex::input("S", graphs::random_tensor({3, 6}, DType::f64, 4)), 0.25));
    static_assert(ex::detail::is_matmul_tb<decltype(scores)>);
    static_assert(ex::detail::is_attention<decltype(attention)>);
    static_assert(ex::detail::is_attention<decltype(unscaled)>);
    static_assert(ex::detail::is_scaled_softmax<decltype(probabilities)>);
    static_assert(!ex::detail::is_attention<decltype(ex::matmul(q, k))>);
    for (const auto& [direct, g] : {std::pair{ex::evaluate(attention), ex::to_graph(attention, "a")},
                                    std::pair{ex::evaluate(unscaled), ex::to_graph(unscaled, "u")},
                                    std::pair{ex::evaluate(scores), ex::to_graph(scores, "s")},
                                    std::pair{ex::evaluate(probabilities), ex::to_graph(probabilities, "p")}}) {
        const Tensor plain = run(g, plain_options()).values[g.outputs()[0]]->cast(DType::f64);
        BOOST_TEST(test::max_abs_diff(direct, plain) < 1e-12);
    }
    // a transpose of other axes is no matmul_tb: evaluated as written
    auto other =
        ex::matmul(q, ex::transpose(ex::input("P", graphs::random_tensor({4, 2, 5}, DType::f64, 5)), {1, 0, 2}));
    const Graph g = ex::to_graph(other, "o");
    BOOST_TEST(test::max_abs_diff(ex::evaluate(other), run(g).values[g.outputs()[0]]->cast(DType::f64)) < 1e-12);
}

// ---- an elementwise chain is one pass ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(elementwise_chain_of_four_ops_allocates_only_its_result) {
    const std::size_t n = 64, m = 96;
    const Tensor x = graphs::random_tensor({n, m}, DType::f64, 21);
    const Tensor y = graphs::random_tensor({n, m}, DType::f64, 22);
    const Tensor z = graphs::random_tensor({1, m}, DType::f64, 23);
    auto X = ex::input("X", x);
    auto Y = ex::input("Y", y);
    auto Z = ex::param("Z", z);
    auto chain = ex::scale(ex::add(ex::scale(ex::add(X, Y), 0.5), Z), 3.0);  // 4 ops
    // the same chain cut in two by a type-erased (materialised) middle
    auto cut = ex::scale(ex::add(ex::Dynamic(ex::scale(ex::add(X, Y), 0.5)), Z), 3.0);

    // The counter must see a tensor's (aligned) allocation. GCC 12's ThreadSanitizer runtime
    // calls no malloc hook for aligned allocations: there the counts are checked by the
    // release and ASan builds only, and this build says so.
    const Allocations probe = count_allocations([&] { Tensor t = graphs::random_tensor({n, m}, DType::f64, 24); });
#ifdef ATTNGRAPH_TSAN
    const bool counter_sees_tensors = probe.bytes >= n * m * sizeof(double);
    if (!counter_sees_tensors)
        BOOST_TEST_MESSAGE("this ThreadSanitizer runtime hides aligned allocations: counts not checked here");
#else
    BOOST_TEST_REQUIRE(probe.bytes >= n * m * sizeof(double));
    const bool counter_sees_tensors = true;
#endif

    Tensor fused, materialised;
    const Allocations a = count_allocations([&] { fused = ex::evaluate(chain); });
    const Allocations b = count_allocations([&] { materialised = ex::evaluate(cut); });
    const std::size_t result_bytes = n * m * sizeof(double);
    BOOST_TEST_MESSAGE("fused chain: " << a.count << " allocation(s), " << a.bytes << " bytes; cut in two: " << b.count
                                       << ", " << b.bytes << " bytes; result " << result_bytes << " bytes");
    if (counter_sees_tensors) {
        BOOST_TEST(a.count == 1u);
        BOOST_TEST(a.bytes == result_bytes);
        BOOST_TEST(b.bytes >= 2 * result_bytes);  // the counter sees a temporary where there is one
    }

    // against a plain loop
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
            const double want = 3.0 * (0.5 * (x.as<double>()(i, j) + y.as<double>()(i, j)) + z.as<double>()(0, j));
            worst = std::max(worst, std::abs(fused.as<double>()(i, j) - want));
        }
    BOOST_TEST(worst == 0.0);
    BOOST_TEST((fused == materialised));
}

BOOST_AUTO_TEST_CASE(building_an_expression_computes_nothing) {
    const Tensor x = graphs::random_tensor({256, 256}, DType::f64, 31);
    const Allocations a = count_allocations([&] {
        auto X = ex::input("X", x);
        auto e = ex::softmax(ex::scale(ex::matmul(X, ex::transpose(X)), 0.5));
        (void)e;
    });
    BOOST_TEST(a.bytes < 1024u);  // names and attributes only, no tensor
}

// ---- gradients against engine/autodiff -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gradients_agree_with_autodiff_f64) {
    Batched c;
    const int B = 2, H = 2, DK = 4;
    auto X = ex::input("X", c.x);
    auto wqkv = ex::param("Wqkv", c.wqkv);
    auto bqkv = ex::param("bqkv", c.bqkv);
    auto parts = ex::split(ex::linear(X, wqkv, bqkv).named("QKV"), 3, -1).named("QKV_split");
    auto heads = [&](auto flat, const std::string& name) {
        return ex::permute(ex::reshape(flat, {B, -1, H, DK}), {0, 2, 1, 3}).named(name);
    };
    auto q = heads(parts[0], "Q");
    auto k = heads(parts[1], "K");
    auto v = heads(parts[2], "V");
    auto s = ex::scale(ex::matmul(q, ex::transpose(k)), 0.5).named("S");
    auto alibi = ex::param("alibi", c.bias);
    auto keep = ex::param("keep", c.keep);
    auto masked = ex::mask(ex::mask_window(ex::add(s, alibi), 3, true), keep).named("S_masked");
    auto a = ex::softmax(ex::mask_padding(masked, {5, 3})).named("A");
    auto o = ex::matmul(a, v).named("O");
    auto rows = ex::reshape(ex::permute(o, {0, 2, 1, 3}), {B, -1, 8});
    auto wo = ex::param("Wo", c.wo);
    auto y = ex::linear(rows, wo, ex::param("bo", c.bo)).named("Y");

    const Graph g = ex::to_graph(y, "batched");
    const RunResult forward = run(g, test::keep_all());
    const std::vector<std::string> names = {"X", "Wqkv", "bqkv", "alibi", "Q", "QKV_split:1", "S", "A", "Wo"};
    const Tensor G = graphs::random_tensor({2, 5, 8}, DType::f64, 41);
    for (const bool with_g : {false, true}) {
        BOOST_TEST_CONTEXT("G given: " << with_g) {
            const Gradients reference =
                backward(g, forward, with_g ? std::map<std::string, Tensor>{{"Y", G}} : std::map<std::string, Tensor>{},
                         with_respect_to(names));
            const auto d = with_g ? ex::gradients(y, {X, wqkv, bqkv, alibi, q, parts[1], s, a, wo}, G)
                                  : ex::gradients(y, {X, wqkv, bqkv, alibi, q, parts[1], s, a, wo});
            BOOST_REQUIRE(d.size() == names.size());
            for (std::size_t i = 0; i < names.size(); ++i) {
                BOOST_TEST_CONTEXT(names[i]) {
                    BOOST_TEST((d[i].dtype() == DType::f64));
                    BOOST_TEST(d[i].shape() == reference.at(names[i]).shape());
                    BOOST_TEST(relative_diff(d[i], reference.at(names[i])) < 1e-12);
                    BOOST_TEST(max_abs(reference.at(names[i])) > 0.0);
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(gradients_of_the_seed_as_in_the_issue) {
    SeedExpr s;
    const Tensor x = s.w.x;  // f64, as the weights
    auto X = ex::input("X", x);
    auto q = ex::linear(X, ex::param("Wq", s.w.wq[1]), ex::param("bq", s.w.bq[1])).named("Q");
    auto k = ex::linear(X, ex::param("Wk", s.w.wk[1]), ex::param("bk", s.w.bk[1])).named("K");
    auto v = ex::linear(X, ex::param("Wv", s.w.wv[1]), ex::param("bv", s.w.bv[1])).named("V");
    auto A = ex::softmax(ex::scale(ex::matmul(q, ex::transpose(k)), std::sqrt(0.5))).named("A");
    auto O = ex::matmul(A, v).named("O");
    const auto d = ex::gradients(O, {X, q});
    const Graph g = ex::to_graph(O, "attention");
    const Gradients reference = backward(g, run(g, test::keep_all()), {}, with_respect_to({"X", "Q"}));
    BOOST_TEST(relative_diff(d[0], reference.at("X")) < 1e-12);
    BOOST_TEST(relative_diff(d[1], reference.at("Q")) < 1e-12);
}

// ---- errors ----------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(errors_name_the_node_and_shapes) {
    auto X = ex::input("X", graphs::random_tensor({3, 4}, DType::f64, 1));
    auto W = ex::param("W", graphs::random_tensor({3, 4}, DType::f64, 2));
    auto bad = ex::matmul(X, W).named("bad");
    auto message = [](auto&& f) {
        try {
            f();
        } catch (const ShapeError& e) {
            return std::string(e.what());
        }
        return std::string("no ShapeError");
    };
    const std::string direct = message([&] { ex::evaluate(bad); });
    BOOST_TEST(direct.find("node 'bad' (MatMul)") != std::string::npos, direct);
    BOOST_TEST(direct.find("X (3x4), W (3x4)") != std::string::npos, direct);
    const std::string lowered = message([&] { ex::to_graph(bad, "g"); });
    BOOST_TEST(lowered.find("node 'bad' (MatMul)") != std::string::npos, lowered);
    const std::string chain = message([&] { ex::evaluate(ex::add(X, ex::transpose(W))); });
    BOOST_TEST(chain.find("an unnamed Add expression: shapes (3x4) and (4x3) do not broadcast") != std::string::npos,
               chain);
    BOOST_CHECK_THROW(ex::evaluate(ex::add(X, ex::input("F", graphs::random_tensor({3, 4}, DType::f32, 3)))),
                      GraphError);  // mixed dtypes need a dtype
    BOOST_CHECK_THROW(ex::gradients(bad, {ex::input("elsewhere", Tensor(Array<double>{1.0}))}), GraphError);
    auto twice = ex::add(X.named("X1"), X.named("X2"));
    BOOST_CHECK_THROW(ex::to_graph(twice, "g"), GraphError);  // one leaf, two names
}

// ---- an op of the caller's own --------------------------------------------------------------

namespace {
struct SquareAttrs {};
}  // namespace
BOOST_AUTO_TEST_SUITE_END()  // Hana adapts structs in the global namespace only
BOOST_HANA_ADAPT_STRUCT(test_expr::SquareAttrs);
BOOST_AUTO_TEST_SUITE(test_expr)
namespace {
// y = x², elementwise
struct Square {
    static constexpr const char* name = "Square";
    static constexpr int min_inputs = 1, max_inputs = 1;
    using Attrs = SquareAttrs;
    static Shape infer_shape(const Attrs&, const std::vector<Shape>& in) { return in[0]; }
    static std::string formula(const Attrs&, const std::vector<std::string>& v) { return v[0] + "²"; }
    template <class T>
    static void forward(const Attrs&, In<T> in, Out<T> out) {
        for (std::size_t i = 0; i < in[0]->size(); ++i) out[0]->data()[i] = in[0]->data()[i] * in[0]->data()[i];
    }
    // in the forward pass this was: y = x²
    template <class T>
    static void backward(const Attrs&, In<T> in, In<T>, In<T> dout, Out<T> din) {
        if (!din[0]) return;
        for (std::size_t i = 0; i < in[0]->size(); ++i) din[0]->data()[i] += 2 * in[0]->data()[i] * dout[0]->data()[i];
    }
};
}  // namespace

BOOST_AUTO_TEST_CASE(an_op_of_ones_own_evaluates_and_differentiates) {
    const Tensor x = Array<double>{{1.0, -2.0}, {0.5, 3.0}};
    auto X = ex::input("X", x);
    auto y = ex::scale(ex::node<Square>({}, ex::add(X, X)), 0.25);  // 0.25 (2x)² = x²
    const Tensor value = ex::evaluate(y);
    const auto d = ex::gradients(y, {X});
    const double want[] = {1.0, 4.0, 0.25, 9.0}, slope[] = {2.0, -4.0, 1.0, 6.0};  // x², 2x
    for (std::size_t i = 0; i < 4; ++i) {
        BOOST_TEST(value.at_flat(i) == want[i]);
        BOOST_TEST(d[0].at_flat(i) == slope[i]);
    }
}

// ---- the vocabulary's named functions ----------------------------------------------------

BOOST_AUTO_TEST_CASE(the_vocabularys_named_functions_agree_with_plain_loops) {
    // x (2, 3), z (2, 3) without zeros, s (3): every named function of the elementwise,
    // reduction, index and normalization ops, evaluated directly and through a lowered graph,
    // against the formula computed here element by element
    const Array<double> xa = {{0.5, -1.25, 2.0}, {-0.75, 1.5, 0.25}};
    const Array<double> za = {{1.0, -0.5, 2.0}, {0.5, 2.5, -1.5}};
    const Array<double> sa = {0.5, 2.0, -1.0};
    const auto x = ex::input("x", Tensor(xa));
    const auto z = ex::input("z", Tensor(za));
    const auto s = ex::param("s", Tensor(sa));
    const auto picked = ex::where(ex::greater(x, z), ex::exp(x), ex::neg(ex::sqrt(ex::mul(z, z))));
    const auto mixed = ex::add(ex::div(ex::sub(ex::tanh(x), ex::sin(z)), ex::pow(z, 2.0)),
                               ex::mul(ex::cos(x), ex::erf(ex::log(ex::mul(z, z)))));
    const auto flags = ex::add(ex::equal(x, x), ex::less(x, z));
    const auto sums = ex::reduce_sum(x, {1}, false);
    const auto means = ex::reduce_mean(z, {0});
    const auto maxes = ex::reduce_max(x, {});
    const auto rms = ex::rms_normalization(x, s);
    const auto layer = ex::layer_normalization(x, s, s);
    const Array<double> indices = {1, 0, 1};
    const auto rows = ex::gather(x, ex::input("i", Tensor(indices)), 0);
    const auto wide = ex::expand(ex::range(0, 3), {2, 3});

    using Shape2 = Array<double>::shape_type;
    Array<double> want_picked(xa.shape()), want_mixed(xa.shape()), want_flags(xa.shape()), want_rms(xa.shape()),
        want_layer(xa.shape()), want_rows(Shape2{3, 3}), want_wide(Shape2{2, 3}), want_sums(Shape2{2}),
        want_means(Shape2{1, 3}), want_maxes(Shape2{1, 1});
    double want_max = -1e300;
    for (std::size_t r = 0; r < 2; ++r) {
        double sq = 0, sum = 0, var = 0;
        for (std::size_t c = 0; c < 3; ++c) sq += xa(r, c) * xa(r, c), sum += xa(r, c);
        const double mean = sum / 3;
        for (std::size_t c = 0; c < 3; ++c) var += (xa(r, c) - mean) * (xa(r, c) - mean) / 3;
        want_sums(r) = sum;
        for (std::size_t c = 0; c < 3; ++c) {
            const double a = xa(r, c), b = za(r, c);
            want_picked(r, c) = a > b ? std::exp(a) : -std::sqrt(b * b);
            want_mixed(r, c) = (std::tanh(a) - std::sin(b)) / std::pow(b, 2.0) + std::cos(a) * std::erf(std::log(b * b));
            want_flags(r, c) = 1.0 + (a < b ? 1.0 : 0.0);
            want_rms(r, c) = a / std::sqrt(sq / 3 + 1e-5) * sa(c);
            want_layer(r, c) = (a - mean) / std::sqrt(var + 1e-5) * sa(c) + sa(c);
            want_max = std::max(want_max, a);
            want_wide(r, c) = static_cast<double>(c);
        }
    }
    for (std::size_t c = 0; c < 3; ++c) {
        want_means(0, c) = (za(0, c) + za(1, c)) / 2;
        for (std::size_t r = 0; r < 3; ++r) want_rows(r, c) = xa(r == 1 ? 0 : 1, c);
    }
    const auto check = [](const auto& e, const Tensor& want, const char* what) {
        BOOST_TEST_CONTEXT(what) {
            const Tensor direct = ex::evaluate(e, DType::f64);
            const Graph g = ex::to_graph(e, what, {DType::f64, {}});
            BOOST_TEST(direct.shape() == want.shape());
            BOOST_TEST(test::max_abs_diff(direct, want) < 1e-12);
            BOOST_TEST(test::max_abs_diff(run(g).at(g, g.value(g.outputs()[0]).name), want) < 1e-12);
        }
    };
    check(picked, Tensor(want_picked), "where_greater_exp_neg_sqrt_mul");
    check(mixed, Tensor(want_mixed), "div_sub_tanh_sin_pow_cos_erf_log");
    check(flags, Tensor(want_flags), "equal_less");
    check(sums, Tensor(want_sums), "reduce_sum");
    check(means, Tensor(want_means), "reduce_mean");
    want_maxes(0, 0) = want_max;
    check(maxes, Tensor(want_maxes), "reduce_max");
    check(rms, Tensor(want_rms), "rms_normalization");
    check(layer, Tensor(want_layer), "layer_normalization");
    check(rows, Tensor(want_rows), "gather");
    check(wide, Tensor(want_wide), "expand_range");
}

BOOST_AUTO_TEST_SUITE_END()  // test_expr
