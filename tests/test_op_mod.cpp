// Mod: shape rule (numpy broadcasting), forward against hand-computed remainders of both signs
// (fmod and not) and a plain loop of the C library's fmod with broadcasting (f64, f32;
// bit-identical at 1, 2, 4 and 8 threads), backward against the engine's gradcheck and against
// torch.remainder's and torch.fmod's gradients.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_mod)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
using nlohmann::json;

namespace {
const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();
const json remainder = {{"fmod", false}}, fmod = {{"fmod", true}};
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts) {
    BOOST_TEST((infer("Mod", nullptr, {{2, 3}, {3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Mod", fmod, {{2, 1, 4}, {3, 1}})[0] == Shape{2, 3, 4}));
    BOOST_CHECK_THROW(infer("Mod", nullptr, {{2, 3}, {4}}), ShapeError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    Value b = g.input("b", zeros(DType::f32, {3}));
    BOOST_CHECK_THROW(g.node("Mod", {a}, op_attrs("Mod", nullptr), "one"), GraphError);
    BOOST_TEST((attngraph::mod(a, b, true).shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    // torch.remainder / numpy.mod take b's sign, torch.fmod / numpy.fmod a's; x mod 0 is NaN
    // (numpy's for floats), an infinite a NaN, an infinite b leaves a (fmod) or moves it by b
    const Array<double> a = array_of({10}, {7, -7, 7, -7, 5.5, -0.5, 6, 3, inf, 2});
    const Array<double> b = array_of({10}, {3, 3, -3, -3, 2, 2, 3, 0, 2, -inf});
    const std::vector<double> rem = {1, 2, -2, -1, 1.5, 1.5, 0, nan, nan, -inf};
    const std::vector<double> fm = {1, -1, 1, -1, 1.5, -0.5, 0, nan, nan, 2};
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles r = run_one("Mod", remainder, {a, b}, dt);
        const Doubles f = run_one("Mod", fmod, {a, b}, dt);
        for (std::size_t i = 0; i < rem.size(); ++i) {
            if (std::isnan(rem[i]))
                BOOST_TEST(std::isnan(r[0](i)), i);
            else
                BOOST_TEST(r[0](i) == rem[i], i);
            if (std::isnan(fm[i]))
                BOOST_TEST(std::isnan(f[0](i)), i);
            else
                BOOST_TEST(f[0](i) == fm[i], i);
        }
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    // 12,150 elements broadcast against a row of divisors of both signs
    const Array<double> x = uniform_array({3, 50, 81}, 1, -40, 40);
    Array<double> row = uniform_array({81}, 2, 0.5, 7);
    for (std::size_t j = 0; j < 81; j += 2) row.data()[j] = -row.data()[j];
    Array<double> by_fmod = x, by_rem = x;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double a = x.data()[i], b = row.data()[i % 81];
        const double r = std::fmod(a, b);
        by_fmod.data()[i] = r;
        by_rem.data()[i] = r != 0 && (r < 0) != (b < 0) ? r + b : r;
    }
    check_against_reference("Mod", fmod, {x, row}, {by_fmod}, 0, 1e-5);
    check_against_reference("Mod", remainder, {x, row}, {by_rem}, 0, 1e-5);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    // (uniform values away from the jumps at a/b whole: the finite difference's step crosses none)
    BOOST_TEST(gradcheck("Mod", remainder, {uniform_array({2, 3, 4}, 2, 0.1, 0.9), uniform_array({3, 4}, 3, 1.1, 2)}) <
               1e-7);
    BOOST_TEST(gradcheck("Mod", fmod, {uniform_array({2, 1, 4}, 4, -0.9, -0.1), uniform_array({3, 1}, 5, 1.1, 2)}) <
               1e-7);
}

BOOST_AUTO_TEST_CASE(backward_is_torchs) {
    // PyTorch 1.13: a = [7, -7, 7, -7, 5.5, -0.5], b = [3, 3, -3, -3, 2, 2];
    // torch.remainder(a, b).sum().backward(): a.grad all 1, b.grad = [-2, 3, 3, -2, -2, 1];
    // torch.fmod(a, b): a.grad all 1, b.grad = [-2, 2, 2, -2, -2, 0]
    const Array<double> a = array_of({6}, {7, -7, 7, -7, 5.5, -0.5}), b = array_of({6}, {3, 3, -3, -3, 2, 2});
    const Array<double> ones = array_of({6}, {1, 1, 1, 1, 1, 1});
    const auto r = backward_all<double>("Mod", remainder, {a, b}, {ones}, {true, true});
    BOOST_TEST(rel_diff(r[0], ones) == 0.0);
    BOOST_TEST(rel_diff(r[1], array_of({6}, {-2, 3, 3, -2, -2, 1})) == 0.0);
    const auto f = backward_all<double>("Mod", fmod, {a, b}, {ones}, {true, true});
    BOOST_TEST(rel_diff(f[0], ones) == 0.0);
    BOOST_TEST(rel_diff(f[1], array_of({6}, {-2, 2, 2, -2, -2, 0})) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
