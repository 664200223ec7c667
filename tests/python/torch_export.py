"""Exports the PyTorch modules of tests/test_onnx_torch.cpp (Debian's python3-torch, opset 17,
static shapes) and writes, beside each model, the input and PyTorch's own output as .npy.

usage: python3 torch_export.py OUT_DIR
  OUT_DIR/mha.onnx, mha_x.npy, mha_y.npy           torch.nn.MultiheadAttention (8 heads of 4)
  OUT_DIR/causal.onnx, causal_x.npy, causal_y.npy  hand-written causal attention, 2 heads
  OUT_DIR/causal_attn.npy                           its attention weights (heads, n, n)
  OUT_DIR/bert.onnx, bert_x.npy, bert_y.npy        a BERT-style encoder layer: additive padding
                                                    mask, LayerNorm, GELU (erf) feed-forward
  OUT_DIR/encoder.onnx, encoder_x.npy, encoder_y.npy, encoder_dx.npy
                                                    nn.TransformerEncoder: 2 layers, ReLU, norm_first,
                                                    sequence first, opset 14; dx: d sum(Y) / dx
  OUT_DIR/llama.onnx, llama_x.npy, llama_y.npy, llama_dx.npy
                                                    a LLaMA block: RMSNorm written out, RoPE from
                                                    cos/sin caches, GQA by repeat_interleave, SiLU MLP
  OUT_DIR/mha_masks.onnx, mha_masks_x.npy, _kpm.npy, _am.npy, _y.npy
                                                    nn.MultiheadAttention with a bool key_padding_mask
                                                    and a bool attn_mask, both graph inputs (0/1 in
                                                    the .npy files)
  OUT_DIR/activations.onnx, activations_x.npy, activations_y.npy, activations_dx.npy
                                                    torch.clamp (both bounds, min only), relu6,
                                                    hardtanh, abs, leaky_relu, softplus, maximum,
                                                    minimum around two Linears; dx: d sum(Y) / dx
  OUT_DIR/einsum.onnx, einsum_x.npy, einsum_y.npy, einsum_dx.npy
                                                    multi-head attention written with torch.einsum
                                                    (projections against (d, h, e) weights, scores,
                                                    weights times values, a trace of the scores);
                                                    dx: d sum(Y) / dx
  OUT_DIR/written_out.onnx, written_out_x.npy, written_out_y.npy, written_out_dx.npy
                                                    hardsigmoid, hardswish, elu, selu, celu, mish,
                                                    PReLU, F.pad (reflect, replicate, constant),
                                                    repeat, cumsum, norms, amin, logsumexp,
                                                    log_softmax, softsign, <= after a Linear;
                                                    dx: d sum(Y) / dx
  OUT_DIR/rounding.onnx, rounding_{x,mask,y,dx}.npy floor, ceil, round, sign, remainder, fmod, a
                                                    float truncated to int64, cumsum position ids,
                                                    argmax, argmin, topk; dx: d sum(Y) / dx
  OUT_DIR/kv_scatter.onnx, kv_cache_grad.onnx, kv_scatter_{x,pos,cache_k,cache_v,y,dx}.npy
                                                    a static KV cache written with index_copy and
                                                    `cache[:, pos] = v`; kv_cache_grad: d / dcache_v
  OUT_DIR/pooling.onnx, pooling_{x,slot,pos,y,dx}.npy
                                                    token features summed into slots: scatter_add,
                                                    index_add, index_put with accumulate (slots
                                                    repeated in scatter_add); dx: d sum(Y) / dx
  OUT_DIR/conv_front.onnx, conv_front_{img,y,dimg}.npy
                                                    a vision transformer's patch embedding (Conv2d,
                                                    stride = kernel), Whisper-style Conv1d + GELU
                                                    (stride 2), a depthwise dilated Conv1d, then
                                                    attention over the tokens; dimg: d sum(Y) / dimg
  OUT_DIR/norms.onnx, norms_{x,y,dx}.npy            GroupNorm and InstanceNorm1d (affine),
                                                    BatchNorm1d in eval mode on (N, C) and
                                                    (N, C, L), around a Linear
                                                    and a Tanh; dx: d sum(Y) / dx
  OUT_DIR/gathers.onnx, gathers_{x,beam,y,dx}.npy   torch.gather: a router's top-2 probabilities
                                                    read back at topk's positions, and tokens
                                                    kept by a beam's int64 positions; dx: d sum(Y) / dx
"""
import sys

