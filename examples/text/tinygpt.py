"""A tiny causal transformer language model in PyTorch, written as small models usually are:
token and learned position embeddings, pre-LN blocks whose attention is Linear, reshape,
transpose, matmul and softmax under a causal mask, a GELU MLP, and a linear head.

The head's logits come out as (batch, vocabulary, time), classes on axis 1, which is the layout
cross entropy over sequences takes (torch's F.cross_entropy and ONNX's SoftmaxCrossEntropyLoss)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

F = torch.nn.functional


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        n, t, d = x.shape
        heads = lambda z: z.reshape(n, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = (heads(z) for z in self.qkv(self.ln1(x)).split(d, dim=2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()  # the exporter folds this to a constant
        attention = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab: int, context: int, dim: int = 32, heads: int = 2, layers: int = 2):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x)).transpose(1, 2)


def export(model: TinyGPT, batch: int, context: int, path: Path) -> Path:
    """ONNX (TorchScript exporter, opset 17) with the token ids as an int64 input of fixed shape.
    Constants stay unfolded, so every parameter keeps its state_dict name (folding would turn the
    position rows the model slices into an exporter constant, which edgetrain freezes by default)."""
    ids = torch.zeros(batch, context, dtype=torch.int64)
    torch.onnx.export(
        model,
        (ids,),
        str(path),
        input_names=["ids"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
        do_constant_folding=False,
    )
    return path
