// .npy files as numpy writes them: every dtype attngraph accepts, Fortran order (np.save of
// W.T), big-endian data, format versions 2 and 3, read against the values numpy itself
// reports (written as JSON by the same python3 run). Needs python3 with numpy
// (scripts/install-deps.sh installs python3-numpy); without it the test fails.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <limits>

#include "engine/error.hpp"
#include "engine/npy.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_npy_formats)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Each case: a name, the numpy expression, and how np.save writes it (the version option of
// np.lib.format.write_array for versions 2 and 3).
const char* generator = R"PY(
import json, sys, numpy as np
from numpy.lib import format as fmt
out = sys.argv[1]
rng = np.random.default_rng(7)
W = rng.standard_normal((3, 5))
cases = {
    'bool': np.array([[True, False, True], [False, False, True]]),
    'int8': np.array([-128, -1, 0, 5, 127], dtype=np.int8),
    'int16': np.array([[-32768, 12], [300, 32767]], dtype=np.int16),
    'int32': np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
    'int64': np.array([-(2**24), -3, 0, 2**24], dtype=np.int64),
    'uint8': np.array([0, 1, 200, 255], dtype=np.uint8),
    'uint16': np.array([0, 65535], dtype=np.uint16),
    'uint32': np.array([7, 16777216], dtype=np.uint32),
    'float16': np.array([[0.5, -1.25, 65504.0], [6.1035e-05, 5.96e-08, -0.0]], dtype=np.float16),
    'float32': rng.standard_normal((2, 3, 4)).astype(np.float32),
    'float64': rng.standard_normal((4, 2)),
    'fortran_f64': W.T,
    'fortran_f32_3d': np.asfortranarray(rng.standard_normal((2, 3, 4)).astype(np.float32)),
    'fortran_i32': np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    'big_f32': rng.standard_normal((3, 2)).astype('>f4'),
    'big_f64': rng.standard_normal((5,)).astype('>f8'),
    'big_i64': np.array([[1, -2], [3, -16777216]], dtype='>i8'),
    'big_f16': np.array([1.5, -2.0, 0.333], dtype='>f2'),
    'big_fortran_f64': np.asfortranarray(rng.standard_normal((2, 3))).astype('>f8', order='F'),
    'scalar': np.float64(2.5) * np.ones(()),
}
expect = {}
for name, a in cases.items():
    np.save(f'{out}/{name}.npy', a)
    expect[name] = {'shape': list(a.shape), 'values': np.asarray(a, dtype=np.float64).ravel(order='C').tolist(),
                    'fortran': bool(a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous),
                    'descr': fmt.dtype_to_descr(a.dtype)}
for version in [(2, 0), (3, 0)]:
    name = f'version{version[0]}'
    a = rng.standard_normal((2, 2)).astype(np.float32)
    with open(f'{out}/{name}.npy', 'wb') as f:
        fmt.write_array(f, a, version=version)
    expect[name] = {'shape': [2, 2], 'values': a.astype(np.float64).ravel().tolist(), 'fortran': False,
                    'descr': '<f4'}
# integers no f32 can hold exactly
np.save(f'{out}/int32_big.npy', np.array([1, 16777217], dtype=np.int32))
np.save(f'{out}/uint64_big.npy', np.array([2**63 + 5], dtype=np.uint64))
np.save(f'{out}/complex.npy', np.array([1 + 2j]))
np.save(f'{out}/strings.npy', np.array(['ab', 'c']))
with open(f'{out}/expect.json', 'w') as f:
    json.dump(expect, f)
)PY";

struct Generated {
    TempDir tmp;
    json expect;
    Generated() {
        std::ofstream(tmp.path / "gen.py") << generator;
        const std::string cmd = "/usr/bin/python3 '" + (tmp.path / "gen.py").string() + "' '" + tmp.path.string() + "'";
        BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, "python3 with numpy is needed (scripts/install-deps.sh)");
        expect = json::parse(slurp(tmp.path / "expect.json"));
    }
};

