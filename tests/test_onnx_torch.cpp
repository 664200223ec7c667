// Real exports: torch.nn.MultiheadAttention and a hand-written causal attention module,
// exported by Debian's python3-torch (tests/python/torch_export.py, opset 17, static shapes),
// run by attngraph straight from the .onnx: Y matches PyTorch's within 1e-5 and the trace
// holds the attention weights (checked against PyTorch's for the causal module); the
// nn.TransformerEncoder (ReLU, opset 14), the LLaMA block (repeat_interleave, SiLU) and
// nn.MultiheadAttention with both bool masks as inputs (their Or) too, the first two
// differentiated against torch.autograd, and a module of clamp, relu6, hardtanh, abs,
// leaky_relu, softplus, maximum and minimum (differentiated too), and one of the ops written out
// at import (hardswish, elu, PReLU, F.pad, repeat, cumsum, norms, ...; differentiated too).
// Without python3-torch the test fails.
#include <boost/test/unit_test.hpp>

#include <set>

#include <nlohmann/json.hpp>

#include "engine/npy.hpp"
#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_onnx_torch)

using namespace attngraph;
using namespace attngraph::test;
namespace fs = std::filesystem;

namespace {

std::string q(const fs::path& p) {
    return "'" + p.string() + "'";
}

struct Exported {
    TempDir tmp;
    Exported() {
        const std::string cmd = "/usr/bin/python3 " + q(source_dir() / "tests" / "python" / "torch_export.py") + " " +
                                q(tmp.path) + " >" + q(tmp.path / "export.log") + " 2>&1";
        BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0,
                           "python3-torch is needed (scripts/install-deps.sh): " << slurp(tmp.path / "export.log"));
    }
};

// The trace entries whose op is `op`.
std::vector<nlohmann::json> entries_of(const fs::path& trace, const std::string& op) {
    std::vector<nlohmann::json> out;
    const nlohmann::json manifest = nlohmann::json::parse(slurp(trace / "manifest.json"));
    for (const auto& e : manifest["entries"])
        if (e.value("op", std::string()) == op) out.push_back(e);
    return out;
}

// Runs <stem>.onnx on its exported input <stem>_x.npy with every node traced: Y must be
// PyTorch's (<stem>_y.npy, within 1e-5), and the model has one Softmax, whose trace entry and
// output (the attention weights) are returned.
struct Weights {
    nlohmann::json entry;
    Tensor a;
};
Weights run_like_torch(const Exported& ex, const std::string& stem) {
    const CliResult r = run_cli("run " + stem + ".onnx --input x=" + stem + "_x.npy --trace t", ex.tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(ex.tmp.path / "t" / "Y.npy"), want = load_npy(ex.tmp.path / (stem + "_y.npy"));
    BOOST_TEST(max_abs_diff(y, want.cast(y.dtype())) <= 1e-5);
    const auto softmax = entries_of(ex.tmp.path / "t", "Softmax");
    BOOST_TEST_REQUIRE(softmax.size() == 1u);
    return {softmax[0], load_npy(ex.tmp.path / "t" / softmax[0]["file"].get<std::string>())};
}

// Runs <stem>.onnx with --input NAME=<stem>_NAME.npy for each of `inputs`, every node traced
// (trace directory t): Y must be PyTorch's (<stem>_y.npy) within 1e-5. With `grad_of`, also
// `grad` with respect to that input: d sum(Y) / d input must be torch.autograd's
// (<stem>_d<input>.npy) within 1e-5.
void run_and_grad_like_torch(const Exported& ex, const std::string& stem, const std::vector<std::string>& inputs,
                             const std::string& grad_of = "") {
    std::string args;
    for (const auto& name : inputs) args += " --input " + name + "=" + stem + "_" + name + ".npy";
    const CliResult r = run_cli("run " + stem + ".onnx" + args + " --trace t", ex.tmp.path);
    BOOST_TEST_REQUIRE(r.code == 0, r.err);
    const Tensor y = load_npy(ex.tmp.path / "t" / "Y.npy"), want = load_npy(ex.tmp.path / (stem + "_y.npy"));
    BOOST_TEST_REQUIRE((y.shape() == want.shape()));
    BOOST_TEST(max_abs_diff(y, want.cast(y.dtype())) <= 1e-5);
    if (grad_of.empty()) return;
    const CliResult g = run_cli("grad " + stem + ".onnx" + args + " --wrt " + grad_of + " --trace g", ex.tmp.path);
    BOOST_TEST_REQUIRE(g.code == 0, g.err);
    const nlohmann::json manifest = nlohmann::json::parse(slurp(ex.tmp.path / "g" / "manifest.json"));
    std::string file;
    for (const auto& e : manifest["entries"])
        if (e.value("name", std::string()) == grad_of) file = e.value("grad", std::string());
    BOOST_TEST_REQUIRE(!file.empty(), "no gradient of " << grad_of << " in the trace");
    const Tensor d = load_npy(ex.tmp.path / "g" / file),
                 d_torch = load_npy(ex.tmp.path / (stem + "_d" + grad_of + ".npy"));
    BOOST_TEST_REQUIRE((d.shape() == d_torch.shape()));
    BOOST_TEST(max_abs_diff(d, d_torch.cast(d.dtype())) <= 1e-5);
}

}  // namespace

