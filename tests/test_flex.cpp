// FlexAttention's standard examples (graphs/flex/*.json, graphs/flex.hpp): each file, and each
// example built at other sizes, against a plain-loop reference of its score_mod / mask_mod
// written here (no engine code); f32 and f64; gradcheck; the masks made of index and
// comparison ops, never of a Mask pattern.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "graphs/flex.hpp"
#include "graphs/mha.hpp"
#include "ops/ops.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_flex)

using namespace attngraph;
namespace fs = std::filesystem;
using Vec = std::vector<double>;

namespace {

// What an example is made of: its name (after flex/) and options.
struct Example {
    std::string name;
    std::size_t window = 0, prefix = 0;
    std::vector<int> documents;
    bool causal = false;
    double softcap = 50;
};

// The options of a file's description (the `attngraph new` command that made it).
Example from_description(const std::string& name, const std::string& description) {
    Example e;
    e.name = name;
    std::istringstream in(description);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    for (std::size_t i = 0; i < words.size(); ++i) {
        const std::string& w = words[i];
        const std::string next = i + 1 < words.size() ? words[i + 1] : "";
        if (w == "--window") e.window = std::stoul(next);
        if (w == "--prefix-length") e.prefix = std::stoul(next);
        if (w == "--softcap") e.softcap = std::stod(next);
        if (w == "--causal") e.causal = true;
        if (w == "--documents") {
            std::istringstream list(next);
            for (std::string len; std::getline(list, len, ',');) e.documents.push_back(std::stoi(len));
        }
    }
    return e;
}

Vec values(const Tensor& t) {
    Vec v(t.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.at_flat(i);
    return v;
}
Vec tensor_values(const Graph& g, const std::string& name) {
    return values(*g.value(g.at(name)).data);
}

// flex_attention(Q, K, V, score_mod, mask_mod) in loops: A (B, H, n, n) and O (B, H, n, D).
struct Reference {
    Vec a, o;
};

Reference reference(const Example& e, const Graph& g) {
    const Shape qs = g.value(g.at("Q")).shape;
    const std::size_t B = qs[0], H = qs[1], n = qs[2], D = qs[3];
    const Vec q = tensor_values(g, "Q"), k = tensor_values(g, "K"), v = tensor_values(g, "V");
    const Vec table = e.name == "relative-position" ? tensor_values(g, "rel_bias") : Vec{};
    auto doc = [&](long p) {  // the document position p is in
        long d = 0, end = e.documents.at(0);
        while (p >= end) end += e.documents.at(std::size_t(++d));
        return d;
    };
    auto score_mod = [&](double s, std::size_t h, long i, long j) {
        if (e.name == "alibi") return s + std::exp2(-(double(h) + 1) * 8.0 / double(H)) * double(j - i);
        if (e.name == "softcap") return e.softcap * std::tanh(s / e.softcap);
        if (e.name == "relative-position") return s + table[h * (2 * n - 1) + std::size_t(i - j + long(n) - 1)];
        return s;
    };
    auto mask_mod = [&](long i, long j) {
        if (e.name == "causal" || e.name == "alibi") return j <= i;
        if (e.name == "sliding-window") return j <= i && i - j <= long(e.window);
        if (e.name == "prefix-lm") return j < long(e.prefix) || j <= i;
        if (e.name == "document") return doc(i) == doc(j) && (!e.causal || j <= i);
        return true;
    };
    Reference r;
    r.a.assign(B * H * n * n, 0.0);
    r.o.assign(B * H * n * D, 0.0);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t base = (b * H + h) * n;
            for (std::size_t i = 0; i < n; ++i) {
                Vec s(n);
                double mx = -INFINITY;
                for (std::size_t j = 0; j < n; ++j) {
                    double dot = 0;
                    for (std::size_t t = 0; t < D; ++t) dot += q[(base + i) * D + t] * k[(base + j) * D + t];
                    s[j] = score_mod(dot / std::sqrt(double(D)), h, long(i), long(j));
                    if (mask_mod(long(i), long(j))) mx = std::max(mx, s[j]);
                }
                double sum = 0;
                Vec ex(n, 0.0);
                for (std::size_t j = 0; j < n; ++j)
                    if (mask_mod(long(i), long(j))) sum += (ex[j] = std::exp(s[j] - mx));
                for (std::size_t j = 0; j < n; ++j) {
                    const double a = ex[j] / sum;
                    r.a[(base + i) * n + j] = a;
                    for (std::size_t t = 0; t < D; ++t) r.o[(base + i) * D + t] += a * v[(base + j) * D + t];
                }
            }
        }
    return r;
}

using test::rel_diff;

struct File {
    fs::path path;
    Example example;
};

std::vector<File> flex_files() {
    std::vector<File> files;
    for (const auto& entry : fs::directory_iterator(test::source_dir() / "graphs" / "flex")) {
        if (entry.path().extension() != ".json") continue;
        const auto doc = nlohmann::json::parse(test::slurp(entry.path()));
        files.push_back({entry.path(), from_description(entry.path().stem().string(), doc["description"])});
    }
    std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.path < b.path; });
    return files;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_example_has_a_file) {
    std::vector<std::string> names;
    for (const auto& f : flex_files()) names.push_back(f.example.name);
    std::vector<std::string> listed;
    for (const auto& info : graphs::flex_list()) listed.push_back(info.name.substr(5));
    std::sort(listed.begin(), listed.end());
    BOOST_TEST(names == listed, boost::test_tools::per_element());
    BOOST_TEST(names.size() == 7u);
}

