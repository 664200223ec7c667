"""Exports the PyTorch modules of tests/test_onnx_torch.cpp (Debian's python3-torch, opset 17,
static shapes) and writes, beside each model, the input and PyTorch's own output as .npy.

usage: python3 torch_export.py OUT_DIR
  OUT_DIR/mha.onnx, mha_x.npy, mha_y.npy           torch.nn.MultiheadAttention (8 heads of 4)
  OUT_DIR/causal.onnx, causal_x.npy, causal_y.npy  hand-written causal attention, 2 heads
  OUT_DIR/causal_attn.npy                           its attention weights (heads, n, n)
  OUT_DIR/bert.onnx, bert_x.npy, bert_y.npy        a BERT-style encoder layer: additive padding
                                                    mask, LayerNorm, GELU (erf) feed-forward
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
