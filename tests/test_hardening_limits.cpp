// Resource limits: tensors and node outputs over the memory limit are refused at load time,
// before anything is allocated; .npy headers that lie are refused; 100,000-node graphs and
// deeply nested JSON load and run without recursing deeply.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <sstream>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/sanitizers.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_hardening_limits)

using namespace attngraph;
namespace fs = std::filesystem;

namespace {

// The message of the exception of type E that `f` throws ("" when it throws none).
template <class E, class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Graph parse(const std::string& text, const LoadOptions& options = {}) {
    return parse_graph(text, fs::temp_directory_path(), "test.json", options);
}

// A .npy image written by hand from the format's definition (magic, version 1.0, header
// length, header padded with spaces to a multiple of 64 and ended by '\n', data).
std::string npy_bytes(const std::string& dict, std::size_t data_bytes) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(header.size() & 0xFF);
    out += static_cast<char>(header.size() >> 8);
    out += header;
    out += std::string(data_bytes, '\0');
    return out;
}

std::string npy_error(const std::string& bytes, std::size_t max_elements = std::size_t(1) << 32) {
    std::istringstream in(bytes);
    return error_of<IoError>([&] { load_npy(in, "mem.npy", max_elements); });
}

}  // namespace

// ---- memory limits ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_10e12_element_shape_is_refused_before_allocation) {
    // with the default limits: a std::bad_alloc (or worse) would mean it tried to allocate
    const std::string text = R"({"tensors": {"X": {"shape": [1000000, 1000000], "data": []}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})";
    const std::string e = error_of<ShapeError>([&] { parse(text); });
    BOOST_TEST(contains(e, "test.json: tensor 'X': shape (1000000x1000000) has 1000000000000 elements"), e);
    BOOST_TEST(contains(e, "over the limit of 2147483648"), e);
}

BOOST_AUTO_TEST_CASE(shape_products_that_overflow_are_refused) {
    BOOST_TEST(element_count_capped({std::size_t(1) << 32, std::size_t(1) << 32, 16}) == SIZE_MAX);
    BOOST_TEST(element_count_capped({std::size_t(1) << 32, std::size_t(1) << 31}) == std::size_t(1) << 63);
    BOOST_TEST(element_count_capped({std::size_t(1) << 20, 0, std::size_t(1) << 20}) == 0u);
    // empty, but its other sizes' strides would overflow a signed long (undefined in xtensor)
    BOOST_TEST(element_count_capped({std::size_t(1) << 40, 0, std::size_t(1) << 40}) == SIZE_MAX);
    // 2^32 · 2^32 · 16 wraps to 0 in plain size_t arithmetic
    const std::string text = R"({"tensors": {"X": {"shape": [4294967296, 4294967296, 16], "data": []}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})";
    const std::string e = error_of<ShapeError>([&] { parse(text); });
    BOOST_TEST(contains(e, "too many elements"), e);
    // an empty tensor whose other sizes multiply past a signed long: refused as too large
    const std::string empty = R"({"tensors": {"X": {"shape": [0, 4611686018427387904, 4611686018427387904],
        "data": []}}, "nodes": [{"name": "Y", "op": "ReduceSum", "inputs": ["X"], "attrs": {"axes": [0]}}]})";
    const std::string z = error_of<ShapeError>([&] { parse(empty); });
    BOOST_TEST(contains(z, "tensor 'X': shape (0x4611686018427387904x4611686018427387904) has too many elements"), z);
    // a node output that cannot exist: refused by the overflow guard, which names no
    // --max-memory it was not given
    const std::string wide = R"({"tensors": {"X": {"data": [[1]]}}, "nodes": [{"name": "Y", "op": "Expand",
        "inputs": ["X"], "attrs": {"shape": [2147483647, 2147483647, 2147483647, 2147483647]}}]})";
    const std::string r = error_of<ShapeError>([&] { parse(wide); });
    BOOST_TEST(contains(r, "node 'Y' (Expand) output 'Y' of shape (2147483647x2147483647x2147483647x2147483647)"), r);
    BOOST_TEST(contains(r, "over what a process can address"), r);
    BOOST_TEST(!contains(r, "memory limit"), r);
}

