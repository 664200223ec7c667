// Safetensors weights (issue 15, part 3): graph-file entries that read a tensor from a
// safetensors file (F32, F16, BF16 converted; "transpose"), paths confined like npy paths,
// one-line errors naming file and key, and `attngraph new --weights-from`. The files are
// written byte by byte here; the expected values are exact (hand-encoded halfs).
#include <cstring>
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "engine/error.hpp"
#include "engine/graph_file.hpp"
#include "engine/half.hpp"
#include "engine/safetensors.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_safetensors)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct StTensor {
    std::string key, dtype;
    std::vector<std::size_t> shape;
    std::string bytes;
};

std::string f32_bytes(const std::vector<float>& v) {
    std::string out(v.size() * 4, '\0');
    std::memcpy(out.data(), v.data(), out.size());  // x86-64: little-endian
    return out;
}

std::string u16_bytes(const std::vector<std::uint16_t>& v) {
    std::string out;
    for (auto x : v) {
        out += static_cast<char>(x & 0xff);
        out += static_cast<char>(x >> 8);
    }
    return out;
}

void write_st(const fs::path& p, const std::vector<StTensor>& ts, std::size_t cut = 0) {
    json header = json::object();
    std::string data;
    for (const auto& t : ts) {
        header[t.key] = {
            {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
        data += t.bytes;
    }
    header["__metadata__"] = {{"format", "pt"}};
    const std::string h = header.dump();
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    file += h + data;
    if (cut) file.resize(file.size() - cut);
    std::ofstream(p, std::ios::binary) << file;
}

Graph graph_with(const fs::path& dir, const json& entry) {
    json doc = {{"name", "st"},
                {"tensors", {{"X", {{"kind", "input"}, {"data", {{1, 0, 0}, {0, 1, 0}}}}}, {"W", entry}}},
                {"nodes", {{{"name", "Y"}, {"op", "MatMul"}, {"inputs", {"X", "W"}}}}},
                {"outputs", {"Y"}}};
    std::ofstream(dir / "g.json") << doc.dump();
    return load_graph(dir / "g.json");
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(half_conversions_are_exact) {
    BOOST_TEST(half_to_float(0x3E00) == 1.5f);
    BOOST_TEST(half_to_float(0xC000) == -2.0f);
    BOOST_TEST(half_to_float(0x3400) == 0.25f);
    BOOST_TEST(half_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
    BOOST_TEST(half_to_float(0x7BFF) == 65504.0f);
    BOOST_TEST(std::isinf(half_to_float(0x7C00)));
    BOOST_TEST(bfloat16_to_float(0x3FC0) == 1.5f);
    BOOST_TEST(bfloat16_to_float(0xC000) == -2.0f);
    BOOST_TEST(bfloat16_to_float(0x3E80) == 0.25f);
}

BOOST_AUTO_TEST_CASE(graph_file_entries_read_f32_f16_bf16_with_transpose) {
    TempDir dir;
    // (out=2, in=3) as torch keeps a Linear weight; transposed it is (3, 2)
    write_st(dir.path / "m.safetensors",
             {{"w32", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
              {"w16", "F16", {2, 3}, u16_bytes({0x3E00, 0xC000, 0x3400, 0x3C00, 0x0000, 0x4000})},
              {"wbf", "BF16", {2, 3}, u16_bytes({0x3FC0, 0xC000, 0x3E80, 0x3F80, 0x0000, 0x4000})},
              {"i64", "I64", {1}, std::string(8, '\0')}});
    const Graph g = graph_with(dir.path, {{"safetensors", "m.safetensors"}, {"key", "w32"}, {"transpose", true}});
    const Tensor& w = *g.value(g.at("W")).data;
    BOOST_TEST((w.shape() == Shape{3, 2}));
    const double want[6] = {1, 4, 2, 5, 3, 6};
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(w.at_flat(i) == want[i]);
    for (const char* key : {"w16", "wbf"}) {
        const Graph h = graph_with(dir.path, {{"safetensors", "m.safetensors"}, {"key", key}, {"transpose", true}});
        const Tensor& t = *h.value(h.at("W")).data;
        const double halfs[6] = {1.5, 1, -2, 0, 0.25, 2};
        for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(t.at_flat(i) == halfs[i], key << " " << i);
    }
    // converted to an f64 graph exactly
    LoadOptions o;
    o.dtype = DType::f64;
    const Graph g64 = load_graph(dir.path / "g.json", o);
    BOOST_TEST(g64.value(g64.at("W")).data->at_flat(4) == 0.25);  // g.json reads wbf now
}

BOOST_AUTO_TEST_CASE(errors_name_the_file_and_the_key) {
    TempDir dir;
    write_st(dir.path / "m.safetensors",
             {{"w", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})}, {"i", "I64", {1}, std::string(8, '\0')}});
    const std::string file = (dir.path / "m.safetensors").string();
    const std::string graph = (dir.path / "g.json").string() + ": ";
    auto load_entry = [&](const json& entry) { return error_of([&] { graph_with(dir.path, entry); }); };
    BOOST_TEST(load_entry({{"safetensors", "m.safetensors"}, {"key", "nope"}}) ==
               graph + "tensor 'W': " + file + ": no tensor 'nope' (it has 2: i, w)");
    BOOST_TEST(load_entry({{"safetensors", "m.safetensors"}, {"key", "i"}}) ==
               graph + "tensor 'W': " + file + ": key 'i': dtype I64 is not supported (F32, F16 or BF16)");
    BOOST_TEST(load_entry({{"safetensors", "m.safetensors"}, {"key", "w"}, {"shape", {2, 2}}}) ==
               graph + "tensor 'W': \"shape\" (2x2) disagrees with " + file + " key 'w' (2x3)");
    BOOST_TEST(load_entry({{"safetensors", "m.safetensors"}}) ==
               graph + "tensor 'W': \"safetensors\" needs a \"key\" string naming the tensor in the file");
    BOOST_TEST(load_entry({{"safetensors", "../m.safetensors"}, {"key", "w"}}) ==
               graph +
                   "tensor 'W': \"safetensors\" path '../m.safetensors' leaves the graph file's folder (use "
                   "--allow-outside-paths)");
    BOOST_TEST(load_entry({{"data", {1}}, {"key", "w"}}) ==
               graph + "tensor 'W': \"key\" and \"transpose\" go with \"safetensors\"");
    // truncated: the data ends early, or the header does
    write_st(dir.path / "cut.safetensors", {{"w", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})}}, 4);
    const std::string cut = (dir.path / "cut.safetensors").string();
    BOOST_TEST(load_entry({{"safetensors", "cut.safetensors"}, {"key", "w"}}) ==
               graph + "tensor 'W': " + cut +
                   ": key 'w': truncated: its data ends at byte 24 of the data section, which has 20");
    std::ofstream(dir.path / "short.safetensors", std::ios::binary) << std::string("\x40\0\0\0\0\0\0\0{", 9);
    BOOST_TEST(error_of([&] { SafetensorsFile(dir.path / "short.safetensors"); }) ==
               (dir.path / "short.safetensors").string() +
                   ": truncated: the header is 64 bytes but the file has 1 after the length");
    // data_offsets disagreeing with the shape
    write_st(dir.path / "odd.safetensors", {{"w", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5})}});
    BOOST_TEST(error_of([&] { SafetensorsFile(dir.path / "odd.safetensors"); }) ==
               (dir.path / "odd.safetensors").string() + ": key 'w': F32 2x3 needs 24 bytes, data_offsets give 20");
    // one line from the CLI
    const CliResult r = run_cli("check g.json", dir.path);
    BOOST_TEST(r.code == 1);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

