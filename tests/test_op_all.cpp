// Every built-in op through the op-test harness (support/op_test.hpp), one data-driven case
// per sample: forward in f32 and f64 through its definition and through the executor at 1,
// 2, 4 and 8 threads, bit for bit; backward the same way in f32 and f64, and against central
// finite differences (engine/gradcheck). The large samples are big enough for the ops' own
// parallel chunks; every op registered must have samples. The op's own file
// (test_op_<op>.cpp) checks its shape rule and its numbers against hand computation.
#include <filesystem>
#include <ostream>
#include <set>
#include <sstream>
#include <string>

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "support/helpers.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_all)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;
namespace bdata = boost::unit_test::data;
using nlohmann::json;

namespace {

struct Sample {
    std::string op;
    json attrs;
    std::vector<Shape> inputs;
    std::vector<bool> needs = {};  // inputs that get a gradient (empty: all)
};

std::ostream& operator<<(std::ostream& out, const Sample& s) {
    out << s.op << " " << s.attrs.dump() << " on";
    for (const auto& shape : s.inputs) out << " " << shape_str(shape);
    return out;
}

// small enough for finite differences
const std::vector<Sample> small = {
    {"Linear", nullptr, {{3, 4, 5}, {5, 6}, {6}}},
    {"Linear", nullptr, {{4, 3}, {3, 2}}},
    {"Transpose", nullptr, {{3, 4}}},
    {"Transpose", {{"perm", {2, 0, 1}}}, {{2, 3, 4}}},
    {"MatMul", nullptr, {{2, 3, 4}, {4, 5}}},
    {"MatMul", nullptr, {{2, 1, 3, 2}, {3, 2, 4}}},
    {"Scale", {{"factor", -0.7}}, {{3, 4}}},
    {"Softmax", nullptr, {{3, 5}}},
    {"Softmax", {{"axis", 0}}, {{3, 4, 2}}},
    {"Concat", nullptr, {{2, 3}, {2, 4}, {2, 1}}},
    {"Concat", {{"axis", 0}}, {{1, 3}, {2, 3}}},
    {"Add", nullptr, {{2, 3}, {3}}},
    {"Add", nullptr, {{2, 1, 4}, {3, 1}}},
    {"Mask", {{"pattern", "causal"}}, {{2, 3, 3}}},
    {"Mask", {{"pattern", "window"}, {"window", 2}, {"causal", true}}, {{4, 5}}},
    {"Mask", {{"pattern", "padding"}, {"lengths", {3, 1}}}, {{2, 2, 3}}},
    {"Mask", nullptr, {{2, 3, 3}, {3, 3}}, {true, false}},
    {"Slice", {{"start", 1}, {"end", 3}}, {{3, 5}}},
    {"Slice", {{"axis", 1}, {"start", 0}, {"end", 2}}, {{2, 3, 4}}},
    {"Split", {{"parts", 3}}, {{2, 2, 6}}},
    {"Split", {{"axis", 0}, {"sizes", {1, 2}}}, {{3, 2}}},
    {"Reshape", {{"shape", {-1, 2}}}, {{2, 3, 2}}},
    {"Permute", {{"perm", {0, 2, 1, 3}}}, {{2, 3, 2, 2}}},
    {"Alibi", {{"offset", 0}}, {{2, 3, 4, 5}, {3}}},
    {"Alibi", {{"offset", 3}}, {{2, 1, 4}, {2}}},
    {"Mask", {{"pattern", "causal"}, {"offset", 1}, {"mask_type", "additive"}}, {{2, 3, 4}, {3, 4}}},
    {"Reshape", {{"shape", {-1}}, {"keep_leading", 1}, {"keep_trailing", 1}}, {{2, 3, 2, 2}}},
};

// large enough for the ops' parallel chunks (and the executor's parallel path for gradients)
const std::vector<Sample> large = {
    {"Linear", nullptr, {{256, 128}, {128, 96}, {96}}},
    {"Transpose", nullptr, {{300, 257}}},
    {"MatMul", nullptr, {{4, 200, 64}, {64, 150}}},
    {"Scale", {{"factor", 0.125}}, {{300, 301}}},
    {"Softmax", nullptr, {{300, 257}}},
    {"Softmax", {{"axis", 0}}, {{300, 257}}},
    {"Concat", nullptr, {{300, 100}, {300, 157}}},
    {"Add", nullptr, {{300, 257}, {257}}},
    {"Mask", {{"pattern", "causal"}}, {{4, 128, 128}}},
    {"Slice", {{"axis", 1}, {"start", 10}, {"end", 200}}, {{300, 257}}},
    {"Split", {{"parts", 3}}, {{300, 258}}},
    {"Reshape", {{"shape", {-1, 128}}}, {{300, 256}}},
    {"Permute", {{"perm", {0, 2, 1, 3}}}, {{16, 64, 8, 32}}},
    {"Alibi", {{"offset", 0}}, {{4, 128, 128}, {4}}},
};

std::vector<Array<double>> inputs_of(const Sample& s) {
    std::vector<Array<double>> in;
    std::uint64_t seed = 1;
    for (const auto& shape : s.inputs) in.push_back(random_array(shape, seed++));
    return in;
}

std::vector<Array<float>> to_f32(const std::vector<Array<double>>& in) {
    std::vector<Array<float>> out;
    for (const auto& a : in) out.push_back(Tensor(a).cast(DType::f32).as<float>());
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(every_op)

BOOST_AUTO_TEST_CASE(every_op_has_samples_or_its_own_reference_test) {
    std::set<std::string> small_ops, large_ops;
    for (const auto& s : small) small_ops.insert(s.op);
    for (const auto& s : large) large_ops.insert(s.op);
    // An op without samples here (the vocabulary ops, whose inputs need particular values:
    // indices, positions, conditions) is checked in a test_op_*.cpp of its own through the
    // same harness: check_against_reference (definition and executor at every thread count,
    // f32 and f64, against a plain loop) and, when it has a backward, gradcheck.
    std::string own_tests;
    for (const auto& entry : std::filesystem::directory_iterator(source_dir() / "tests"))
        if (entry.path().filename().string().rfind("test_op_", 0) == 0 && entry.path().filename() != "test_op_all.cpp")
            own_tests += slurp(entry.path());
    const auto names = OpRegistry::instance().names();
    BOOST_TEST(names.size() >= 36u);
    for (const auto& name : names) {
        if (op_def(name).expand) continue;  // composite: tested through its expansion's ops
        if (small_ops.count(name) || large_ops.count(name)) {
            BOOST_TEST(small_ops.count(name) == 1u, name << " has no small sample");
            BOOST_TEST(large_ops.count(name) == 1u, name << " has no large sample");
            continue;
        }
        BOOST_TEST(own_tests.find("check_against_reference(\"" + name + "\"") != std::string::npos,
                   name << " has no samples here and no check_against_reference in a test_op_*.cpp");
        const OpDef& def = op_def(name);
        const int slots = def.max_inputs < 0 ? std::max(def.min_inputs, 1) : def.max_inputs;
        bool takes_gradient = false;  // a backward and an input slot it writes
        for (int i = 0; i < slots; ++i) takes_gradient = takes_gradient || def.has_grad(static_cast<std::size_t>(i));
        if (def.backward<double>() && takes_gradient)
            BOOST_TEST(own_tests.find("gradcheck(\"" + name + "\"") != std::string::npos,
                       name << " has a backward but no gradcheck in a test_op_*.cpp");
    }
}

BOOST_DATA_TEST_CASE(forward_definition_and_executor_agree, bdata::make(small) + bdata::make(large), sample) {
    const auto in = inputs_of(sample);
    const auto y64 = forward_all<double>(sample.op, sample.attrs, in);
    const auto y32 = forward_all<float>(sample.op, sample.attrs, to_f32(in));
    // and they compute the same op: f32 within rounding of f64
    BOOST_TEST_REQUIRE(y32.size() == y64.size());
    for (std::size_t k = 0; k < y64.size(); ++k) {
        Array<double> widened = Tensor(y32[k]).cast(DType::f64).as<double>();
        double scale = 1;
        for (double v : y64[k])
            if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
        BOOST_TEST(max_diff(widened, y64[k]) <= 1e-5 * scale);
    }
}

BOOST_DATA_TEST_CASE(backward_against_finite_differences, bdata::make(small), sample) {
    BOOST_TEST(gradcheck(sample.op, sample.attrs, inputs_of(sample), sample.needs) <= 1e-8);
}

BOOST_DATA_TEST_CASE(backward_definition_and_executor_agree_on_large_inputs, bdata::make(large), sample) {
    // the executor at 1, 2, 4 and 8 threads against the definition, f32 and f64 (no finite
    // differences: too many elements)
    const auto in = inputs_of(sample);
    const Graph graph = op_graph<double>(sample.op, sample.attrs, in);
    std::vector<Array<double>> G;
    for (std::size_t k = 0; k < graph.outputs().size(); ++k)
        G.push_back(random_array(graph.value(graph.outputs()[k]).shape, 77 + k));
    const std::vector<bool> needs = sample.needs.empty() ? std::vector<bool>(in.size(), true) : sample.needs;
    const auto d64 = backward_all<double>(sample.op, sample.attrs, in, G, needs);
    const auto d32 = backward_all<float>(sample.op, sample.attrs, to_f32(in), G, needs);
    double largest = 0;
    for (const auto& d : d64)
        for (double v : d) largest = std::max(largest, std::abs(v));
    BOOST_TEST(largest > 1e-3);  // not vacuous
    BOOST_TEST(d32.size() == d64.size());
}

BOOST_AUTO_TEST_SUITE_END()

// Issue 11's closed op set: `grep -rn "std::any" engine ops graphs cli inspect` prints nothing
// (attributes are a std::variant of the ops' Attrs types). The search is grep's: every file,
// every line, "std::any" anywhere in it (std::any_of too: std::ranges::any_of keeps it silent).
BOOST_AUTO_TEST_CASE(no_std_any_in_the_library_sources) {
    std::string hits;
    std::size_t files = 0;
    for (const char* dir : {"engine", "ops", "graphs", "cli", "inspect"})
        for (const auto& entry : std::filesystem::recursive_directory_iterator(source_dir() / dir)) {
            if (!entry.is_regular_file()) continue;
            ++files;
            std::istringstream in(slurp(entry.path()));
            std::string line;
            for (int n = 1; std::getline(in, line); ++n)
                if (line.find("std::any") != std::string::npos)
                    hits += entry.path().lexically_relative(source_dir()).string() + ":" + std::to_string(n) + ": " +
                            line + "\n";
        }
    BOOST_TEST(files > 100u);  // the folders were found
    BOOST_TEST(hits.empty(), "grep -rn \"std::any\" engine ops graphs cli inspect:\n" << hits);
}

BOOST_AUTO_TEST_SUITE_END()
