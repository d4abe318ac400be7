#!/usr/bin/python3
# PyTorch's own Python DDP (gloo) on the same models, batch and threads as bench/ddp/ddp_step.cpp:
# the anchor of the DDP benchmark. Starts --nproc ranks itself (fork) and rank 0 prints a RESULT line.
# Run with Debian's /usr/bin/python3 (python3-torch, the same LibTorch 1.13 as cohort's).
import argparse, os, socket, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


# The FashionCNN as models/fashion_mnist_net.h defines it (the one Python definition, models/).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from pytorch_models import FashionCnn as Cnn  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(512, 10 if i == 7 else 512) for i in range(8)])

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


def setup_rank(rank, args, port):
    """Joins the Gloo group and makes this rank's model input and labels (the same on every rank)."""
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    net = Cnn() if args.model == "cnn" else Mlp()
    x = torch.randn(args.batch, 1, 28, 28) if args.model == "cnn" else torch.randn(args.batch, 512)
    y = torch.randint(0, 10, (args.batch,))
    return net, x, y


def timed_steps(model, opt, x, y, args):
    """Seconds for args.steps steps after args.warmup, between barriers so every rank is counted."""
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.barrier()
    return time.perf_counter() - start


def rank_main(rank, args, port):
    net, x, y = setup_rank(rank, args, port)
    model = nn.parallel.DistributedDataParallel(net) if args.nproc > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elapsed = timed_steps(model, opt, x, y, args)
    if rank == 0:
        print(f"RESULT impl=pytorch model={args.model} ranks={args.nproc} batch={args.batch} "
              f"samples_per_s={args.steps * args.batch * args.nproc / elapsed:.1f} "
              f"step_ms={1000 * elapsed / args.steps:.2f}", flush=True)
    dist.destroy_process_group()


def spawn_ranks(target, args, method="fork"):
    """Runs target(rank, args, port) in args.nproc processes (multiprocessing start `method`: fork, or
    spawn for fresh interpreters); exits with the worst exit code."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=target, args=(r, args, port)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode for p in procs))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["cnn", "mlp"], default="mlp")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    spawn_ranks(rank_main, parser.parse_args())


if __name__ == "__main__":
    main()