std::string error_of(const fs::path& p, DType to) {
    try {
        load_npy(p, std::size_t(1) << 32, to);
    } catch (const IoError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(npy_formats)

BOOST_AUTO_TEST_CASE(every_dtype_order_and_version_numpy_writes_reads_back_its_values) {
    Generated g;
    BOOST_TEST_REQUIRE(g.expect.size() == 22u);
    for (const auto& [name, want] : g.expect.items()) {
        for (const DType to : {DType::f32, DType::f64}) {
            BOOST_TEST_CONTEXT(name << " (" << want["descr"].get<std::string>() << ") as " << to_string(to)) {
                const Tensor t = load_npy(g.tmp.path / (name + ".npy"), std::size_t(1) << 32, to);
                BOOST_TEST((t.dtype() == to));
                BOOST_TEST(json(t.shape()) == want["shape"]);
                const auto& values = want["values"];
                BOOST_TEST_REQUIRE(t.size() == values.size());
                for (std::size_t i = 0; i < t.size(); ++i) {
                    const double v = values[i].get<double>();
                    // f32 holds what f16/f32 files hold exactly; f64 files rounded to f32 once
                    const double expected = to == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
                    BOOST_TEST(t.at_flat(i) == expected, name << "[" << i << "]");
                }
            }
        }
    }
    // without a target dtype floats keep their width and integers become f64
    BOOST_TEST(to_string(load_npy(g.tmp.path / "float16.npy").dtype()) == "f32");
    BOOST_TEST(to_string(load_npy(g.tmp.path / "big_f64.npy").dtype()) == "f64");
    BOOST_TEST(to_string(load_npy(g.tmp.path / "int8.npy").dtype()) == "f64");
    BOOST_TEST(g.expect["fortran_f64"]["fortran"] == true);  // the case is what it says
    BOOST_TEST(g.expect["big_fortran_f64"]["descr"] == ">f8");
}

BOOST_AUTO_TEST_CASE(integers_a_dtype_cannot_hold_exactly_are_refused) {
    Generated g;
    const std::string e = error_of(g.tmp.path / "int32_big.npy", DType::f32);
    BOOST_TEST(
        e.find("int32_big.npy: integer 16777217 at flat index 1 is beyond 2^24 and cannot be held exactly in f32") !=
            std::string::npos,
        e);
    BOOST_TEST(error_of(g.tmp.path / "int32_big.npy", DType::f64) == "");
    const std::string e64 = error_of(g.tmp.path / "uint64_big.npy", DType::f64);
    BOOST_TEST(e64.find("integer 9223372036854775813 at flat index 0 is beyond 2^53") != std::string::npos, e64);
}

// A finite float that f32 cannot hold would become infinite: refused in f32, as an integer
// f32 cannot hold exactly is; f64 takes it, and an infinity given as one stays one.
BOOST_AUTO_TEST_CASE(floats_beyond_f32s_range_are_refused_in_f32) {
    TempDir tmp;
    const double inf = std::numeric_limits<double>::infinity();
    save_npy(tmp.path / "big.npy", Tensor(Array<double>({1.0, 3e38, -inf, -1e39})));
    save_npy(tmp.path / "edge.npy", Tensor(Array<double>({1.0, 3e38, -inf, -3.4e38})));
    const std::string e = error_of(tmp.path / "big.npy", DType::f32);
    BOOST_TEST(e.find("big.npy: value -1e+39 at flat index 3 is beyond f32's range") != std::string::npos, e);
    BOOST_TEST(error_of(tmp.path / "big.npy", DType::f64) == "");
    BOOST_TEST(load_npy(tmp.path / "big.npy", 16, DType::f64).at_flat(3) == -1e39);
    const Tensor edge = load_npy(tmp.path / "edge.npy", 16, DType::f32);
    BOOST_TEST(edge.at_flat(1) == static_cast<double>(3e38f));
    BOOST_TEST(edge.at_flat(2) == -inf);
    BOOST_TEST(edge.at_flat(3) == static_cast<double>(-3.4e38f));
}

BOOST_AUTO_TEST_CASE(complex_and_string_arrays_are_refused_naming_the_dtype) {
    Generated g;
    const std::string c = error_of(g.tmp.path / "complex.npy", DType::f32);
    BOOST_TEST(c.find("complex.npy: dtype '<c16' is not supported") != std::string::npos, c);
    const std::string s = error_of(g.tmp.path / "strings.npy", DType::f32);
    BOOST_TEST(s.find("strings.npy: dtype '<U2' is not supported") != std::string::npos, s);
}

BOOST_AUTO_TEST_CASE(run_takes_an_integer_input_and_a_transposed_weight) {
    // --input with an int64 file and a graph whose weight is np.save(W.T): the result is
    // compared with numpy's X @ W.T computed in the same script
    TempDir tmp;
    const char* script = R"PY(
import json, sys, numpy as np
d = sys.argv[1]
X = np.arange(6, dtype=np.int64).reshape(2, 3) - 2
W = np.array([[1.0, 0.5, -1.0], [2.0, 0.0, 0.25]])
np.save(f'{d}/x.npy', X)
np.save(f'{d}/wt.npy', W.T)
g = {'name': 'g', 'dtype': 'f64', 'tensors': {'X': {'kind': 'input', 'shape': [2, 3], 'data': [[0, 0, 0], [0, 0, 0]]},
     'W': {'kind': 'param', 'npy': 'wt.npy'}}, 'nodes': [{'name': 'Y', 'op': 'MatMul', 'inputs': ['X', 'W']}],
     'outputs': ['Y']}
json.dump(g, open(f'{d}/g.json', 'w'))
json.dump((X @ W.T).ravel().tolist(), open(f'{d}/y.json', 'w'))
)PY";
    std::ofstream(tmp.path / "gen.py") << script;
    BOOST_TEST_REQUIRE(
        std::system(
            ("/usr/bin/python3 '" + (tmp.path / "gen.py").string() + "' '" + tmp.path.string() + "'").c_str()) == 0);
    const CliResult r = run_cli("run g.json --input X=x.npy --trace t", tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(tmp.path / "t" / "Y.npy");
    const json want = json::parse(slurp(tmp.path / "y.json"));
    BOOST_TEST_REQUIRE(y.size() == want.size());
    for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y.at_flat(i) == want[i].get<double>());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_npy_formats
