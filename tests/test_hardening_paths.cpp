// Safe file handling: "npy" paths stay inside the graph file's folder (../, absolute paths
// and symlinks out are refused) unless allowed; names can never put a trace file outside
// the trace directory.
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include "engine/error.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_hardening_paths)

using namespace attngraph;
namespace fs = std::filesystem;

namespace {

// root/graphs/g.json may reference root/graphs/sub/w.npy (inside) and root/outside.npy
// (outside); root/graphs/link.npy and root/graphs/linkdir/ are symlinks leading out.
struct Tree {
    test::TempDir root;
    fs::path graphs = root.path / "graphs";
    Tree() {
        fs::create_directories(graphs / "sub");
        save_npy(graphs / "sub" / "w.npy", Tensor(Array<float>{{1.5f, -2.0f}}));
        save_npy(root.path / "outside.npy", Tensor(Array<float>{{7.0f, 8.0f}}));
        fs::create_symlink("../outside.npy", graphs / "link.npy");
        fs::create_directory_symlink(root.path, graphs / "linkdir");
        fs::create_directory_symlink(graphs, root.path / "alias");
    }
    // writes graphs/<file> whose tensor W comes from `npy`
    fs::path graph(const std::string& npy, const std::string& file = "g.json") const {
        const fs::path p = graphs / file;
        std::ofstream(p) << R"({"tensors": {"W": {"npy": )" << nlohmann::json(npy).dump()
                         << R"(}}, "nodes": [{"name": "Y", "op": "Scale", "inputs": ["W"], "attrs": {"factor": 2}}]})";
        return p;
    }
};

double first_value(const Graph& g) { return g.value(g.at("W")).data->at_flat(0); }

}  // namespace

BOOST_AUTO_TEST_CASE(npy_paths_inside_the_graph_folder_load) {
    Tree t;
    for (const std::string& npy :
         std::vector<std::string>{"sub/w.npy", "./sub/w.npy", "sub/../sub/w.npy", (t.graphs / "sub/w.npy").string()}) {
        BOOST_TEST_CONTEXT("npy " << npy) { BOOST_TEST(first_value(load_graph(t.graph(npy))) == 1.5); }
    }
    // the graph file reached through a symlinked folder: its folder is where the link leads
    BOOST_TEST(first_value(load_graph(t.root.path / "alias" / t.graph("sub/w.npy").filename())) == 1.5);
}