import numpy as np
import torch

out = sys.argv[1]
torch.manual_seed(0)


class Mha(torch.nn.Module):
    def __init__(self, d=32, h=8):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(d, h, batch_first=True)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        return y


class Causal(torch.nn.Module):
    """Q, K, V projections, 2 heads, scores + a 0/-inf causal mask, softmax, output projection."""

    def __init__(self, n=6, d=8, h=2):
        super().__init__()
        self.h, self.dk = h, d // h
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def heads(self, t):
        n = t.shape[0]
        return t.reshape(n, self.h, self.dk).transpose(0, 1)

    def forward(self, x):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        s = q @ k.transpose(-1, -2) / self.dk ** 0.5 + self.mask
        a = torch.softmax(s, dim=-1)
        self.last_attn = a
        o = (a @ v).transpose(0, 1).reshape(x.shape[0], -1)
        return self.o(o)


class Bert(torch.nn.Module):
    """A BERT encoder layer: 2 heads, an additive padding mask (the last 2 of 7 keys get
    -10000), residual + LayerNorm, a feed-forward with the exact GELU (erf), residual + LayerNorm."""

    def __init__(self, n=7, d=8, h=2, ff=16):
        super().__init__()
        self.h, self.dk = h, d // h
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff1, self.ff2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)
        keep = torch.tensor([1.0] * (n - 2) + [0.0] * 2)
        self.register_buffer("mask", (1.0 - keep) * -10000.0)

    def heads(self, t):
        b, n, _ = t.shape
        return t.reshape(b, n, self.h, self.dk).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        s = q @ k.transpose(-1, -2) / self.dk ** 0.5 + self.mask
        a = torch.softmax(s, dim=-1)
        o = (a @ v).transpose(1, 2).reshape(x.shape)
        x = self.ln1(x + self.o(o))
        return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


def export(name, module, x):
    module.eval()
    with torch.no_grad():
        y = module(x)
    torch.onnx.export(module, x, f"{out}/{name}.onnx", opset_version=17, input_names=["x"], output_names=["Y"])
    np.save(f"{out}/{name}_x.npy", x.numpy())
    np.save(f"{out}/{name}_y.npy", y.numpy())
    return module


export("mha", Mha(), torch.randn(1, 10, 32))
causal = export("causal", Causal(), torch.randn(6, 8))
np.save(f"{out}/causal_attn.npy", causal.last_attn.detach().numpy())
export("bert", Bert(), torch.randn(2, 7, 8))


def export_with(name, module, inputs, opset=17, grad_of=None):
    """Like export, for several named inputs (bool ones saved as 0/1 float32); with grad_of,
    also saves d sum(Y) / d inputs[grad_of] as <name>_d<grad_of>.npy."""
    module.eval()
    with torch.no_grad():
        y = module(*inputs.values())
    torch.onnx.export(module, tuple(inputs.values()), f"{out}/{name}.onnx", opset_version=opset,
                      input_names=list(inputs), output_names=["Y"])
    for key, value in inputs.items():
        np.save(f"{out}/{name}_{key}.npy", value.numpy().astype(np.float32))
    np.save(f"{out}/{name}_y.npy", y.numpy())
    if grad_of:
        args = {k: v.clone().requires_grad_(k == grad_of) for k, v in inputs.items()}
        module(*args.values()).sum().backward()
        np.save(f"{out}/{name}_d{grad_of}.npy", args[grad_of].grad.numpy())


class Encoder(torch.nn.Module):
    def __init__(self, d=16, h=4, ff=32):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation="relu", norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