BOOST_AUTO_TEST_CASE(new_weights_from_places_the_projections) {
    TempDir dir;
    // d_model 4, 2 heads, mqa (1 K/V head): q (4, 4), k and v (2, 4), o (4, 4); q and o have biases
    std::vector<float> q(16), k(8), v(8), o(16), bq(4), bo(4);
    for (std::size_t i = 0; i < 16; ++i) q[i] = 0.1f * static_cast<float>(i), o[i] = -0.05f * static_cast<float>(i);
    for (std::size_t i = 0; i < 8; ++i)
        k[i] = 0.2f * static_cast<float>(i) - 0.5f, v[i] = 0.3f - 0.1f * static_cast<float>(i);
    for (std::size_t i = 0; i < 4; ++i) bq[i] = static_cast<float>(i), bo[i] = -static_cast<float>(i);
    const std::string p = "layers.0.self_attn.";
    write_st(dir.path / "m.safetensors", {{p + "q_proj.weight", "F32", {4, 4}, f32_bytes(q)},
                                          {p + "k_proj.weight", "F32", {2, 4}, f32_bytes(k)},
                                          {p + "v_proj.weight", "F32", {2, 4}, f32_bytes(v)},
                                          {p + "o_proj.weight", "F32", {4, 4}, f32_bytes(o)},
                                          {p + "q_proj.bias", "F32", {4}, f32_bytes(bq)},
                                          {p + "o_proj.bias", "F32", {4}, f32_bytes(bo)}});
    const CliResult r = run_cli(
        "new mqa --seq 3 --d-model 4 --heads 2 --weights-from m.safetensors --prefix " + p + " -o g.json", dir.path);
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
    const Graph g = load_graph(dir.path / "g.json");
    const Tensor& wqkv = *g.value(g.at("Wqkv")).data;
    BOOST_TEST((wqkv.shape() == Shape{4, 8}));
    for (std::size_t i = 0; i < 4; ++i) {
        for (std::size_t j = 0; j < 4; ++j) BOOST_TEST(wqkv.at_flat(i * 8 + j) == q[j * 4 + i]);
        for (std::size_t j = 0; j < 2; ++j) {
            BOOST_TEST(wqkv.at_flat(i * 8 + 4 + j) == k[j * 4 + i]);
            BOOST_TEST(wqkv.at_flat(i * 8 + 6 + j) == v[j * 4 + i]);
        }
    }
    const Tensor& bqkv = *g.value(g.at("bqkv")).data;
    for (std::size_t j = 0; j < 8; ++j) BOOST_TEST(bqkv.at_flat(j) == (j < 4 ? bq[j] : 0.0f));
    const Tensor& wo = *g.value(g.at("Wo")).data;
    BOOST_TEST(wo.at_flat(1) == o[4]);
    BOOST_TEST(g.value(g.at("bo")).data->at_flat(3) == -3.0f);
    // sizes that do not fit: one line naming the file and the key
    const CliResult bad = run_cli(
        "new mha-batched --seq 3 --d-model 4 --heads 2 --weights-from m.safetensors --prefix " + p + " -o h.json",
        dir.path);
    BOOST_TEST(bad.code == 1);
    BOOST_TEST(bad.err.find("m.safetensors: key '" + p + "k_proj.weight' is 2x4 (out x in)") != std::string::npos,
               bad.err);
    BOOST_TEST(!fs::exists(dir.path / "h.json"));
    const CliResult missing =
        run_cli("new mqa --seq 3 --d-model 4 --heads 2 --weights-from m.safetensors -o h.json", dir.path);
    BOOST_TEST(missing.err.find("no tensor 'q_proj.weight'") != std::string::npos, missing.err);
}

BOOST_AUTO_TEST_SUITE_END()  // test_safetensors
