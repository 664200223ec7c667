// The ONNX project's backend node tests (tests/data/onnx/, copied from ONNX v1.22, see its
// README): every case's model.onnx is imported, its inputs and expected outputs read from the
// .pb files with the ONNX library, and each output compared at rtol 1e-3 / atol 1e-6 (float16
// cases 5e-3). One line per case. Integer and bool graph inputs (Reshape shapes, Slice starts,
// masks) are bound as constants, as docs/onnx.md describes. An unsupported case fails; the
// cases listed in tests/data/onnx/known_failures.txt (ops not yet in attngraph) must still fail,
// so the list shrinks as they start passing.
#include <boost/test/unit_test.hpp>

#include <set>

#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "onnx/import.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_onnx_conformance)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = source_dir() / "tests" / "data" / "onnx";

std::set<std::string> known_failures() {
    std::set<std::string> out;
    std::istringstream in(slurp(data_dir / "known_failures.txt"));
    for (std::string line; std::getline(in, line);)
        if (!line.empty() && line[0] != '#') out.insert(line.substr(0, line.find(' ')));
    return out;
}

bool is_float_type(int t) {
    return t == 1 || t == 10 || t == 11 || t == 16;
}

// "" when the case passes, else why not.
std::string run_case(const fs::path& dir) {
    const fs::path model = dir / "model.onnx";
    const auto [input_names, output_names] = onnx_io_names(model);
    ImportOptions options;
    std::map<std::string, OnnxTensor> float_inputs;
    bool half = false;
    for (std::size_t i = 0; i < input_names.size(); ++i) {
        const OnnxTensor t = read_onnx_tensor(dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb"));
        half = half || t.elem_type == 10;
        if (is_float_type(t.elem_type)) {
            options.input_shapes[input_names[i]] = Shape(t.shape.begin(), t.shape.end());
            float_inputs[input_names[i]] = t;
        } else {
            options.constant_inputs[input_names[i]] = t;
        }
    }
    const ImportedModel imported = import_onnx(model, options);
    std::map<std::string, std::string> names(imported.names.begin(), imported.names.end());
    Graph graph = to_graph(imported, model);
    std::map<std::string, Tensor> replacements;
    for (const auto& [name, t] : float_inputs) {
        Array<float> a = xt::zeros<float>(Shape(t.shape.begin(), t.shape.end()));
        for (std::size_t k = 0; k < t.values.size(); ++k) a.data()[k] = static_cast<float>(t.values[k]);
        replacements[names.at(name)] = Tensor(std::move(a));
    }
    if (!replacements.empty()) graph = graph.with_tensors(replacements);
    const RunResult result = run(graph);
    const double rtol = half ? 5e-3 : 1e-3, atol = half ? 5e-3 : 1e-6;
    for (std::size_t k = 0; k < output_names.size(); ++k) {
        const OnnxTensor want = read_onnx_tensor(dir / "test_data_set_0" / ("output_" + std::to_string(k) + ".pb"));
        const auto it = names.find(output_names[k]);
        const std::string ours = it != names.end() ? it->second : graph.value(graph.outputs().at(k)).name;
        const Tensor& got = result.at(graph, graph.value(graph.outputs().at(k)).name);
        (void)ours;
        const Shape want_shape(want.shape.begin(), want.shape.end());
        if (got.shape() != want_shape)
            return "output " + output_names[k] + ": shape (" + shape_str(got.shape()) + "), expected (" +
                   shape_str(want_shape) + ")";
        for (std::size_t i = 0; i < want.values.size(); ++i) {
            const double g = got.at_flat(i), w = want.values[i];
            const bool same_inf = std::isinf(w) && g == w;
            if (!same_inf && !(std::fabs(g - w) <= atol + rtol * std::fabs(w)))
                return "output " + output_names[k] + "[" + std::to_string(i) + "] = " + std::to_string(g) +
                       ", expected " + std::to_string(w);
        }
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_onnx_backend_node_case) {
    const auto known = known_failures();
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(data_dir))
        if (e.is_directory()) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    BOOST_TEST_REQUIRE(cases.size() == 225u);
    std::size_t passed = 0, failed_as_known = 0;
    for (const auto& dir : cases) {
        const std::string name = dir.filename().string();
        std::string why;
        try {
            why = run_case(dir);
        } catch (const std::exception& e) {
            why = e.what();
            const auto pos = why.find(data_dir.string());
            if (pos != std::string::npos) why.erase(pos, data_dir.string().size() + 1);
        }
        const bool is_known = known.count(name) > 0;
        std::printf("%-70s %s%s%s\n", name.c_str(), why.empty() ? "pass" : (is_known ? "FAIL (known)" : "FAIL"),
                    why.empty() ? "" : ": ", why.c_str());
        if (why.empty()) ++passed;
        if (!why.empty() && is_known) ++failed_as_known;
        BOOST_TEST((why.empty() != is_known),
                   name << (why.empty() ? " passes: remove it from known_failures.txt" : ": " + why));
    }
    std::printf("%zu of %zu cases pass; %zu known failures (tests/data/onnx/known_failures.txt)\n", passed,
                cases.size(), failed_as_known);
    for (const auto& k : known) BOOST_TEST(fs::is_directory(data_dir / k), "known failure " << k << " is no case");
}

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_conformance
