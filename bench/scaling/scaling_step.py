#!/usr/bin/python3
# PyTorch's Python DDP (gloo) on the models of bench/scaling/scaling_step.cpp (models/pytorch_models.py,
# the same definitions), the same batch, threads and SGD with momentum, on random CIFAR-shaped data
# (synthetic, like the C++ side). Starts --nproc ranks itself and rank 0 prints a RESULT line.
import argparse, os, sys

import torch
import torch.distributed as dist
import torch.nn as nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "models"))
sys.path.insert(0, os.path.join(here, "..", "ddp"))
from pytorch_models import FashionCnn, ResNet18, ViT  # noqa: E402
from ddp_step import spawn_ranks, timed_steps  # noqa: E402


def rank_main(rank, args, port):
    if args.bind_cores:  # as cohortrun --bind-cores does for the C++ side: rank r on core r
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    net = {"resnet18": lambda: ResNet18(10, cifar_stem=True), "vit": ViT, "cnn": FashionCnn}[args.model]()
    shape = (args.batch, 1, 28, 28) if args.model == "cnn" else (args.batch, 3, 32, 32)
    torch.manual_seed(rank)
    x, y = torch.randn(*shape), torch.randint(0, 10, (args.batch,))
    model = nn.parallel.DistributedDataParallel(net) if args.nproc > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elapsed = timed_steps(model, opt, x, y, args)
    if rank == 0:
        print(f"RESULT impl=pytorch_ddp model={args.model} ranks={args.nproc} batch={args.batch} "
              f"threads={args.threads} samples_per_s={args.steps * args.batch * args.nproc / elapsed:.1f} "
              f"step_ms={1000 * elapsed / args.steps:.2f} torch={torch.__version__} data=synthetic", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["resnet18", "vit", "cnn"], default="resnet18")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bind-cores", action="store_true", help="pin rank r to core r")
    spawn_ranks(rank_main, p.parse_args())


if __name__ == "__main__":
    main()
