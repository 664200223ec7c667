// Pow: shape rule, forward against hand-computed powers and a plain loop over std::pow (f64,
// f32; bit-identical at 1, 2 and 4 threads), NaN for a negative base to a fractional power
// (and `run --check-finite` naming the node), backward against the engine's gradcheck.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_pow)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

BOOST_AUTO_TEST_CASE(shape_rule_and_attributes) {
    BOOST_TEST((infer("Pow", {{"exponent", 2}}, {{2, 3}})[0] == Shape{2, 3}));
    BOOST_CHECK_THROW(op_attrs("Pow", nullptr), GraphError);  // exponent is required
    BOOST_CHECK_THROW(op_attrs("Pow", {{"exponent", "two"}}), GraphError);
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3}));
    BOOST_TEST((attngraph::pow(a, 3).shape() == Shape{2, 3}));
    BOOST_TEST(std::pow(2.0, 3.0) == 8.0);  // the C function stays usable next to the op's
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const Array<double> x = array_of({4}, {2, 3, -2, 0.25});
    BOOST_TEST(rel_diff(run_one("Pow", {{"exponent", 2}}, {x}, DType::f64)[0], array_of({4}, {4, 9, 4, 0.0625})) ==
               0.0);
    BOOST_TEST(rel_diff(run_one("Pow", {{"exponent", 3}}, {x}, DType::f64)[0], array_of({4}, {8, 27, -8, 0.015625})) <
               1e-15);
    BOOST_TEST(rel_diff(run_one("Pow", {{"exponent", -1}}, {x}, DType::f64)[0],
                        array_of({4}, {0.5, 1.0 / 3, -0.5, 4})) < 1e-15);
    BOOST_TEST(rel_diff(run_one("Pow", {{"exponent", 0.5}}, {array_of({3}, {4, 9, 0})}, DType::f64)[0],
                        array_of({3}, {2, 3, 0})) < 1e-15);
}

BOOST_AUTO_TEST_CASE(negative_base_fractional_power_is_nan) {
    for (DType dt : {DType::f64, DType::f32}) {
        const Doubles y = run_one("Pow", {{"exponent", 0.5}}, {array_of({3}, {4, -4, 1})}, dt);
        BOOST_TEST(y[0](0) == 2.0);
        BOOST_TEST(std::isnan(y[0](1)));
        BOOST_TEST(y[0](2) == 1.0);
    }
}

BOOST_AUTO_TEST_CASE(forward_matches_plain_loop) {
    const Array<double> in = uniform_array({3, 50, 81}, 1, 0.1, 3);
    for (double p : {2.0, 3.0, 0.5, -1.5, 1.0, 2.7}) {
        Array<double> ref = in;
        for (std::size_t i = 0; i < ref.size(); ++i) ref.data()[i] = std::pow(in.data()[i], p);
        check_against_reference("Pow", {{"exponent", p}}, {in}, {ref}, 1e-13, 2e-5);
    }
    // integer powers of negative bases are real
    const Array<double> neg = uniform_array({3, 50, 81}, 2, -2, 2);
    Array<double> cube = neg;
    for (std::size_t i = 0; i < cube.size(); ++i) cube.data()[i] = neg.data()[i] * neg.data()[i] * neg.data()[i];
    check_against_reference("Pow", {{"exponent", 3}}, {neg}, {cube}, 1e-13, 2e-5);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    for (double p : {2.0, 3.0, 0.5, -1.5, 1.0})
        BOOST_TEST(gradcheck("Pow", {{"exponent", p}}, {uniform_array({2, 3, 4}, 2, 0.3, 2)}) < 1e-7);
    BOOST_TEST(gradcheck("Pow", {{"exponent", 3}}, {uniform_array({2, 3}, 3, -2, 2)}) < 1e-7);
}

BOOST_AUTO_TEST_CASE(check_finite_names_the_nan_node) {
    TempDir d;
    const nlohmann::json doc = {
        {"name", "pow_nan"},
        {"tensors", {{"x", {{"kind", "input"}, {"shape", {3}}, {"data", {4, -4, 1}}}}}},
        {"nodes", {{{"name", "root"}, {"op", "Pow"}, {"inputs", {"x"}}, {"attrs", {{"exponent", 0.5}}}}}}};
    {
        std::ofstream f(d.path / "pow.json");
        f << doc.dump(1);
    }
    const CliResult r = run_cli("run pow.json --check-finite", d.path);
    BOOST_TEST(r.code != 0);
    BOOST_TEST(r.err.rfind("error: ", 0) == 0u, r.err);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
    BOOST_TEST(r.err.find("pow.json") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("node 'root' (Pow)") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("non-finite") != std::string::npos, r.err);
    // without --check-finite the NaN is printed, and the run succeeds
    const CliResult ok = run_cli("run pow.json", d.path);
    BOOST_TEST(ok.code == 0, ok.err);
    BOOST_TEST(ok.out.find("nan") != std::string::npos, ok.out);
}

BOOST_AUTO_TEST_SUITE_END()