BOOST_AUTO_TEST_CASE(torch_multihead_attention_runs_with_pytorchs_output) {
    Exported ex;
    // the attention weights: a softmax over 10 keys for 8 heads of 10 queries, rows summing to 1
    const auto [entry, a] = run_like_torch(ex, "mha");
    BOOST_TEST(a.size() == 8u * 10 * 10);
    BOOST_TEST(a.shape().back() == 10u);
    for (std::size_t row = 0; row < a.size() / 10; ++row) {
        double sum = 0;
        for (std::size_t j = 0; j < 10; ++j) sum += a.at_flat(row * 10 + j);
        BOOST_TEST(std::abs(sum - 1.0) <= 1e-5);
    }
    BOOST_TEST(!entry["onnx_name"].get<std::string>().empty());
}

BOOST_AUTO_TEST_CASE(hand_written_causal_attention_runs_with_pytorchs_output_and_weights) {
    Exported ex;
    const Tensor a = run_like_torch(ex, "causal").a;
    const Tensor a_torch = load_npy(ex.tmp.path / "causal_attn.npy");
    BOOST_TEST(max_abs_diff(a, a_torch.cast(a.dtype())) <= 1e-5);
    BOOST_TEST(a.at_flat(1) == 0.0);  // query 0 sees key 0 only
}

