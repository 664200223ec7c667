#pragma once
// Test helpers: paths, the seed document's reference values, running the CLI.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/executor.hpp"
#include "engine/sanitizers.hpp"
#include "engine/tensor.hpp"

namespace attngraph::test {

inline std::filesystem::path source_dir() { return ATTNGRAPH_SOURCE_DIR; }
inline std::filesystem::path seed_graph() { return source_dir() / "graphs" / "seed_mha.json"; }

/// The seed document's matrices (tests/data/seed_values.json, copied from the document).
inline const nlohmann::json& seed_values() {
    static const nlohmann::json values = [] {
        std::ifstream in(source_dir() / "tests" / "data" / "seed_values.json");
        return nlohmann::json::parse(in);
    }();
    return values;
}

/// Largest |a - b| over two tensors of the same shape (as double); +inf on shape mismatch.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape()) return INFINITY;
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.at_flat(i) - b.at_flat(i)));
    return m;
}

/// Run options that keep every value of the run (on `threads` threads; 0: every core).
inline RunOptions keep_all(int threads = 0) {
    RunOptions o;
    o.keep_all = true;
    o.threads = threads;
    return o;
}

/// A tensor's values as f64, to read in place: at_flat costs a call and a visit per element,
/// a large part of a check of every value under ThreadSanitizer and at the tests' -O0.
inline std::vector<double> values_of(const Tensor& t) {
    const Tensor t64 = t.cast(DType::f64);
    const double* p = t64.as<double>().data();
    return std::vector<double>(p, p + t64.size());
}

/// The thread counts a check repeats a run at to compare its bits (the release build's lists
/// hold 4). Under ThreadSanitizer 4 alone: a run on one thread has no race to show, and every
/// count above one runs the same chunks (engine/parallel.hpp cuts the work independently of
/// the count), so one such count shows a race in them as another would, while each count
/// costs a run there (8 threads on the CI machine's 2 cores the most). The release build
/// compares them all.
inline std::vector<int> compared_thread_counts(std::initializer_list<int> counts) {
#ifdef ATTNGRAPH_TSAN
    (void)counts;
    return {4};
#else
    return counts;
#endif
}

/// max |got - want| / max |want| over two lists of numbers; +inf when their sizes differ.
inline double rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        diff = std::max(diff, std::abs(got[i] - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    return diff / std::max(scale, 1e-300);
}

/// Largest |tensor - reference| against a 2-D list of numbers; +inf on shape mismatch.
inline double max_abs_diff(const Tensor& t, const nlohmann::json& rows) {
    const Shape s = t.shape();
    if (s.size() != 2 || s[0] != rows.size() || s[1] != rows[0].size()) return INFINITY;
    double m = 0;
    for (std::size_t i = 0; i < s[0]; ++i)
        for (std::size_t j = 0; j < s[1]; ++j) m = std::max(m, std::abs(t.at_flat(i * s[1] + j) - rows[i][j].get<double>()));
    return m;
}

/// The whole file as a string (empty when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct CliResult {
    int code = -1;
    std::string out, err;
};

/// Runs the attngraph program with `args` (a shell-quoted string) in `cwd`.
inline CliResult run_cli(const std::string& args, const std::filesystem::path& cwd = std::filesystem::current_path()) {
    static int counter = 0;
    const auto base = std::filesystem::temp_directory_path() /
                      ("attngraph-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    const std::string out = base.string() + ".out", err = base.string() + ".err";
    const std::string cmd = "cd '" + cwd.string() + "' && '" + std::string(ATTNGRAPH_CLI) + "' " + args + " >'" + out +
                            "' 2>'" + err + "' </dev/null";
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
}

/// A fresh empty directory under the system temp dir, removed by the destructor.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        static int counter = 0;
        path = std::filesystem::temp_directory_path() /
               ("attngraph-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

}  // namespace attngraph::test
