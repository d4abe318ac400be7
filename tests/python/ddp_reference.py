#!/usr/bin/python3
# PyTorch's own DistributedDataParallel as the reference for cohort's (tests/multiproc/
# ddp_pytorch_parity_test.cpp): loads the initial weights and data the C++ ranks saved in --dir, trains
# the same model on --world-size Gloo processes, and compares rank 0's parameters and buffers with the
# C++ final weights. Prints "max-abs-diff: X" and "max-abs-change: X"; exits 0 when the difference is
# below --tolerance, 1 when not, 2 when torch or the input files are missing. Use /usr/bin/python3.
import argparse
import datetime
import os
import faulthandler
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    print(f"ddp_reference.py: cannot import torch ({error}); install the Debian package "
          f"python3-torch and run with /usr/bin/python3", file=sys.stderr)
    sys.exit(2)


# Same architectures, registration order and names as the C++ test (named_parameters must match).
class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(36, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


MODELS = {"mlp": Mlp, "cnn": Cnn}


def load(path):
    if not os.path.exists(path):
        print(f"ddp_reference.py: {path} not found (the C++ ranks write it)", file=sys.stderr)
        sys.exit(2)
    # The C++ ranks of this test wrote the file (torch::pickle_save tags its dicts with
    # torch.jit._pickle.restore_type_tag, which 2.6+'s weights_only default refuses).
    return torch.load(path, weights_only=False)


def worker(rank, args):
    """One Gloo rank: rank r trains on rows r*B..(r+1)*B of each global batch, as the C++ ranks do."""
    torch.set_num_threads(1)  # as the C++ ranks (OMP_NUM_THREADS=1)
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, before the test's timeout
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="file://" + os.path.join(args.dir, "rendezvous"), rank=rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=60))
    model = MODELS[args.model]()
    model.load_state_dict(load(os.path.join(args.dir, "init.pt")))  # strict: the names must match
    data = load(os.path.join(args.dir, "data.pt"))
    ddp = nn.parallel.DistributedDataParallel(model)
    if args.powersgd_rank > 0:  # PyTorch's PowerSGD hook (needs numpy: the 2.11 venv's python has it)
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(None, matrix_approximation_rank=args.powersgd_rank,
                                       start_powerSGD_iter=args.powersgd_start, random_seed=args.powersgd_seed)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    b = args.batch
    for step in range(args.steps):
        opt.zero_grad()
        x = data["x"][step][rank * b:(rank + 1) * b]
        y = data["y"][step][rank * b:(rank + 1) * b]
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(args.dir, "python_final.pt"))
    dist.destroy_process_group()


def max_abs_diff(a, b, floating_only=False):
    """Largest |a - b| over the tensors of two state dicts with the same names."""
    worst, where = 0.0, None
    for name in a:
        if floating_only and not a[name].is_floating_point():
            continue
        d = (a[name].double() - b[name].double()).abs().max().item()
        if d > worst or where is None:
            worst, where = d, name
    return worst, where


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True, help="rows per rank per step")
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--momentum", type=float, required=True)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--powersgd-rank", type=int, default=0, help="> 0: register powerSGD_hook of this rank")
    parser.add_argument("--powersgd-start", type=int, default=2)
    parser.add_argument("--powersgd-seed", type=int, default=0)
    args = parser.parse_args()

    print(f"torch {torch.__version__}")
    # fork, not spawn: the ranks inherit the imported torch instead of importing it again (seconds
    # each); safe because the parent has run no torch op (no thread pool) yet.
    mp.start_processes(worker, args=(args,), nprocs=args.world_size, join=True,
                       start_method="fork")

    initial = load(os.path.join(args.dir, "init.pt"))
    cpp = load(os.path.join(args.dir, "final.pt"))
    python = load(os.path.join(args.dir, "python_final.pt"))
    if set(cpp) != set(python):
        print(f"different names: C++ {sorted(cpp)}, Python {sorted(python)}")
        return 1
    diff, where = max_abs_diff(cpp, python)
    change, _ = max_abs_diff(initial, python, floating_only=True)  # not num_batches_tracked
    print(f"max-abs-diff: {diff:.9g} (worst: {where})")
    print(f"max-abs-change: {change:.9g}")
    if diff >= args.tolerance:
        for name in cpp:
            print(f"  {name}: {max_abs_diff({name: cpp[name]}, {name: python[name]})[0]:.9g}")
        print(f"FAIL: cohort DDP and PyTorch DDP differ by {diff:.9g} >= {args.tolerance:g}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