BOOST_AUTO_TEST_CASE(bert_style_layer_with_gelu_runs_with_pytorchs_output) {
    // torch writes the exact GELU as x·½(1 + Erf(x/√2)) and LayerNorm as LayerNormalization
    // (opset 17): both must map onto attngraph ops, and the padded keys get no weight
    Exported ex;
    const Tensor a = run_like_torch(ex, "bert").a;
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Erf").size() == 1u);
    BOOST_TEST(entries_of(ex.tmp.path / "t", "LayerNormalization").size() == 2u);
    BOOST_TEST_REQUIRE(a.size() == 2u * 2 * 7 * 7);
    for (std::size_t row = 0; row < a.size() / 7; ++row)  // keys 5 and 6 are padding
        BOOST_TEST(a.at_flat(row * 7 + 5) + a.at_flat(row * 7 + 6) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(transformer_encoder_with_relu_runs_and_differentiates_like_pytorch) {
    // nn.TransformerEncoder's default activation is ReLU (ONNX Relu): 2 layers, norm_first,
    // sequence first, opset 14
    Exported ex;
    run_and_grad_like_torch(ex, "encoder", {"x"}, "x");
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Relu").size() == 2u);
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Softmax").size() == 2u);
}

BOOST_AUTO_TEST_CASE(llama_block_with_repeat_interleave_and_silu_runs_and_differentiates_like_pytorch) {
    // repeat_interleave exports a Split of its constant repeats (folded at import) feeding the
    // Expand's shape; SiLU exports as x·Sigmoid(x)
    Exported ex;
    run_and_grad_like_torch(ex, "llama", {"x"}, "x");
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Sigmoid").size() == 1u);
}

BOOST_AUTO_TEST_CASE(multihead_attention_with_bool_padding_and_attention_masks_as_inputs) {
    // torch combines the two bool masks with Or (0/1 values here) before the softmax
    Exported ex;
    run_and_grad_like_torch(ex, "mha_masks", {"x", "kpm", "am"});
    const auto softmax = entries_of(ex.tmp.path / "t", "Softmax");
    BOOST_TEST_REQUIRE(softmax.size() == 1u);
    const Tensor a = load_npy(ex.tmp.path / "t" / softmax[0]["file"].get<std::string>());
    BOOST_TEST_REQUIRE(a.size() == 2u * 4 * 6 * 6);
    // batch 1: keys 4 and 5 are padding; query i sees keys j <= i (am masks j > i)
    for (std::size_t h = 0; h < 4; ++h)
        for (std::size_t i = 0; i < 6; ++i)
            for (std::size_t j = 0; j < 6; ++j)
                if (j > i || j >= 4) BOOST_TEST(a.at_flat(((4 + h) * 6 + i) * 6 + j) == 0.0);
}

BOOST_AUTO_TEST_CASE(clamp_abs_leaky_relu_softplus_maximum_minimum_run_and_differentiate_like_pytorch) {
    // torch.clamp (both bounds; min only: Clip with an absent max), relu6, hardtanh,
    // leaky_relu, abs, softplus, maximum, minimum, exported at opset 17
    Exported ex;
    run_and_grad_like_torch(ex, "activations", {"x"}, "x");
    for (const char* op : {"Abs", "LeakyRelu", "Softplus", "Max", "Min"})
        BOOST_TEST(entries_of(ex.tmp.path / "t", op).size() == 1u, op);
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Clip").size() >= 3u);
}

BOOST_AUTO_TEST_CASE(attention_written_with_einsum_runs_and_differentiates_like_pytorch) {
    // torch.einsum exports one Einsum node per call: the projections against (d, h, e)
    // weights, the scores, weights times values, the output projection and a trace ("bhii->b")
    Exported ex;
    run_and_grad_like_torch(ex, "einsum", {"x"}, "x");
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Softmax").size() == 1u);
    BOOST_TEST(entries_of(ex.tmp.path / "t", "MatMul").size() == 6u);
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Gather").size() == 1u);  // the diagonal
}

BOOST_AUTO_TEST_CASE(ops_written_out_at_import_run_and_differentiate_like_pytorch) {
    // hardsigmoid, hardswish, elu, selu, celu, mish, PReLU, F.pad (reflect, replicate, a
    // constant pad cropping a column), repeat, cumsum, 2- and 1-norm, amin, logsumexp,
    // log_softmax, softsign and <=, exported at opset 17, each written out with attngraph's ops
    // at import (docs/onnx.md)
    Exported ex;
    run_and_grad_like_torch(ex, "written_out", {"x"}, "x");
    // the exported ops, by the steps the import writes for them (torch 1.13 writes mish, the
    // 2-norm and softsign out itself: Softplus, Tanh, Mul; Mul, ReduceSum, Sqrt; Abs, Add, Div)
    const nlohmann::json manifest = nlohmann::json::parse(slurp(ex.tmp.path / "t" / "manifest.json"));
    std::set<std::string> suffixes;
    for (const auto& e : manifest["entries"]) {
        const std::string name = e.value("name", std::string());
        const auto dot = name.rfind('.');
        if (dot != std::string::npos) suffixes.insert(name.substr(dot + 1));
    }
    for (const char* step : {"gate", "alpha_expm1", "gamma_below", "over_alpha", "negative", "padded_axis1", "expanded",
                             "max_is_inf", "abs", "max_negated", "log_sum", "equal"})
        BOOST_TEST(suffixes.count(step) == 1u, step);
}

BOOST_AUTO_TEST_CASE(step_functions_and_integer_arithmetic_run_and_differentiate_like_pytorch) {
    // floor, ceil, round, sign, remainder and fmod of computed floats, a float truncated to
    // int64, position ids from an int64 mask (cumsum − 1) and their integer division, argmax,
    // argmin and topk, exported
    // at opset 17: the output and d sum(Y) / dx within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "rounding", {"x", "mask"}, "x");
    const nlohmann::json manifest = nlohmann::json::parse(slurp(ex.tmp.path / "t" / "manifest.json"));
    std::set<std::string> ops;
    for (const auto& e : manifest["entries"]) ops.insert(e.value("op", std::string()));
    for (const char* op : {"Floor", "Ceil", "Round", "Sign", "Mod", "CumSum", "ArgMax", "ArgMin", "TopK"})
        BOOST_TEST(ops.count(op) == 1u, op);
}

BOOST_AUTO_TEST_CASE(a_static_kv_cache_written_at_run_time_positions_runs_and_differentiates_like_pytorch) {
    // keys written with index_copy (ScatterElements), values with `cache[:, pos] = v`
    // (ScatterND), at positions given as an int64 input, then attention over the cache: the
    // output and the gradients of the new tokens and of the value cache within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "kv_scatter", {"x", "pos", "cache_k", "cache_v"}, "x");
    const nlohmann::json manifest = nlohmann::json::parse(slurp(ex.tmp.path / "t" / "manifest.json"));
    std::set<std::string> ops;
    for (const auto& e : manifest["entries"]) ops.insert(e.value("op", std::string()));
    for (const char* op : {"ScatterElements", "ScatterND"}) BOOST_TEST(ops.count(op) == 1u, op);
    for (const char* trace : {"t", "g"}) fs::remove_all(ex.tmp.path / trace);
    run_and_grad_like_torch(ex, "kv_cache_grad", {"x", "pos", "cache_k", "cache_v"}, "cache_v");
}

BOOST_AUTO_TEST_CASE(router_weights_and_beam_tokens_read_with_torch_gather_like_pytorch) {
    // torch.gather exports GatherElements: indices from topk (computed) and from an int64 input
    // (a position read twice); the output and d sum(Y) / dx within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "gathers", {"x", "beam"}, "x");
    BOOST_TEST(entries_of(ex.tmp.path / "t", "GatherElements").size() == 2u);
}

BOOST_AUTO_TEST_CASE(slots_summed_with_scatter_add_index_add_and_accumulating_index_put_like_pytorch) {
    // token features summed into slots named by int64 inputs, tokens sharing slots:
    // scatter_add exports a ScatterElements with reduction add; the output and d sum(Y) / dx
    // within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "pooling", {"x", "slot", "pos"}, "x");
    const nlohmann::json manifest = nlohmann::json::parse(slurp(ex.tmp.path / "t" / "manifest.json"));
    bool reduced = false;
    for (const auto& e : manifest["entries"])
        if (e.value("op", std::string()) == "ScatterElements")
            reduced = reduced || e.dump().find("reduction=add") != std::string::npos;
    BOOST_TEST(reduced, "no ScatterElements with reduction add in the trace");
}

BOOST_AUTO_TEST_CASE(patch_embedding_and_audio_front_end_convolutions_run_and_differentiate_like_pytorch) {
    // Conv2d with stride = kernel (a vision transformer's patches), Conv1d with padding and
    // stride 2 (Whisper's front end), a depthwise dilated Conv1d, then attention over the
    // tokens: the output and d sum(Y) / dimg within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "conv_front", {"img"}, "img");
    BOOST_TEST(entries_of(ex.tmp.path / "t", "Conv").size() == 4u);
}

BOOST_AUTO_TEST_CASE(group_instance_and_batch_normalization_in_eval_mode_like_pytorch) {
    // GroupNorm, InstanceNorm1d (affine), BatchNorm1d on (N, C, L) and (N, C) with running
    // statistics: the output and d sum(Y) / dx within 1e-5 of PyTorch's
    Exported ex;
    run_and_grad_like_torch(ex, "norms", {"x"}, "x");
    // the instance norm and the group norm (torch: an InstanceNormalization of the groups)
    BOOST_TEST(entries_of(ex.tmp.path / "t", "LayerNormalization").size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_onnx_torch
