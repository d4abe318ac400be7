#!/usr/bin/env python3
# The models of models/*.h in PyTorch, for the parameter check (tests/models_test.cpp) and the PyTorch
# side of bench/scaling. torchvision is not installed here, so ResNet-18 and the VisionTransformer are
# written out as torchvision defines them (same module names, so the same state_dict keys), dropout
# left out (it has no parameters); the GPT is nanoGPT's, with its names. Run as a script it prints
# "param <model> <name> <sizes...>" for each parameter and "count <model> <parameters>".
import math
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18; cifar_stem: 3x3 stride-1 first convolution and no max-pool."""

    def __init__(self, num_classes=1000, cifar_stem=False):
        super().__init__()
        self.cifar_stem = cifar_stem
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False) if cifar_stem else nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, width in enumerate([64, 128, 256, 512]):
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, width, 1 if i == 0 else 2),
                                                         BasicBlock(width, width, 1)))
            cin = width
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if not self.cifar_stem:
            x = F.max_pool2d(x, 3, 2, 1)
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class EncoderBlock(nn.Module):
    def __init__(self, hidden, heads, mlp):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp, hidden))

    def forward(self, x):
        y = self.ln_1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, patches, hidden, depth, heads, mlp):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.randn(1, patches + 1, hidden) * 0.02)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(hidden, heads, mlp)) for i in range(depth)))
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(x + self.pos_embedding))


class ViT(nn.Module):
    """torchvision.models.VisionTransformer's layout; models/vit.h's defaults are the small CIFAR ViT."""

    def __init__(self, image=32, patch=4, hidden=192, depth=6, heads=3, mlp=768, classes=10):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, hidden, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.encoder = Encoder((image // patch) ** 2, hidden, depth, heads, mlp)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden, classes)))

    def forward(self, images):
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


class FashionCnn(nn.Module):
    """models/fashion_mnist_net.h: conv 32, conv 64, max-pool, fc 128, fc 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class GPTLayerNorm(nn.Module):
    """nanoGPT's LayerNorm: a weight and an optional bias."""

    def __init__(self, width, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = (y.view(b, t, self.n_head, e // self.n_head).transpose(1, 2)
                   for y in self.c_attn(x).split(e, dim=2))
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x, as LibTorch 2.x in models/gpt.h
            y = F.scaled_dot_product_attention(q, k, v, None, self.dropout if self.training else 0.0, True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = self.attn_dropout(F.softmax(att.masked_fill(future, float("-inf")), dim=-1)) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e)))


class GPTMLP(nn.Module):
    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class GPTBlock(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.ln_1 = GPTLayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = GPTLayerNorm(n_embd, bias)
        self.mlp = GPTMLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """models/gpt.h: nanoGPT's GPT with the head computed from transformer.wte.weight (tied, one tensor)."""

    def __init__(self, n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257, dropout=0.0, bias=True):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList(GPTBlock(n_embd, n_head, dropout, bias) for _ in range(n_layer)),
            ln_f=GPTLayerNorm(n_embd, bias)))
        for name, p in self.named_parameters():  # nanoGPT's initialisation, as models/gpt.h
            if ".ln_" in name:
                continue
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx):
        t = idx.size(-1)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device)))
        for block in self.transformer.h:
            x = block(x)
        return F.linear(self.transformer.ln_f(x), self.transformer.wte.weight)


MODELS = {
    "resnet18_imagenet": lambda: ResNet18(1000),
    "resnet18_10": lambda: ResNet18(10),
    "resnet18_cifar": lambda: ResNet18(10, cifar_stem=True),
    "vit_small_cifar": lambda: ViT(),
    "vit_b_16": lambda: ViT(224, 16, 768, 12, 12, 3072, 1000),
    "vit_tiny_16px": lambda: ViT(16, 4, 32, 2, 2, 64, 10),
    "fashion_mnist_cnn": FashionCnn,
    "gpt_mini_chars": lambda: GPT(6, 6, 192, 256, 96),
    "gpt_tiny_nobias": lambda: GPT(2, 2, 16, 8, 11, bias=False),
}

if __name__ == "__main__":
    for name, make in MODELS.items():
        net = make()
        for pname, p in net.named_parameters():
            print("param", name, pname, *p.shape)
        print("count", name, sum(p.numel() for p in net.parameters()))