BOOST_AUTO_TEST_CASE(every_file_matches_the_plain_loop_reference) {
    for (const auto& f : flex_files()) {
        for (const DType dtype : {DType::f32, DType::f64}) {
            BOOST_TEST_CONTEXT(f.path.filename() << (dtype == DType::f64 ? " f64" : " f32")) {
                LoadOptions lo;
                lo.dtype = dtype;
                const Graph g = load_graph(f.path, lo);
                const RunResult r = run(g, test::keep_all());
                const Reference ref = reference(f.example, g);
                const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
                BOOST_TEST(rel_diff(values(r.at(g, "O")), ref.o) <= tol);
                BOOST_TEST(rel_diff(values(r.at(g, "A")), ref.a) <= tol);
            }
        }
    }
}

// The examples at other sizes and options: 3 heads (ALiBi's slopes differ per head), one
// batch, another n.
BOOST_AUTO_TEST_CASE(examples_at_other_sizes_match_the_reference) {
    std::vector<graphs::VariantConfig> configs;
    auto add = [&](const std::string& name, auto&& set) {
        graphs::VariantConfig c;
        c.variant = "flex/" + name;
        c.batch = 1;
        c.seq = 7;
        c.d_model = 12;
        c.heads = 3;
        c.seed = 5;
        c.dtype = DType::f64;
        set(c);
        configs.push_back(c);
    };
    add("causal", [](auto&) {});
    add("sliding-window", [](auto& c) { c.window = 1; });
    add("sliding-window", [](auto& c) { c.window = 10; });  // wider than n: causal
    add("prefix-lm", [](auto& c) { c.prefix_length = 1; });
    add("prefix-lm", [](auto& c) { c.prefix_length = 7; });
    add("document", [](auto& c) { c.documents = {7}; });
    add("document", [](auto& c) { c.documents = {1, 2, 4}; });
    add("document", [](auto& c) { c.documents = {2, 2, 1, 2}, c.causal = true; });
    add("alibi", [](auto&) {});
    add("softcap", [](auto&) {});  // Gemma 2's 50
    add("softcap", [](auto& c) { c.softcap = 0.3; });
    add("relative-position", [](auto&) {});
    for (const auto& c : configs) {
        Example e;
        e.name = c.variant.substr(5);
        e.window = c.window, e.prefix = c.prefix_length, e.documents = c.documents, e.causal = c.causal;
        e.softcap = c.softcap.value_or(50.0);
        BOOST_TEST_CONTEXT(c.variant << " window " << c.window << " prefix " << c.prefix_length << " documents "
                                     << c.documents.size()) {
            const Graph g = graphs::build_variant(c);
            const RunResult r = run(g, test::keep_all());
            const Reference ref = reference(e, g);
            BOOST_TEST(rel_diff(values(r.at(g, "O")), ref.o) <= 1e-12);
            BOOST_TEST(rel_diff(values(r.at(g, "A")), ref.a) <= 1e-12);
        }
    }
}

