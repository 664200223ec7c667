// attngraph bench: the JSON line's keys and the sizes it echoes, and its errors. Times are
// only checked to be positive: speed is measured by running the benchmark, never in tests.
#include <cstdlib>

#include <boost/test/unit_test.hpp>

#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_bench_cli)

using namespace attngraph;

namespace {

nlohmann::ordered_json one_json_line(const std::string& out) {
    BOOST_TEST_REQUIRE(std::count(out.begin(), out.end(), '\n') == 1);
    return nlohmann::ordered_json::parse(out);
}

std::vector<std::string> keys(const nlohmann::ordered_json& j) {
    std::vector<std::string> k;
    for (const auto& [key, value] : j.items()) k.push_back(key);
    return k;
}

}  // namespace

BOOST_AUTO_TEST_CASE(bench_prints_one_json_line) {
    const test::CliResult r = test::run_cli("bench --batch 2 --seq 5 --d-model 8 --heads 2 --threads 2 --reps 3");
    BOOST_TEST(r.code == 0, r.err);
    const nlohmann::ordered_json j = one_json_line(r.out);
    const std::vector<std::string> want = {"variant", "batch", "seq",       "d_model", "heads",  "threads",
                                           "blas",    "trace", "median_ms", "min_ms",  "gflops", "peak_rss_mb"};
    BOOST_TEST(keys(j) == want, boost::test_tools::per_element());
    BOOST_TEST(j["variant"] == "mha");
    BOOST_TEST(j["batch"] == 2);
    BOOST_TEST(j["seq"] == 5);
    BOOST_TEST(j["d_model"] == 8);
    BOOST_TEST(j["heads"] == 2);
    BOOST_TEST(j["threads"] == 2);
    BOOST_TEST(j["trace"] == "none");
    BOOST_TEST(j["median_ms"].get<double>() > 0);
    BOOST_TEST(j["min_ms"].get<double>() <= j["median_ms"].get<double>());
    BOOST_TEST(j["peak_rss_mb"].get<double>() > 0);
}

BOOST_AUTO_TEST_CASE(bench_seed_and_trace_memory) {
    const test::CliResult r = test::run_cli("bench --variant seed --trace memory --reps 2 --threads 1");
    BOOST_TEST(r.code == 0, r.err);
    const nlohmann::ordered_json j = one_json_line(r.out);
    BOOST_TEST(j["variant"] == "seed");
    BOOST_TEST(j["seq"] == 3);
    BOOST_TEST(j["d_model"] == 4);
    BOOST_TEST(j["trace"] == "memory");
}

BOOST_AUTO_TEST_CASE(bench_backward) {
    const test::CliResult r = test::run_cli("bench --seq 6 --d-model 8 --heads 2 --backward --reps 2");
    BOOST_TEST(r.code == 0, r.err);
    const nlohmann::ordered_json j = one_json_line(r.out);
    BOOST_TEST(j["backward"] == true);
    BOOST_TEST(j["gflops"].get<double>() > 0);
}

BOOST_AUTO_TEST_CASE(bench_gemm_prints_its_line) {
    const test::CliResult r = test::run_cli("bench --gemm 64 --threads 2 --reps 2");
    BOOST_TEST(r.code == 0, r.err);
    const nlohmann::ordered_json j = one_json_line(r.out);
    const std::vector<std::string> want = {"gemm", "threads", "blas", "median_ms", "gflops"};
    BOOST_TEST(keys(j) == want, boost::test_tools::per_element());
    BOOST_TEST(j["gemm"] == 64);
    BOOST_TEST(j["gflops"].get<double>() > 0);
    BOOST_TEST(!j["blas"].get<std::string>().empty());
}

BOOST_AUTO_TEST_CASE(bench_gemm_as_unknown_cpu_selects_past_prescott) {
    // Started from Prescott (OpenBLAS 0.3.21 on a CPU model it does not know), the engine
    // selects the kernel for the CPU's instruction sets; on a CPU without AVX it stays.
    const test::CliResult r = test::run_cli("bench --gemm 32 --threads 1 --reps 1 --as-unknown-cpu");
    if (std::getenv("OPENBLAS_CORETYPE")) {  // the machine's choice is kept: refused
        BOOST_TEST(r.code == 1);
        BOOST_TEST(r.err.find("unset it for this command") != std::string::npos, r.err);
        return;
    }
    BOOST_TEST(r.code == 0, r.err);
    const std::string blas = one_json_line(r.out)["blas"].get<std::string>();
    if (__builtin_cpu_supports("avx"))
        BOOST_TEST(blas.find("(cpu features (OpenBLAS picked Prescott))") != std::string::npos, blas);
    else
        BOOST_TEST(blas == "Prescott (OpenBLAS)", blas);
}

