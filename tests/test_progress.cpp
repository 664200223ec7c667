// Progress callbacks (issue 15, part 5): RunOptions::progress and BackwardOptions::progress
// count every node of the graph exactly once, whatever the plan fuses and however many threads
// call them at once. The reference count is the graph's node list. The progress line the CLI
// draws from them is tested under a pseudo-terminal in python/tests/test_progress.py.
#include <algorithm>
#include <mutex>
#include <set>

#include <boost/test/unit_test.hpp>

#include "engine/autodiff.hpp"
#include "engine/executor.hpp"
#include "engine/graph_file.hpp"
#include "graphs/mha.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_progress)

using namespace attngraph;
using namespace attngraph::test;

namespace {

struct Seen {
    std::mutex mutex;
    std::set<std::size_t> done;
    std::set<std::size_t> totals;
    std::size_t calls = 0;
    std::function<void(std::size_t, std::size_t)> callback() {
        return [this](std::size_t d, std::size_t t) {
            std::lock_guard<std::mutex> lock(mutex);
            done.insert(d);
            totals.insert(t);
            ++calls;
        };
    }
};

Graph big_graph() {
    graphs::MhaConfig c;
    c.seq = 128;
    c.d_model = 64;
    c.heads = 4;
    c.seed = 3;
    return graphs::build_mha(c);
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_progress_counts_every_node_once) {
    for (const Graph& g : {load_graph(seed_graph()), big_graph()}) {
        for (int threads : {1, 2}) {
            for (bool optimize : {true, false}) {  // fused steps count the nodes folded into them
                Seen seen;
                RunOptions options;
                options.threads = threads;
                options.optimize = optimize;
                options.progress = seen.callback();
                run(g, options);
                const std::size_t nodes = g.nodes().size();
                BOOST_TEST(seen.totals == std::set<std::size_t>{nodes});
                BOOST_TEST(*seen.done.rbegin() == nodes);
                BOOST_TEST(seen.done.size() == seen.calls);  // every call saw its own count
                if (!optimize) BOOST_TEST(seen.calls == nodes);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(backward_progress_counts_every_node_that_runs) {
    const Graph g = big_graph();
    for (int threads : {1, 2}) {
        RunOptions keep;
        keep.keep_all = true;
        keep.threads = threads;
        const RunResult fwd = run(g, keep);
        for (bool fuse : {false, true}) {
            Seen seen;
            BackwardOptions options;
            options.threads = threads;
            options.fuse = fuse;
            options.progress = seen.callback();
            backward(g, fwd, {}, options);  // every gradient: every node's backward runs
            const std::size_t nodes = g.nodes().size();
            BOOST_TEST(seen.totals == std::set<std::size_t>{nodes});
            BOOST_TEST(*seen.done.rbegin() == nodes);
            BOOST_TEST(seen.done.size() == seen.calls);  // every call saw its own count
            // a fused task (a linear group, an attention) reports its nodes in one call
            if (!fuse) BOOST_TEST(seen.calls == nodes);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_progress
