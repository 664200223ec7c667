#!/usr/bin/python3
"""Exports torch.nn.MultiheadAttention (self-attention, batch 1, static shapes) to ONNX.

usage: /usr/bin/python3 bench/peers/export_mha.py --seq N --d-model D --heads H [--layers L] OUT.onnx
The module is the one bench/torch_mha.py times; opset 17, as ONNX Runtime's peers figure.
--layers L stacks L of them (each layer's output is the next one's input): 11 layers of
d_model 768 make a 104 MB model, for timing the import (scripts/bench-import.sh).
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--seq", type=int, required=True)
p.add_argument("--d-model", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--layers", type=int, default=1)
p.add_argument("out")
a = p.parse_args()


class SelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(a.d_model, a.heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Stack(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(SelfAttention() for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


torch.manual_seed(1)
model = (SelfAttention() if a.layers == 1 else Stack(a.layers)).eval()
x = torch.rand(1, a.seq, a.d_model) * 2 - 1
# with gradients on, nn.MultiheadAttention takes its composite path (its inference fast path,
# aten::_native_multi_head_attention, has no ONNX export)
torch.onnx.export(model, (x,), a.out, opset_version=17, input_names=["X"], output_names=["Y"])