BOOST_AUTO_TEST_CASE(every_file_gradchecks) {
    for (const auto& f : flex_files()) {
        BOOST_TEST_CONTEXT(f.path.filename()) {
            LoadOptions lo;
            lo.dtype = DType::f64;
            const GradcheckResult r = gradcheck(load_graph(f.path, lo));
            BOOST_TEST(r.entries.size() >= 3u);  // Q, K, V (and rel_bias)
            BOOST_TEST(r.max_rel_error < 1e-6, r.report());
        }
    }
}

// The mask_mods are index tensors and comparisons (Range, Less, Greater, Equal, Gather, Where,
// Mul): every Mask node reads a keep tensor, none has a pattern; the score_mods are ops on
// the scores (Add of a bias, Tanh), never the Alibi op.
BOOST_AUTO_TEST_CASE(mods_are_written_with_index_and_comparison_ops) {
    for (const auto& f : flex_files()) {
        BOOST_TEST_CONTEXT(f.path.filename()) {
            const Graph g = load_graph(f.path);
            std::map<std::string, int> ops;
            for (const Node& n : g.nodes()) {
                ++ops[n.op->name];
                if (const auto* m = n.attrs_if<ops::Mask>()) {
                    BOOST_TEST(!m->pattern.has_value());
                    BOOST_TEST(n.inputs.size() == 2u);
                }
            }
            BOOST_TEST(ops["Alibi"] == 0);
            const std::string& e = f.example.name;
            const bool masked = e != "softcap" && e != "relative-position";
            BOOST_TEST(ops["Mask"] == (masked ? 1 : 0));
            if (masked) BOOST_TEST(ops["Range"] >= 2);
            if (e == "softcap") BOOST_TEST(ops["Tanh"] == 1);
            if (e == "alibi" || e == "relative-position") BOOST_TEST(ops["Add"] == 1);
            if (e == "relative-position" || e == "document") BOOST_TEST(ops["Gather"] >= 1);
        }
    }
}

// Q, K, V of another batch size run (the index tensors broadcast over batch and heads);
// another n is refused: the Ranges hold the n the graph was made for.
BOOST_AUTO_TEST_CASE(another_batch_size_runs_another_length_is_refused) {
    for (const auto& f : flex_files()) {
        BOOST_TEST_CONTEXT(f.path.filename()) {
            const Graph g = load_graph(f.path);
            const Shape qs = g.value(g.at("Q")).shape;
            std::map<std::string, Tensor> other;
            for (const char* name : {"Q", "K", "V"})
                other[name] = graphs::random_tensor({3, qs[1], qs[2], qs[3]}, DType::f32, 9);
            const Graph fed = g.with_tensors(other);
            const RunResult r = run(fed, test::keep_all());
            BOOST_TEST(rel_diff(values(r.at(fed, "O")), reference(f.example, fed).o) <= 1e-5);
            const bool holds_n = f.example.name != "softcap";
            std::map<std::string, Tensor> longer;
            for (const char* name : {"Q", "K", "V"})
                longer[name] = graphs::random_tensor({1, qs[1], qs[2] + 2, qs[3]}, DType::f32, 9);
            if (holds_n)
                BOOST_CHECK_THROW(g.with_tensors(longer), ShapeError);
            else
                BOOST_CHECK_NO_THROW(g.with_tensors(longer));
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()  // test_flex