BOOST_AUTO_TEST_CASE(npy_paths_leaving_the_graph_folder_are_refused) {
    Tree t;
    const std::vector<std::string> outside = {"../outside.npy",       "sub/../../outside.npy",
                                              (t.root.path / "outside.npy").string(), "link.npy",
                                              "linkdir/outside.npy", "linkdir/graphs/../outside.npy",
                                              "/etc/passwd"};
    for (const auto& npy : outside) {
        BOOST_TEST_CONTEXT("npy " << npy) {
            const fs::path g = t.graph(npy);
            try {
                load_graph(g);
                BOOST_ERROR("loaded");
            } catch (const GraphError& e) {
                const std::string msg = e.what();
                BOOST_TEST(msg.find(g.string() + ": tensor 'W': \"npy\" path '" + npy +
                                    "' leaves the graph file's folder (use --allow-outside-paths)") == 0,
                           msg);
            }
            if (npy != "/etc/passwd") {  // allowed, they load (the symlinks lead to the same file)
                LoadOptions o;
                o.allow_outside_paths = true;
                BOOST_TEST(first_value(load_graph(g, o)) == 7.0);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(npy_paths_through_the_cli) {
    Tree t;
    t.graph("../outside.npy", "out.json");
    t.graph("sub/w.npy", "in.json");
    // relative graph path from its own folder (its parent path is empty)
    auto r = test::run_cli("check in.json", t.graphs);
    BOOST_TEST(r.code == 0, r.err);
    r = test::run_cli("run out.json", t.graphs);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err.rfind("error: out.json: tensor 'W': \"npy\" path '../outside.npy' leaves the graph file's folder", 0) == 0,
               r.err);
    r = test::run_cli("run out.json --allow-outside-paths", t.graphs);
    BOOST_TEST(r.code == 0, r.err);
    BOOST_TEST(r.out.find("14.000000") != std::string::npos, r.out);  // 2 x 7
}

// An empty "npy" or "safetensors" path names the tensor (it was an internal filesystem error,
// exit 3); a FIFO or a directory is refused before it is opened (a FIFO blocked forever).
BOOST_AUTO_TEST_CASE(empty_paths_and_files_that_are_not_regular_are_refused_naming_the_tensor) {
    Tree t;
    const auto expect = [&](const std::string& file, const std::string& message) {
        const auto r = test::run_cli("check " + file, t.graphs);
        BOOST_TEST(r.code == 1, file << ": " << r.err);
        BOOST_TEST(r.err == "error: " + file + ": " + message + "\n", r.err);
    };
    t.graph("", "empty.json");
    expect("empty.json", "tensor 'W': empty npy path");
    std::ofstream(t.graphs / "empty_st.json")
        << R"({"tensors": {"W": {"safetensors": "", "key": "w"}}, "nodes": [{"name": "Y", "op": "Scale",)"
        << R"( "inputs": ["W"], "attrs": {"factor": 2}}]})";
    expect("empty_st.json", "tensor 'W': empty safetensors path");
    t.graph("sub", "dir.json");
    expect("dir.json", "tensor 'W': \"npy\" path 'sub' is not a regular file");
    // a FIFO: the command runs under `timeout`, so that the old behaviour fails instead of hanging
    BOOST_TEST_REQUIRE(::mkfifo((t.graphs / "fifo.npy").c_str(), 0600) == 0);
    t.graph("fifo.npy", "fifo.json");
    const fs::path err = t.root.path / "fifo.err";
    const std::string cmd = "cd '" + t.graphs.string() + "' && timeout 20 '" + std::string(ATTNGRAPH_CLI) +
                            "' check fifo.json >/dev/null 2>'" + err.string() + "' </dev/null";
    const int status = std::system(cmd.c_str());
    BOOST_TEST(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 1);  // timeout's 124 when it hangs
    BOOST_TEST(test::slurp(err) == "error: fifo.json: tensor 'W': \"npy\" path 'fifo.npy' is not a regular file\n");
}

BOOST_AUTO_TEST_CASE(valid_names_cannot_name_a_path) {
    for (const char* ok : {"X", "head1.Q", "a-b_c.9", "...", "..a"}) BOOST_TEST(valid_name(ok), ok);
    for (const char* bad : {"", ".", "..", "a/b", "../x", "/x", "a\\b", "a b", "a:b", "a\nb", "é"})
        BOOST_TEST(!valid_name(bad), bad);
    BOOST_TEST(!valid_name(std::string("a\0b", 3)));
}

BOOST_AUTO_TEST_CASE(names_never_create_files_outside_the_trace_directory) {
    test::TempDir cwd;
    fs::create_directory(cwd.path / "work");
    const auto write = [&](const std::string& tensor, const std::string& node) {
        std::ofstream(cwd.path / "work" / "g.json")
            << R"({"tensors": {)" << nlohmann::json(tensor).dump() << R"(: {"data": [1, 2]}}, "nodes": [{"name": )"
            << nlohmann::json(node).dump() << R"(, "op": "Scale", "inputs": [)" << nlohmann::json(tensor).dump()
            << R"(], "attrs": {"factor": 2}}]})";
    };
    for (const auto& [tensor, node] : std::vector<std::pair<std::string, std::string>>{
             {"X", "../evil"}, {"X", "/tmp/evil"}, {"../evil", "Y"}, {"X", ".."}, {"sub/evil", "Y"}}) {
        BOOST_TEST_CONTEXT(tensor << " -> " << node) {
            write(tensor, node);
            const auto r = test::run_cli("run g.json --trace trace", cwd.path / "work");
            BOOST_TEST(r.code == 1);
            BOOST_TEST(r.err.find("invalid") != std::string::npos, r.err);
            BOOST_TEST(!fs::exists(cwd.path / "evil.npy"));
            BOOST_TEST(!fs::exists(cwd.path / "work" / "trace"));
        }
    }
    // a valid name too long for a file name: an error, and nothing left behind
    const std::string long_name(300, 'n');
    write("X", long_name);
    const auto r = test::run_cli("run g.json --trace trace", cwd.path / "work");
    BOOST_TEST(r.code == 1);
    BOOST_TEST(r.err.rfind("error: ", 0) == 0, r.err);
    std::size_t entries = 0;
    for (const auto& e : fs::directory_iterator(cwd.path / "work")) entries += e.path().filename() != "g.json";
    BOOST_TEST(entries == 0u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_hardening_paths