class Llama(torch.nn.Module):
    """4 query heads, 2 key/value heads (repeat_interleave), RoPE, causal mask, SiLU-gated MLP."""

    def __init__(self, d=32, h=4, kvh=2, n=16, ff=48):
        super().__init__()
        self.h, self.kvh, self.hd = h, kvh, d // h
        self.q_proj = torch.nn.Linear(d, h * self.hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kvh * self.hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kvh * self.hd, bias=False)
        self.o_proj = torch.nn.Linear(h * self.hd, d, bias=False)
        self.gate, self.up = torch.nn.Linear(d, ff, bias=False), torch.nn.Linear(d, ff, bias=False)
        self.down = torch.nn.Linear(ff, d, bias=False)
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(n).float(), inv)
        emb = torch.cat((freqs, freqs), -1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)
        self.register_buffer("causal", torch.full((n, n), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        hx = self.norm1(x)
        q = self.q_proj(hx).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(hx).view(b, s, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(hx).view(b, s, self.kvh, self.hd).transpose(1, 2)
        cos, sin = self.cos_cached[:s][None, None], self.sin_cached[:s][None, None]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.h // self.kvh, dim=1)
        v = v.repeat_interleave(self.h // self.kvh, dim=1)
        a = torch.softmax(q @ k.transpose(2, 3) / self.hd ** 0.5 + self.causal[:s, :s], dim=-1)
        x = x + self.o_proj((a @ v).transpose(1, 2).reshape(b, s, -1))
        hx = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(hx)) * self.up(hx))


class MhaMasks(torch.nn.Module):
    def __init__(self, d=16, h=4):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(d, h, batch_first=True)

    def forward(self, x, kpm, am):
        y, _ = self.attn(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=False)
        return y


export_with("encoder", Encoder(), {"x": torch.randn(5, 2, 16)}, opset=14, grad_of="x")
export_with("llama", Llama(), {"x": torch.randn(2, 7, 32)}, grad_of="x")
export_with("mha_masks", MhaMasks(), {"x": torch.randn(2, 6, 16),
                                      "kpm": torch.tensor([[False] * 6, [False] * 4 + [True] * 2]),
                                      "am": torch.ones(6, 6, dtype=torch.bool).triu(1)})


class Activations(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.lin, self.gate = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        F = torch.nn.functional
        h, g = self.lin(x), self.gate(x)
        a = torch.clamp(h, -0.5, 0.75) + F.relu6(3 * h) + F.hardtanh(h) + h.clamp(min=0.1)
        b = F.leaky_relu(h, 0.2) * torch.abs(g) + F.softplus(2 * h)
        return a + b + torch.maximum(h, g) - torch.minimum(h, x)


export_with("activations", Activations(), {"x": torch.randn(3, 8)}, grad_of="x")


class EinsumAttention(torch.nn.Module):
    """Multi-head attention written with torch.einsum, each einsum an ONNX Einsum node."""

    def __init__(self, d=8, h=2, e=4):
        super().__init__()
        self.scale = e ** -0.5
        self.wq, self.wk, self.wv = (torch.nn.Parameter(torch.randn(d, h, e) * 0.4) for _ in range(3))
        self.wo = torch.nn.Parameter(torch.randn(h, e, d) * 0.4)

    def forward(self, x):
        q = torch.einsum("bnd,dhe->bhne", x, self.wq)
        k = torch.einsum("bnd,dhe->bhne", x, self.wk)
        v = torch.einsum("bnd,dhe->bhne", x, self.wv)
        s = torch.einsum("bhqe,bhke->bhqk", q, k) * self.scale
        o = torch.einsum("bhqk,bhke->bhqe", s.softmax(-1), v)
        y = torch.einsum("bhne,hed->bnd", o, self.wo)
        return y + 0.1 * torch.einsum("bhii->b", s)[:, None, None]


export_with("einsum", EinsumAttention(), {"x": torch.randn(2, 5, 8)}, grad_of="x")


class WrittenOut(torch.nn.Module):
    """The ops attngraph writes out at import with its own ops: hardsigmoid, hardswish, elu,
    selu, celu, mish, PReLU, F.pad (reflect, replicate, a constant one that crops a column),
    repeat (Tile), cumsum, 2- and 1-norms (ReduceL2, ReduceL1), amin (ReduceMin), logsumexp,
    log_softmax, softsign and a comparison (LessOrEqual)."""

    def __init__(self, d=6):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.prelu = torch.nn.PReLU(d, init=0.2)

    def forward(self, x):
        F = torch.nn.functional
        h = self.lin(x)
        a = (F.hardsigmoid(2 * h) + F.hardswish(3 * h) + F.elu(h, 0.7) + F.selu(h) + F.celu(h, 1.5) + F.mish(h)
             + self.prelu(h))
        reflect = F.pad(h[None], (1, 2), mode="reflect")[0]
        edge = F.pad(h[None], (2, 1), mode="replicate")[0]
        crop = F.pad(h, (-1, 4), value=0.5)
        norms = torch.cat([h.norm(dim=1, keepdim=True), h.norm(p=1, dim=1, keepdim=True),
                           h.amin(dim=1, keepdim=True), torch.logsumexp(h, dim=1, keepdim=True)], dim=1)
        picked = torch.where(h <= 0.1, h, 2 * h) + F.log_softmax(h, dim=1) + F.softsign(h)
        return torch.cat([a, reflect, edge, crop, h.repeat(1, 2), torch.cumsum(h, 1), norms, picked], dim=1)


export_with("written_out", WrittenOut(), {"x": torch.randn(3, 6)}, grad_of="x")


class Rounding(torch.nn.Module):
    """The step functions and integer arithmetic a model computes at run time: floor, ceil,
    round, sign, remainder and fmod of floats; a float truncated to int64 (Cast); position ids
    from an int64 padding mask (CumSum, Sub) and an integer division of them (Div of int64,
    which truncates); argmax, argmin and topk."""

    def __init__(self, d=6):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x, mask):
        h = self.lin(x)
        steps = (4 * h).floor() + (4 * h).ceil() + (3 * h).round() + h.sign()
        rem = torch.remainder(3 * h, 0.7) + torch.fmod(3 * h, 0.7)
        trunc = (5 * h).long().float()
        pos = mask.cumsum(-1) - 1
        halves = torch.div(pos * 7 - 9, 2, rounding_mode="trunc")
        picks = torch.cat([h.argmax(dim=1, keepdim=True), h.argmin(dim=1, keepdim=True)], dim=1).float()
        top, at = h.topk(2, dim=1)
        return torch.cat([h * pos.float(), steps, rem, trunc, halves.float(), picks, top, at.float()], dim=1)


export_with("rounding", Rounding(), {"x": torch.randn(3, 6), "mask": torch.tensor([[1, 1, 1, 1, 0, 0],
                                                                                  [1, 1, 1, 1, 1, 1],
                                                                                  [0, 1, 1, 0, 1, 1]])},
            grad_of="x")


class KvScatter(torch.nn.Module):
    """A static KV cache written at positions given at run time, then read by attention: the
    keys with index_copy (ScatterElements), the values with index_put (`cache[:, pos] = v`,
    ScatterND)."""

    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.d = d

    def forward(self, x, pos, cache_k, cache_v):
        keys = cache_k.index_copy(1, pos, self.k(x))
        values = cache_v.clone()
        values[:, pos] = self.v(x)
        weights = torch.softmax(self.q(x) @ keys.transpose(1, 2) / self.d ** 0.5, dim=-1)
        return weights @ values


kv_inputs = {"x": torch.randn(1, 2, 8), "pos": torch.tensor([5, 2]), "cache_k": torch.randn(1, 7, 8),
             "cache_v": torch.randn(1, 7, 8)}
kv_scatter = KvScatter()
export_with("kv_scatter", kv_scatter, kv_inputs, grad_of="x")
export_with("kv_cache_grad", kv_scatter, kv_inputs, grad_of="cache_v")


class Pooling(torch.nn.Module):
    """Token features summed into slots at positions given at run time, as a mixture-of-experts
    combine or a segment sum: scatter_add (ScatterElements, reduction add; several tokens share
    a slot), index_add and index_put with accumulate (torch 1.13 exports both as a scatter into
    zeros and an Add, which is right only for distinct positions: pos has no repeats)."""

    def __init__(self, d=8):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.d = d

    def forward(self, x, slot, pos):
        h = torch.tanh(self.proj(x))
        pooled = torch.zeros(2, 4, self.d).scatter_add(1, slot.unsqueeze(-1).expand(-1, -1, self.d), h)
        pooled = pooled.index_add(1, pos, h[:, :3])
        acc = pooled.clone()
        acc.index_put_((torch.tensor([0, 1, 1]), pos), h[0, :3], accumulate=True)
        return acc * pooled


export_with("pooling", Pooling(), {"x": torch.randn(2, 5, 8), "slot": torch.tensor([[0, 2, 2, 1, 0], [3, 3, 3, 0, 1]]),
                                   "pos": torch.tensor([1, 3, 0])}, grad_of="x")


class ConvFront(torch.nn.Module):
    """Convolutions in front of attention: a vision transformer's patch embedding (Conv2d with
    stride = kernel, 4x4 patches), Whisper's audio front end (Conv1d k 3 pad 1, then stride 2,
    GELU after each), a depthwise dilated Conv1d, then multi-head attention over the tokens."""

    def __init__(self, d=16):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, d, 4, stride=4)
        self.conv1 = torch.nn.Conv1d(d, d, 3, padding=1)
        self.conv2 = torch.nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.depth = torch.nn.Conv1d(d, d, 3, padding=2, dilation=2, groups=d)
        self.attn = torch.nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, img):
        t = self.patch(img).flatten(2)  # (1, d, 16): the 16 patches as a sequence
        t = torch.nn.functional.gelu(self.conv1(t))
        t = torch.nn.functional.gelu(self.conv2(t))  # (1, d, 8)
        t = self.depth(t).transpose(1, 2)  # (1, 8, d)
        y, _ = self.attn(t, t, t, need_weights=False)
        return y


