// Traces are never lost: an existing trace is kept unless --force, and a run killed with
// SIGKILL at any moment (computing or writing) leaves either no trace directory or a complete
// one — at most a hidden ".DIR.tmp-PID-N" sibling, removed by the next run that writes DIR.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/error.hpp"
#include "engine/npy.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_hardening_trace)

using namespace attngraph;
namespace fs = std::filesystem;

namespace {

using attngraph::test::slurp;

// A graph that takes a while to trace: `n` chained 128x128 MatMuls, every output traced.
fs::path write_big_graph(const fs::path& dir, int n) {
    Array<float> w = Array<float>::from_shape({128, 128});
    for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>((i * 7919) % 255) / 32768.0f;
    save_npy(dir / "w.npy", Tensor(w));
    std::string nodes;
    for (int k = 0; k < n; ++k)
        nodes += std::string(k ? "," : "") + R"({"name": "m)" + std::to_string(k) + R"(", "op": "MatMul", "inputs": [")" +
                 (k ? "m" + std::to_string(k - 1) : std::string("W")) + R"(", "W"]})";
    std::ofstream(dir / "big.json") << R"({"tensors": {"W": {"npy": "w.npy"}}, "nodes": [)" << nodes << "]}";
    return dir / "big.json";
}

pid_t spawn_cli(const std::vector<std::string>& args, const fs::path& cwd) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (::chdir(cwd.c_str()) != 0) ::_exit(127);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        std::vector<char*> argv{const_cast<char*>(ATTNGRAPH_CLI)};
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(ATTNGRAPH_CLI, argv.data());
        ::_exit(127);
    }
    return pid;
}

bool has_temporary(const fs::path& dir, const std::string& name) {
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().rfind("." + name + ".", 0) == 0) return true;
    return false;
}

// A trace directory that exists must be complete: a manifest saying so, every file of it
// present and readable with the shape the manifest gives.
void check_absent_or_complete(const fs::path& dir, std::size_t entries) {
    if (!fs::exists(dir)) return;
    BOOST_TEST_REQUIRE(fs::exists(dir / "manifest.json"));
    std::ifstream in(dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(in);
    BOOST_TEST(manifest["complete"] == true);
    BOOST_TEST(manifest["entries"].size() == entries);
    for (const auto& e : manifest["entries"]) {
        const Tensor t = load_npy(dir / e["file"].get<std::string>());
        BOOST_TEST(t.shape() == e["shape"].get<Shape>());
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_existing_trace_is_not_overwritten_without_force) {
    test::TempDir cwd;
    const std::string seed = test::seed_graph().string();
    auto r = test::run_cli("run '" + seed + "' --trace t", cwd.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    std::ofstream(cwd.path / "t" / "notes.txt") << "mine";
    const std::string manifest = slurp(cwd.path / "t" / "manifest.json");

    r = test::run_cli("run '" + seed + "' --trace t --format text", cwd.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err == "error: t: directory exists and is not empty (use --force to replace it)\n");
    BOOST_TEST(slurp(cwd.path / "t" / "notes.txt") == "mine");
    BOOST_TEST(slurp(cwd.path / "t" / "manifest.json") == manifest);
    BOOST_TEST(!fs::exists(cwd.path / "t" / "trace.txt"));

    r = test::run_cli("run '" + seed + "' --trace t --format text --force", cwd.path);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(!fs::exists(cwd.path / "t" / "notes.txt"));
    BOOST_TEST(fs::exists(cwd.path / "t" / "trace.txt"));
    BOOST_TEST(!has_temporary(cwd.path, "t"));

    // an empty directory is fine without --force; a file in the way never is
    fs::create_directory(cwd.path / "empty");
    r = test::run_cli("run '" + seed + "' --trace empty", cwd.path);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(fs::exists(cwd.path / "empty" / "manifest.json"));
    std::ofstream(cwd.path / "file") << "x";
    r = test::run_cli("run '" + seed + "' --trace file --force", cwd.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err == "error: file: exists and is not a directory\n");
    BOOST_TEST(slurp(cwd.path / "file") == "x");
}

BOOST_AUTO_TEST_CASE(a_run_killed_midway_leaves_no_trace_that_looks_complete) {
    test::TempDir cwd;
    constexpr int nodes = 300;
    write_big_graph(cwd.path, nodes);
    const std::vector<std::string> args = {"run", "big.json", "--trace", "t", "--threads", "2"};

    // killed while it computes (or loads): nothing at all
    for (int ms : {0, 5, 20}) {
        const pid_t pid = spawn_cli(args, cwd.path);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        check_absent_or_complete(cwd.path / "t", nodes + 1);
    }
    // killed while it writes the trace: as soon as its temporary directory appears
    int caught_writing = 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
        const pid_t pid = spawn_cli(args, cwd.path);
        int status = 0;
        pid_t done = 0;
        while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && !has_temporary(cwd.path, "t"))
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (done == 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
            ++caught_writing;
            BOOST_TEST(!fs::exists(cwd.path / "t"));
        }
        check_absent_or_complete(cwd.path / "t", nodes + 1);
        fs::remove_all(cwd.path / "t");
    }
    BOOST_TEST(caught_writing > 0);
    BOOST_TEST(has_temporary(cwd.path, "t"));  // the killed runs' leftovers, hidden

    // the next run writing t removes them (their processes are gone) and finishes
    const auto r = test::run_cli("run big.json --trace t", cwd.path);
    BOOST_TEST(r.code == 0, r.err);
    check_absent_or_complete(cwd.path / "t", nodes + 1);
    BOOST_TEST(fs::exists(cwd.path / "t"));
    BOOST_TEST(!has_temporary(cwd.path, "t"));
}

BOOST_AUTO_TEST_CASE(force_replaces_a_trace_in_one_step) {
    // a reader polling the directory while --force replaces it always finds a manifest
    test::TempDir cwd;
    const std::string seed = test::seed_graph().string();
    BOOST_TEST_REQUIRE(test::run_cli("run '" + seed + "' --trace t", cwd.path).code == 0);
    const pid_t pid = spawn_cli({"run", seed, "--trace", "t", "--force"}, cwd.path);
    int status = 0, missing = 0, polls = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        missing += !fs::exists(cwd.path / "t" / "manifest.json");
        ++polls;
    }
    BOOST_TEST(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0);
    BOOST_TEST(missing == 0, missing << " of " << polls << " polls found no manifest");
    BOOST_TEST(!has_temporary(cwd.path, "t"));
}

BOOST_AUTO_TEST_SUITE_END()  // test_hardening_trace
