#!/usr/bin/env python3
# PyTorch eager twin of bench/gpu/gpu_step.cpp: same models (FashionCNN; torchvision's ResNet-18 with
# the CIFAR stem), batch, SGD with momentum and timing. --mode ddp wraps the model in PyTorch's DDP on
# a world of one (NCCL on cuda, Gloo on cpu). Prints one RESULT line.
import argparse, os, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ddp"))
from ddp_step import Cnn  # noqa: E402  (the same FashionCNN as bench/ddp/models.h)


def resnet18_cifar():
    import torchvision
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    net.maxpool = nn.Identity()
    return net


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "resnet18"], default="cnn")
    p.add_argument("--mode", choices=["plain", "ddp"], default="plain")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(0)
    net = (Cnn() if a.model == "cnn" else resnet18_cifar()).to(device)
    if a.mode == "ddp":
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29000 + os.getpid() % 1000))
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=0, world_size=1)
        net = nn.parallel.DistributedDataParallel(net)
    shape = (a.batch, 1, 28, 28) if a.model == "cnn" else (a.batch, 3, 32, 32)
    x = torch.randn(*shape, device=device)
    y = torch.randint(0, 10, (a.batch,), device=device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    s = time.perf_counter() - start
    print(f"RESULT impl=pytorch_{a.mode} model={a.model} device={a.device} batch={a.batch} "
          f"samples_per_s={a.batch * a.steps / s:.1f} ms_per_step={1000 * s / a.steps:.3f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