BOOST_AUTO_TEST_CASE(bench_takes_every_variant_of_new) {
    for (const char* args :
         {"--variant causal --batch 2 --seq 6", "--variant gqa --seq 6 --groups 2",
          "--variant sliding-window --seq 6 --window 3", "--variant decode --seq 1 --past 5",
          "--variant llama --batch 2 --seq 6 --groups 2", "--variant softcap --seq 6 --softcap 30",
          "--variant sinks --seq 6 --window 2", "--variant diff --seq 6",
          "--variant prefix-lm --seq 6 --prefix-length 2", "--variant document --seq 6 --documents 2,4 --causal",
          "--variant flex/causal --seq 6", "--variant flex/relative-position --seq 6"}) {
        BOOST_TEST_CONTEXT(args) {
            const test::CliResult r = test::run_cli(std::string("bench ") + args + " --d-model 8 --heads 4 --reps 1");
            BOOST_TEST(r.code == 0, r.err);
            const nlohmann::ordered_json j = one_json_line(r.out);
            BOOST_TEST(std::string(args).find(j["variant"].get<std::string>()) != std::string::npos);
            BOOST_TEST(j["heads"] == 4);
            BOOST_TEST(j["median_ms"].get<double>() > 0);
        }
    }
}

BOOST_AUTO_TEST_CASE(bench_graph_times_a_graph_file_or_onnx_model) {
    const auto file = test::source_dir() / "graphs" / "mha-batched.json";
    const test::CliResult r = test::run_cli("bench --graph " + file.string() + " --reps 2 --threads 1");
    BOOST_TEST(r.code == 0, r.err);
    const nlohmann::ordered_json j = one_json_line(r.out);
    BOOST_TEST(keys(j)[0] == "graph");
    BOOST_TEST(j["graph"] == file.string());
    BOOST_TEST(j["nodes"] == nlohmann::json::parse(test::slurp(file))["nodes"].size());
    BOOST_TEST(j["gflops"].get<double>() > 0);

    // an ONNX model of one Attention node, its input shapes as the model gives them
    const auto model = test::source_dir() / "tests" / "data" / "onnx" / "test_attention_4d" / "model.onnx";
    const test::CliResult o = test::run_cli("bench --graph " + model.string() + " --reps 1 --dtype f64");
    BOOST_TEST(o.code == 0, o.err);
    BOOST_TEST(one_json_line(o.out)["nodes"].get<int>() > 1);  // the composite's expansion
}

BOOST_AUTO_TEST_CASE(bench_errors_are_one_line) {
    struct Case {
        const char* args;
        const char* says;
    };
    for (const Case& c :
         {Case{"bench --variant nope --seq 4 --d-model 4 --heads 2", "unknown variant 'nope' (known: mha, seed"},
          Case{"bench --seq 4 --heads 2", "needs --seq, --d-model and --heads"},
          Case{"bench --seq 4 --d-model 6 --heads 4", "d_model must be a positive multiple of heads"},
          Case{"bench --seq 4 --d-model 4 --heads 2 --trace disk", "--trace"},
          Case{"bench --variant gqa --seq 4 --d-model 8 --heads 4 --groups 3", "groups"},
          Case{"bench --variant document --seq 4 --d-model 8 --heads 2 --documents 1,2", "sum to 3, not to seq 4"},
          Case{"bench --variant softcap --seq 4 --d-model 8 --heads 2 --softcap 0", "softcap must be a positive"},
          Case{"bench --graph g.json --variant mha", "excludes"},
          Case{"bench --graph no_such_graph.json", "no_such_graph.json"},
          // the options a variant takes no, as `new` refuses them (mha and seed took them silently)
          Case{"bench --seq 8 --d-model 8 --heads 2 --window 3", "variant 'mha' takes no window"},
          Case{"bench --seq 8 --d-model 8 --heads 2 --kv-lengths 3", "variant 'mha' takes no padding lengths"},
          Case{"bench --variant seed --seq 8", "variant 'seed' takes no sizes"},
          Case{"bench --gemm 0", "--gemm: Value 0 not in range"}}) {
        BOOST_TEST_CONTEXT(c.args) {
            const test::CliResult r = test::run_cli(c.args);
            BOOST_TEST(r.code != 0);
            BOOST_TEST(r.out.empty());
            BOOST_TEST(r.err.find(c.says) != std::string::npos, r.err);
            BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_bench_cli