BOOST_AUTO_TEST_CASE(data_without_shape_is_held_to_the_limit) {
    const std::string text = R"({"tensors": {"X": {"data": [[1,2,3,4,5],[1,2,3,4,5],[1,2,3,4,5],[1,2,3,4,5]]}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})";
    LoadOptions o;
    o.max_bytes = 16 * 4;  // 16 f32 elements: 4x5 is 20
    const std::string e = error_of<ShapeError>([&] { parse(text, o); });
    BOOST_TEST(contains(e, "tensor 'X': shape (4x5) has 20 elements, over the limit of 16"), e);
    o.max_bytes = 20 * 4;
    const Graph g = parse(text, o);
    BOOST_TEST((g.value(0).shape == Shape{4, 5}));
    // the limit is in bytes of the graph's dtype: f64 halves the element count
    o.dtype = DType::f64;
    BOOST_TEST(contains(error_of<ShapeError>([&] { parse(text, o); }), "over the limit of 10"));
}

BOOST_AUTO_TEST_CASE(an_inferred_node_output_over_the_limit_is_refused_at_load) {
    // A (10^6 x 1) · B (1 x 10^6): 4 MB each, the product 10^12 elements (4 TB)
    test::TempDir dir;
    save_npy(dir.path / "a.npy", Tensor(Array<float>(Array<float>::shape_type{1000000, 1}, 1.0f)));
    save_npy(dir.path / "b.npy", Tensor(Array<float>(Array<float>::shape_type{1, 1000000}, 1.0f)));
    const std::string text = R"({"tensors": {"A": {"npy": "a.npy"}, "B": {"npy": "b.npy"}},
        "nodes": [{"name": "outer", "op": "MatMul", "inputs": ["A", "B"]},
                  {"name": "Y", "op": "Scale", "inputs": ["outer"], "attrs": {"factor": 2}}]})";
    const std::string e = error_of<ShapeError>([&] { parse_graph(text, dir.path, "outer.json"); });
    BOOST_TEST(contains(e, "outer.json: node 'outer' (MatMul) output 'outer' of shape (1000000x1000000) f32 needs "
                           "4000000000000 bytes, over the memory limit of 8589934592 bytes"),
               e);
    // the same check, for a graph built from C++ and given a limit
    const std::string text2 = R"({"tensors": {"A": {"npy": "a.npy"}}, "nodes": [
        {"name": "Y", "op": "Scale", "inputs": ["A"], "attrs": {"factor": 2}}]})";
    const Graph g = parse_graph(text2, dir.path, "small.json");
    check_memory(g, 8000000);
    const std::string total = error_of<ShapeError>([&] { check_memory(g, 7999999, true); });
    BOOST_TEST(contains(total, "its 2 values together need 8000000 bytes"), total);
    const std::string single = error_of<ShapeError>([&] { check_memory(g, 3999999); });
    BOOST_TEST(contains(single, "param tensor 'A' of shape (1000000x1) f32 needs 4000000 bytes"), single);
}

BOOST_AUTO_TEST_CASE(max_memory_on_the_command_line) {
    test::TempDir cwd;
    const auto seed = test::seed_graph().string();
    // the seed's largest tensor is Wo, 4x4 f32 (64 bytes); everything together is ~1.2 KB
    auto r = test::run_cli("run '" + seed + "' --max-memory 40", cwd.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err.rfind("error: " + seed + ": ", 0) == 0, r.err);
    BOOST_TEST(contains(r.err, "tensor 'Wo': shape (4x4) has 16 elements, over the limit of 10 (--max-memory)"), r.err);
    r = test::run_cli("run '" + seed + "' --max-memory 1K", cwd.path);
    BOOST_TEST(r.code == 0, r.err);
    // a full trace keeps every value: their total is checked before running
    r = test::run_cli("run '" + seed + "' --max-memory 200 --trace t", cwd.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(contains(r.err, "values together need"), r.err);
    BOOST_TEST(!fs::exists(cwd.path / "t"));
    for (const char* bad : {"-1G", "12X", "99999999999999999999", "G", "0", "16777216T"}) {
        r = test::run_cli("check '" + seed + "' --max-memory " + bad, cwd.path);
        BOOST_TEST(r.code == 1, bad);
        BOOST_TEST(r.err.rfind("error: --max-memory", 0) == 0, r.err);
    }
}

// ---- .npy headers ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(npy_headers_that_lie_are_refused) {
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    // the honest file loads
    {
        std::istringstream in(npy_bytes(dict, 48));
        const Tensor t = load_npy(in, "mem.npy");
        BOOST_TEST((t.shape() == Shape{3, 4}));
        BOOST_TEST(t.at_flat(11) == 0.0);
    }
    BOOST_TEST(contains(npy_error(npy_bytes(dict, 20)), "mem.npy: header says shape (3x4) <f4 = 48 bytes, file holds 20"));
    BOOST_TEST(contains(npy_error(npy_bytes(dict, 49)), "file holds 49"));
    // 10^12 elements declared, 16 bytes present: refused by the limit before any allocation
    const std::string huge = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }";
    BOOST_TEST(contains(npy_error(npy_bytes(huge, 16)), "shape (1000000x1000000) is larger than the limit"));
    // ... and by the file size when the limit would allow it
    BOOST_TEST(contains(npy_error(npy_bytes(huge, 16), SIZE_MAX), "header says shape (1000000x1000000)"));
    const std::string wraps = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }";
    BOOST_TEST(contains(npy_error(npy_bytes(wraps, 0), SIZE_MAX), "header says shape"));
}

