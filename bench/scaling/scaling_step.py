#!/usr/bin/python3
# PyTorch's Python DDP (gloo) on the models of bench/scaling/scaling_step.cpp (models/pytorch_models.py,
# the same definitions), the same batch, threads and SGD with momentum, on random CIFAR-shaped data
# (synthetic, like the C++ side). Starts --nproc ranks itself, or is one rank under torchrun (RANK and
# WORLD_SIZE set: bench/hosts/run.sh across hosts); rank 0 prints a RESULT line. --comm-hook powersgd
# registers PyTorch's PowerSGD hook (rank --powersgd-rank, compressing from step 2, error feedback on).
import argparse, os, sys

import torch
import torch.distributed as dist
import torch.nn as nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "models"))
sys.path.insert(0, os.path.join(here, "..", "ddp"))
from pytorch_models import FashionCnn, ResNet18, ViT  # noqa: E402
from ddp_step import spawn_ranks, timed_steps  # noqa: E402


def register_hook(model, args):
    """The --comm-hook on a DDP model: PowerSGD compresses every step after the first two, which are
    plain allreduces (PyTorch's minimum with error feedback), so give --warmup 2 or more."""
    if args.comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                       start_powerSGD_iter=2)
        model.register_comm_hook(state, powersgd.powerSGD_hook)


def rank_main(rank, args, port):
    """One rank: port of 127.0.0.1 when this script started the ranks, None under torchrun (env://)."""
    if args.bind_cores:  # as cohortrun --bind-cores does for the C++ side: rank r on core r
        os.sched_setaffinity(0, {int(os.environ.get("LOCAL_RANK", rank)) % os.cpu_count()})
    torch.set_num_threads(args.threads)
    init = "env://" if port is None else f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    net = {"resnet18": lambda: ResNet18(10, cifar_stem=True), "vit": ViT, "cnn": FashionCnn}[args.model]()
    shape = (args.batch, 1, 28, 28) if args.model == "cnn" else (args.batch, 3, 32, 32)
    torch.manual_seed(rank)
    x, y = torch.randn(*shape), torch.randint(0, 10, (args.batch,))
    model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=args.bucket_cap_mb) if args.nproc > 1 else net
    if args.nproc > 1:
        register_hook(model, args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elapsed = timed_steps(model, opt, x, y, args)
    if rank == 0:
        print(f"RESULT impl=pytorch_ddp model={args.model} ranks={args.nproc} batch={args.batch} "
              f"threads={args.threads} samples_per_s={args.steps * args.batch * args.nproc / elapsed:.1f} "
              f"step_ms={1000 * elapsed / args.steps:.2f} torch={torch.__version__} hook={args.comm_hook} data=synthetic",
              flush=True)
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
    p.add_argument("--comm-hook", choices=["none", "powersgd"], default="none", help="DDP communication hook")
    p.add_argument("--powersgd-rank", type=int, default=1, help="PowerSGD's matrix approximation rank")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0,
                   help="DDP's bucket_cap_mb (PyTorch's PowerSGD on Gloo needs one bucket: several failed here)")
    args = p.parse_args()
    if args.comm_hook == "powersgd" and args.warmup < 2:
        p.error(f"--comm-hook powersgd needs --warmup 2 or more (PowerSGD compresses from step 2), got {args.warmup}")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank of torchrun's
        args.nproc = int(os.environ["WORLD_SIZE"])
        rank_main(int(os.environ["RANK"]), args, None)
    else:
        spawn_ranks(rank_main, args)


if __name__ == "__main__":
    main()
