#!/usr/bin/env python3
# PyTorch's own anchors for bench/zero/zero_step.cpp (same models, batch, threads, fp32 Adam lr 1e-3,
# synthetic data): DDP + Adam ("ddp") and DDP + torch.distributed.optim.ZeroRedundancyOptimizer, which
# shards Adam's state as ZeRO stage 1 does ("zero1"). Starts --nproc ranks (fork); rank 0 prints RESULT.
import argparse, os, sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ddp"))
from ddp_step import setup_rank, spawn_ranks, timed_steps  # noqa: E402


def rank_main(rank, args, port):
    net, x, y = setup_rank(rank, args, port)
    model = nn.parallel.DistributedDataParallel(net)
    if args.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    elapsed = timed_steps(model, opt, x, y, args)
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
    spawn_ranks(rank_main, p.parse_args())


if __name__ == "__main__":
    main()