BOOST_AUTO_TEST_CASE(malformed_npy_headers_are_refused) {
    const auto with_shape = [](const std::string& shape) {
        return npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", 0);
    };
    BOOST_TEST(contains(npy_error(with_shape("(abc,)")), "not a tuple of sizes"));
    BOOST_TEST(contains(npy_error(with_shape("(-1,)")), "not a tuple of sizes"));
    BOOST_TEST(contains(npy_error(with_shape("(,)")), "not a tuple of sizes"));
    BOOST_TEST(contains(npy_error(with_shape("(99999999999999999999,)")), "too large"));
    BOOST_TEST(contains(npy_error(with_shape("3")), "shape is not a tuple"));
    BOOST_TEST(contains(npy_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape':}", 0)),
                        "shape is not a tuple"));
    BOOST_TEST(contains(npy_error(npy_bytes("", 0)), "bad header"));
    BOOST_TEST(contains(npy_error(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16)),
                        "dtype '<c8' is not supported"));
    BOOST_TEST(contains(npy_error(npy_bytes("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24)),
                        "dtype '<U3' is not supported"));
    BOOST_TEST(contains(npy_error(std::string("\x93NUMPY\x01\x00\x00\x00", 10)), "bad header length"));
    BOOST_TEST(contains(npy_error("\x93NUM"), "bad magic"));
    BOOST_TEST(contains(npy_error(""), "bad magic"));
    std::string v9 = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    v9[6] = 9;
    BOOST_TEST(contains(npy_error(v9), "unsupported .npy version 9"));
    // a NUL in 'descr' cut the error line at it ("dtype '<f4"): control bytes are refused by
    // offset, and the whole message is one printable line
    const std::string nul =
        npy_error(npy_bytes(std::string("{'descr': '<f4") + '\0' + "x', 'fortran_order': False, 'shape': (2,), }", 8));
    BOOST_TEST(contains(nul, "bad header (control byte 0x00 at offset 14)"), nul);
    BOOST_TEST(nul.find('\0') == std::string::npos);
    BOOST_TEST(contains(npy_error(npy_bytes("{'descr': '<f4', 'fortran_order': False,\t'shape': (2,), }", 8)),
                        "bad header (control byte 0x09 at offset 40)"));  // numpy writes spaces
}

// ---- no deep recursion ---------------------------------------------------------------------

namespace {

// Under ThreadSanitizer 20,000: its shadow state makes a 100,000-node run take minutes there,
// and what it checks (the executor's hand-offs) does not need the size. Every other build,
// the release suite among them, runs 100,000.
#ifdef ATTNGRAPH_TSAN
constexpr std::size_t big = 20000;
#else
constexpr std::size_t big = 100000;
#endif

// X (1x4) through `big` Scale nodes in a chain, listed last node first (so the loader has to
// sort them) — or, `wide`, every node reading X.
std::string scale_graph(bool wide) {
    std::string nodes;
    for (std::size_t k = big; k-- > 0;) {
        const std::string in = wide || k == 0 ? std::string("X") : std::string("s").append(std::to_string(k - 1));
        const std::string factor = wide ? std::to_string(k % 7) : "1.0001";
        nodes.append(nodes.empty() ? "" : ",\n").append(R"({"name": "s)").append(std::to_string(k));
        nodes.append(R"(", "op": "Scale", "inputs": [")").append(in).append(R"("], "attrs": {"factor": )");
        nodes.append(factor).append("}}");
    }
    return R"({"name": "big", "tensors": {"X": {"kind": "input", "data": [[1, -2, 0.5, 3]]}}, "nodes": [)" + nodes +
           "]}";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_100000_node_chain_loads_and_runs) {
    const Graph g = parse(scale_graph(false));
    BOOST_TEST(g.nodes().size() == big);
    BOOST_TEST(g.nodes().front().name == "s0");
    BOOST_TEST(g.outputs().size() == 1u);
    // the reference: the same float multiplications in a plain loop
    float expected[4] = {1, -2, 0.5f, 3};
    for (std::size_t k = 0; k < big; ++k)
        for (float& v : expected) v = static_cast<float>(1.0001) * v;
    for (int threads : {1, 2}) {
        RunOptions o;
        o.threads = threads;
        const RunResult r = run(g, o);
        const Tensor& y = r.at(g, std::string("s").append(std::to_string(big - 1)));
        for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(y.at_flat(i) == expected[i]);
    }
    BOOST_TEST(expected[0] > 1.0f + 0.0001f * big);  // Bernoulli: 1.0001^big > 1 + big/10^4
}

BOOST_AUTO_TEST_CASE(a_100000_node_wide_graph_loads_and_runs) {
    const Graph g = parse(scale_graph(true));
    BOOST_TEST(g.outputs().size() == big);
    RunOptions o;
    o.threads = 2;
    const RunResult r = run(g, o);
    for (std::size_t k : {std::size_t(0), std::size_t(3), std::size_t(4321), big - 1}) {
        const Tensor& y = r.at(g, std::string("s").append(std::to_string(k)));
        const float f = static_cast<float>(k % 7);
        BOOST_TEST(y.at_flat(1) == f * -2.0f);
        BOOST_TEST(y.at_flat(3) == f * 3.0f);
    }
}

BOOST_AUTO_TEST_CASE(a_100000_node_graph_from_cpp) {
    GraphBuilder b("chain");
    Value v = b.input("X", Tensor(Array<double>{{1.0, 2.0}}));
    for (std::size_t k = 0; k < big; ++k) v = scale(v, k % 2 ? 2.0 : 0.5);
    b.output(v);
    const Graph g = b.build();
    BOOST_TEST(g.nodes().size() == big);
    // several runs: the executor once spawned a chain's second node twice (from the initial
    // scan for ready nodes and from the first node's task), which crashed one run in three
    for (int attempt = 0; attempt < 5; ++attempt) {
        RunOptions o;
        o.threads = 2;
        const RunResult r = run(g, o);
        BOOST_TEST(r.at(g, v.name()).at_flat(1) == 2.0);  // (0.5 · 2)^(big/2), exactly
    }
}

BOOST_AUTO_TEST_CASE(deeply_nested_json_gives_errors_not_stack_overflows) {
    const std::string deep = std::string(big, '[') + std::string(big, ']');
    const auto graph_with = [](const std::string& tensor, const std::string& attrs) {
        return R"({"tensors": {"X": )" + tensor + R"(}, "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": )" +
               attrs + "}]}";
    };
    const std::string data_error = error_of<GraphError>([&] { parse(graph_with(R"({"data": )" + deep + "}", "{}")); });
    BOOST_TEST(contains(data_error, "tensor 'X': \"data\" holds a list of 1 item where a number belongs"), data_error);
    const std::string shape_error =
        error_of<GraphError>([&] { parse(graph_with(R"({"shape": [)" + deep + R"(], "data": 1})", "{}")); });
    BOOST_TEST(contains(shape_error, "non-negative integers, got a list of 1 item"), shape_error);
    const std::string attr_error =
        error_of<GraphError>([&] { parse(graph_with(R"({"data": [1]})", R"({"factor": )" + deep + "}")); });
    BOOST_TEST(contains(attr_error, "attribute 'factor' has the wrong type (a list of 1 item)"), attr_error);
    // free text nests as deep as it likes (and is destroyed without recursion)
    const Graph g = parse(R"({"description": )" + deep + R"(, "tensors": {"X": {"data": [1]}},
        "nodes": [{"name": "Y", "op": "Scale", "inputs": ["X"], "attrs": {"factor": 2}}]})");
    BOOST_TEST(g.nodes().size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_hardening_limits