export_with("conv_front", ConvFront(), {"img": torch.randn(1, 3, 16, 16)}, grad_of="img")


class Norms(torch.nn.Module):
    """Normalizations of convolutional and older models, in eval mode: GroupNorm (3 groups; torch
    exports it as an InstanceNormalization of the groups) and InstanceNorm1d with affine
    weights, BatchNorm1d on (N, C, L) and on (N, C) with running statistics of their own
    (not the initial 0 and 1)."""

    def __init__(self, c=6, d=8):
        super().__init__()
        self.inorm = torch.nn.InstanceNorm1d(c, affine=True)
        self.gnorm = torch.nn.GroupNorm(3, c)
        self.bn3 = torch.nn.BatchNorm1d(c)
        self.proj = torch.nn.Linear(d, d)
        self.bn2 = torch.nn.BatchNorm1d(d)
        with torch.no_grad():
            for norm in (self.inorm, self.gnorm, self.bn3, self.bn2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)
            for bn in (self.bn3, self.bn2):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x):  # x (2, c, d)
        t = torch.tanh(self.bn3(self.inorm(x) + self.gnorm(x)))
        t = self.proj(t).sum(1)  # (2, d)
        return self.bn2(t)


export_with("norms", Norms(), {"x": torch.randn(2, 6, 8)}, grad_of="x")


class Gathers(torch.nn.Module):
    """torch.gather (GatherElements): a mixture-of-experts router's top-2 probabilities read back
    from its softmax at the positions topk computed, and the tokens a beam keeps, read along the
    sequence at int64 positions given at run time (one read twice)."""

    def __init__(self, d=8, experts=4):
        super().__init__()
        self.router = torch.nn.Linear(d, experts)

    def forward(self, x, beam):  # x (2, 5, d), beam (2, 3, d) positions along the sequence
        p = torch.softmax(self.router(x), -1)
        top = p.topk(2, dim=-1).indices
        weight = torch.gather(p, -1, top).sum(-1, keepdim=True)  # (2, 5, 1)
        kept = torch.gather(x, 1, beam)  # (2, 3, d)
        return weight * x + kept.sum(1, keepdim=True)


beam = torch.tensor([[4, 0, 4], [1, 3, 2]]).unsqueeze(-1).expand(-1, -1, 8).contiguous()
export_with("gathers", Gathers(), {"x": torch.randn(2, 5, 8), "beam": beam}, grad_of="x")
