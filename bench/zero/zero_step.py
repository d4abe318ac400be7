#!/usr/bin/env python3
# PyTorch's own anchors for bench/zero/zero_step.cpp (same models, batch, threads, fp32 Adam lr 1e-3,
# synthetic data): DDP + Adam ("ddp") and DDP + torch.distributed.optim.ZeroRedundancyOptimizer, which
# shards Adam's state as ZeRO stage 1 does ("zero1"). Starts --nproc ranks (fork); rank 0 prints RESULT.
import argparse, os, socket, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ddp"))
from ddp_step import Cnn, Mlp  # noqa: E402


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    net = Cnn() if args.model == "cnn" else Mlp()
    x = torch.randn(args.batch, 1, 28, 28) if args.model == "cnn" else torch.randn(args.batch, 512)
    y = torch.randint(0, 10, (args.batch,))
    model = nn.parallel.DistributedDataParallel(net)
    if args.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"RESULT mode=torch_{args.mode} model={args.model} ranks={args.nproc} "
              f"samples_per_s={args.steps * args.batch * args.nproc / elapsed:.1f} "
              f"step_ms={1000 * elapsed / args.steps:.2f} torch={torch.__version__.split('+')[0]}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "mlp"], default="mlp")
    p.add_argument("--mode", choices=["ddp", "zero1"], default="zero1")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, args, port)) for r in range(args.nproc)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    sys.exit(max(proc.exitcode for proc in procs))


if __name__ == "__main__":
    main()
